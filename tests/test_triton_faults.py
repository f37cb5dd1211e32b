"""gert_triton under device faults (issue 13), with the fake pb_utils: a device or runtime failure is INTERNAL, a
timeout UNAVAILABLE, bad input still INVALID_ARG; the model keeps serving. The same through the real server is in
tests/test_triton_e2e_faults.py."""

from __future__ import annotations

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from gert_triton.config import ConfigError, parse_parameters
from models import ort_run
from test_triton_unit import assert_error, check_seq, loaded, model_dir, outputs_of, params, pb, request, seq_bytes  # noqa: F401
from triton_models import SEQ_OUTPUTS, seq_inputs

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # injects faults into the host NPU


@pytest.fixture(autouse=True)
def _no_faults_left():
    gert.clear_faults()
    yield
    gert.clear_faults()


def test_request_timeout_ms_parameter():
    assert parse_parameters(params(request_timeout_ms="250")).get("request_timeout_s") == 0.25
    for bad in ("0", "-5", "soon", ""):
        with pytest.raises(ConfigError, match="request_timeout_ms"):
            parse_parameters(params(request_timeout_ms=bad))


def test_device_fault_is_internal_timeout_unavailable_bad_input_invalid(pb, loaded, tmp_path, seq_bytes):
    m = loaded(model_dir(tmp_path, seq_bytes), parameters=params(streams="1", request_timeout_ms="300"))
    assert m.model.pool.recovery.request_timeout_s == 0.3
    good = seq_inputs(1, 4, 1)
    check_seq(outputs_of(m.execute([request(pb, good)])[0]), good)

    gert.inject_fault("execute")
    r = m.execute([request(pb, good)])[0]
    assert_error(pb, r, pb.TritonError.INTERNAL, "ACL_ERROR_RT_AICORE_EXCEPTION", "507015", "injected execute fault")

    gert.inject_fault("hang", duration_ms=0)
    r = m.execute([request(pb, good)])[0]
    assert_error(pb, r, pb.TritonError.UNAVAILABLE, "timed out", "0.3 s", "device 0 stream 0")

    bad = dict(good, a=good["a"].astype(np.float64))
    r = m.execute([request(pb, bad)])[0]
    assert_error(pb, r, pb.TritonError.INVALID_ARG, "'a'", "float64")

    check_seq(outputs_of(m.execute([request(pb, good)])[0]), good)  # still serving
    st = m.model.stats()
    assert (st["failed_tasks"], st["timeouts"]) == (1, 1)


def test_sequence_fields_on_a_model_without_sequence_batching_are_refused(pb, loaded, tmp_path, seq_bytes):
    m = loaded(model_dir(tmp_path, seq_bytes), parameters=params(streams="1"))
    good = seq_inputs(1, 4, 2)
    reqs = [
        pb.InferenceRequest([pb.Tensor(k, v) for k, v in good.items()], ["y", "c"], **kw)
        for kw in ({"correlation_id": 7}, {"correlation_id": "abc"}, {"flags": 1}, {"flags": 2}, {})
    ]
    out = m.execute(reqs)
    for r, word in zip(out, ("sequence_id=7", "sequence_id='abc'", "sequence_start=True", "sequence_end=True")):
        assert_error(pb, r, pb.TritonError.INVALID_ARG, "no sequence batching", word)
    check_seq(outputs_of(out[4]), good)


@pytest.mark.parametrize(
    "gears", [{}, {"gears": "batch:1,2,4", "shape_policy": "batch:exact"}], ids=["pad", "exact-gear-pieces"]
)
def test_device_fault_in_a_merged_batch_fails_only_the_request_that_fails_alone(pb, loaded, tmp_path, seq_bytes, gears):
    """Triton merged 3 requests into one execute: their run faults (AI Core exception, 507015) and so does request
    0's run alone; the batch is retried request by request (Engine.run_many -> run_isolated), so request 0 is
    answered INTERNAL and the others get their own results, equal to ONNX Runtime's. With exact batch gears the
    merged 3 rows run as gear pieces 2 + 1 (gert_triton/gears.py) and each request's retry through the same split."""
    m = loaded(model_dir(tmp_path, seq_bytes), parameters=params(streams="1", **gears))
    reqs = [seq_inputs(1, 4, uid) for uid in (21, 22, 23)]
    for r, out in zip(reqs, m.execute([request(pb, r) for r in reqs])):  # compiles the graphs: no fault yet
        check_seq(outputs_of(out), r)
    gert.inject_fault("execute", count=2)  # the batch's (first piece's) run, then request 0's run alone
    try:
        out = m.execute([request(pb, r) for r in reqs])
    finally:
        gert.clear_faults()
    assert_error(pb, out[0], pb.TritonError.INTERNAL, "ACL_ERROR_RT_AICORE_EXCEPTION", "507015")
    for r, resp in zip(reqs[1:], out[1:]):
        got = outputs_of(resp)
        for name, want in zip(SEQ_OUTPUTS, ort_run(seq_bytes, [r["a"], r["m"]])):
            assert np.array_equal(got[name], want), name
    check_seq(outputs_of(m.execute([request(pb, reqs[0])])[0]), reqs[0])  # still serving
    assert m.model.stats()["batching"]["retried_batches"] == 1
    assert m.metrics.flush(10), "published"
    assert [x.value() for x in pb.family("gert_retried_batches_total").metrics] == [1]
