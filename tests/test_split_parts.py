"""Split batches inside split batches: Model.run(list) with split_batch spreads a merged batch over the idle streams
at request boundaries (Engine.run_checked, on the parts pool's threads); a part whose batch is above the largest gear
runs in gear-sized chunks (Engine._run_chunks). Those chunks run on the part's own thread: a parts-pool thread
waiting for chunks queued behind it on the same pool deadlocked every pool thread (found by the differential
fuzzer, tests/test_fuzz_rows.py, under load: run(list) of 3, 8 and 3 rows with max_batch 1, 2 streams). Values are
ONNX Runtime's on each request alone."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

import gert
from _helpers import RUNTIME
from models import ort_session

pytestmark = RUNTIME

DEADLINE_S = 60.0  # a deadlock shows as no answer; a loaded 2-core machine answers these in well under a second


def min_model() -> bytes:
    """t = Min(w, x), x: [N, T, 4, 1] (the fuzzer's case: T dynamic too)."""
    w = numpy_helper.from_array(np.array(0.3, np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Min", ["w", "x"], ["t"])],
        "min",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", None, 4, 1])],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [None, None, None, None])],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m.SerializeToString()


MODEL = min_model()


def run_within(fn, deadline: float = DEADLINE_S):
    """fn()'s result, or the test fails naming the deadline (the thread is left behind: a daemon)."""
    box: list = []

    def work() -> None:
        try:
            box.append(fn())
        except BaseException as e:  # noqa: BLE001 - raised below on the test's thread
            box.append(e)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(deadline)
    if not box:
        pytest.fail(f"no answer within {deadline:.0f} s: the split parts deadlocked")
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.integers(1, 9), min_size=2, max_size=5),
    max_batch=st.sampled_from([1, 2, 3]),
    t=st.integers(1, 3),
)
def test_run_list_parts_above_the_largest_gear_answer_with_onnx_runtimes_values(rows, max_batch, t):
    rng = np.random.default_rng(len(rows) * 100 + max_batch)
    requests = [{"x": rng.standard_normal((n, t, 4, 1)).astype(np.float32)} for n in rows]
    ort = ort_session(MODEL)
    with gert.load(MODEL, max_batch=max_batch, streams=2, split_batch=True) as model:
        got = run_within(lambda: model.run(requests))
        again = run_within(lambda: model.run(requests))  # the compiled path of signatures seen before
    for r, g, a in zip(requests, got, again):
        want = ort.run(None, r)[0]
        np.testing.assert_array_equal(g["t"], want)
        np.testing.assert_array_equal(a["t"], want)


def test_the_fuzzers_case():
    rng = np.random.default_rng(805)
    requests = [{"x": rng.standard_normal((n, 3, 4, 1)).astype(np.float32)} for n in (3, 8, 3)]
    options = {"max_batch": 1, "streams": 2, "split_batch": True, "dynamic_batching": {"max_queue_delay_ms": 5}}
    with gert.load(MODEL, pad_value=3.0, **options) as model:
        got = run_within(lambda: model.run(requests))
    ort = ort_session(MODEL)
    for r, g in zip(requests, got):
        np.testing.assert_array_equal(g["t"], ort.run(None, r)[0])
