"""Issue 39 step 6: gert_triton's execute on the compiled lane. A merged Triton batch whose signature ran before runs
through the compiled hot path (gert/core/_hotpath.pyx) as Model.run(list) does, each request is validated once, and
every request still gets its own rows and its own error. Triton's pb_utils is the fake in fake_pb_utils.py; the
models run on gert (host NPU) in this process.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import fake_pb_utils
import gert
from _helpers import RUNTIME
from gert_triton import TritonPythonModel
from models import make_model, ort_run, vi
from test_triton_unit import assert_error, autocomplete, check_seq, init_args, model_dir, outputs_of, params, request
from triton_models import SEQ_OUTPUTS, seq_inputs

pytestmark = RUNTIME


@pytest.fixture
def pb(monkeypatch):
    return fake_pb_utils.install(monkeypatch)


def rows_model() -> bytes:
    """triton_models.seq_model with S fixed at 3, so that the batch is the only dynamic dim (a static graph per
    gear: what the compiled path runs): a f32[B, 3, 4], m i64[B, 3] -> y = ReduceSum(a, -1) * Cast(m), c = m + m."""
    nodes = [
        helper.make_node("ReduceSum", ["a", "last"], ["s"], keepdims=0),
        helper.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["s", "mf"], ["y"]),
        helper.make_node("Add", ["m", "m"], ["c"]),
    ]
    return make_model(
        nodes,
        [vi("a", np.float32, ["B", 3, 4]), vi("m", np.int64, ["B", 3])],
        [vi("y", np.float32, ["B", 3]), vi("c", np.int64, ["B", 3])],
        [numpy_helper.from_array(np.array([-1], np.int64), "last")],
        name="rows",
    )


@pytest.fixture(scope="module")
def seq_bytes():
    return rows_model()


@pytest.fixture
def served(pb, tmp_path, seq_bytes):
    """load(**parameters): the rows model as Triton loads it (default: one stream), finalized after."""
    models = []

    def load(**kv):
        mdir = model_dir(tmp_path / f"r{len(models)}", seq_bytes)
        m = TritonPythonModel()
        m.initialize(init_args(mdir, autocomplete(pb, mdir, parameters=params(**{"streams": "1", **kv}))))
        models.append(m)
        return m

    yield load
    for m in models:
        m.finalize()


def hot(m) -> dict:
    return m.model.stats()["hot_path"]


def check_alone(seq_bytes, reqs: list, responses: list) -> None:
    """Each response is ONNX Runtime's result of its own request, run alone: no row of another request."""
    assert len(responses) == len(reqs)
    for i, (r, resp) in enumerate(zip(reqs, responses)):
        got = outputs_of(resp)
        for name, want in zip(SEQ_OUTPUTS, ort_run(seq_bytes, [r["a"], r["m"]])):
            assert got[name].shape == want.shape and np.array_equal(got[name], want), f"request {i}: {name}"


def test_a_merged_batch_that_ran_before_takes_the_compiled_path_and_each_request_gets_its_rows(pb, served, seq_bytes):
    m = served()
    assert hot(m)["enabled"]
    rows = [1, 2, 1]  # 4 rows: one gear, merged on axis 0
    first = [seq_inputs(b, 3, uid) for uid, b in enumerate(rows, start=1)]
    check_alone(seq_bytes, first, m.execute([request(pb, r) for r in first]))  # the Python path: offered
    before = hot(m)["hits"]
    for round_ in range(3):  # new values, the same signature: the compiled path, rows in the callers' order
        reqs = [seq_inputs(b, 3, 10 * round_ + uid) for uid, b in enumerate(rows, start=1)]
        check_alone(seq_bytes, reqs, m.execute([request(pb, r) for r in reqs]))
    assert hot(m)["hits"] == before + 3, "each merged batch of a known signature is one compiled run"
    for uid in (98, 99):  # a lone request: the Python path the first time, then the compiled one
        lone = seq_inputs(1, 3, uid)
        check_alone(seq_bytes, [lone], m.execute([request(pb, lone)]))
    assert hot(m)["hits"] == before + 4


def test_gear_pieces_of_a_known_signature_take_the_compiled_path(pb, served, seq_bytes):
    """Exact batch gears: 3 merged rows run as pieces 2 + 1 (gert_triton/gears.py), each piece a slice of the
    validated requests; once they ran, both pieces take the compiled path, and every request keeps its rows."""
    m = served(gears="batch:1,2,4", shape_policy="batch:exact")
    sizes = [1, 2]  # pieces: rows 0-1 (request 0 and request 1's first row), then request 1's second row
    check_alone(seq_bytes, *_run(pb, m, sizes, 0))
    before = hot(m)["hits"]
    for round_ in range(1, 3):
        check_alone(seq_bytes, *_run(pb, m, sizes, round_))
    assert hot(m)["hits"] == before + 4, "two compiled runs per execute"


def _run(pb, m, sizes: list, round_: int) -> tuple:
    reqs = [seq_inputs(b, 3, 100 * round_ + uid) for uid, b in enumerate(sizes, start=1)]
    return reqs, m.execute([request(pb, r) for r in reqs])


def test_each_request_is_validated_once(pb, served, seq_bytes, monkeypatch):
    """The request validator runs once per request of an execute (before: three times, twice in the Engine)."""
    m = served()
    validator = m.model.engine.validator
    calls = []
    check = validator.check

    def counted(inputs):
        calls.append(inputs)
        return check(inputs)

    monkeypatch.setattr(validator, "check", counted)
    for round_ in range(2):  # the Python path, then the compiled one
        reqs = [seq_inputs(1, 3, 10 * round_ + uid) for uid in range(4)]
        calls.clear()
        check_alone(seq_bytes, reqs, m.execute([request(pb, r) for r in reqs]))
        assert len(calls) == 4, f"round {round_}: {len(calls)} validations for 4 requests"


def test_a_bad_request_beside_a_known_signature_is_refused_alone(pb, served, seq_bytes):
    """Validation is not skipped on the compiled path: requests that would make up a known merged signature
    (4 good + one of the wrong dtype, one of the wrong shape) are each checked; the bad one gets INVALID_ARG naming its
    input, the good ones run."""
    m = served()
    good = [seq_inputs(1, 3, uid) for uid in range(1, 5)]
    check_alone(seq_bytes, good, m.execute([request(pb, r) for r in good]))
    before = hot(m)["hits"]
    bad_dtype = dict(seq_inputs(1, 3, 7), a=seq_inputs(1, 3, 7)["a"].astype(np.float64))
    bad_s = dict(seq_inputs(1, 3, 8), m=np.ones((1, 5), np.int64))  # m's axis 1 is 3
    reqs = [good[0], bad_dtype, good[1], bad_s, good[2], good[3]]
    out = m.execute([request(pb, r) for r in reqs])
    assert_error(pb, out[1], pb.TritonError.INVALID_ARG, "'a'", "float32", "float64")
    assert_error(pb, out[3], pb.TritonError.INVALID_ARG, "'m'", "3", "5")
    check_alone(seq_bytes, good, [out[0], out[2], out[4], out[5]])
    assert hot(m)["hits"] == before + 1, "the 4 good ones: the known merged signature"
    for r, resp in zip(good, [out[0], out[2], out[4], out[5]]):
        check_seq(outputs_of(resp), r)


def test_a_batch_spread_over_two_streams_takes_the_compiled_path_per_part(pb, served, seq_bytes, monkeypatch):
    """Two streams with split_batch (the default layout of a batching model): a merged batch is spread over the idle
    streams at request boundaries, and each part whose signature ran before on the stream it gets runs on the
    compiled path, in parallel; every request keeps its rows."""
    m = served(streams="2", split_batch="true")
    assert m.model.split_batch and m.model.num_streams == 2 and hot(m)["enabled"]
    # Every run lasts 20 ms, so that the parts overlap: a part whose thread starts only after the other part ended
    # rightly takes the stream just freed (the warm one), and on a busy machine that happened in every round.
    gert.inject_fault("hang", count=1000, duration_ms=20)
    monkeypatch.setattr(m.model.engine.splits, "choose", lambda shape, parts: parts)  # split every batch (not whole)
    try:
        for round_ in range(6):  # the parts' signatures get prepared on both streams
            check_alone(seq_bytes, *_run(pb, m, [1, 1, 1, 1], round_))
        before = hot(m)["hits"]
        for round_ in range(6, 10):
            check_alone(seq_bytes, *_run(pb, m, [1, 1, 1, 1], round_))
    finally:
        gert.clear_faults()
    assert hot(m)["hits"] >= before + 4, "at least one compiled part per execute"
    counts = [s["requests"] for s in m.model.stats()["streams"]]
    assert all(counts) and sum(counts) == 20, f"each execute's two parts ran on both streams: {counts}"
