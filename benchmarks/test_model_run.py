"""``Model.run`` overhead over ONNX Runtime ``InferenceSession.run()`` on a one-node graph (Relu), 1 thread each.

Two cases: a static 1x64 graph, and a symbolic batch where 3 rows run padded to gear 4 and are sliced back.
Target (issue 23): at most 1.0x ONNX Runtime on the one-node graph. Also run(list of 8) vs ORT on the concatenated
batch.
"""

from __future__ import annotations

import numpy as np
import pytest

import gert
from _common import ort_session, relu_model, tag, warm

CASES = {"relu-1x64-static": (1, 1, None), "relu-3rows-to-gear4": ("batch", 3, {"batch": [1, 2, 4]})}


@pytest.mark.parametrize("kind", ["ort_run", "gert"])  # a group's runs back to back
@pytest.mark.parametrize("case", list(CASES))
def test_model_run_overhead(benchmark, measuring, case, kind):
    batch, rows, gears = CASES[case]
    model = relu_model(batch)
    feeds = {"x": np.random.default_rng(0).standard_normal((rows, 64)).astype(np.float32)}
    sess = ort_session(model, 1)
    want = sess.run(None, feeds)[0]
    tag(benchmark, f"Model.run overhead {case}", "gert" if kind == "gert" else "baseline")
    if kind == "ort_run":
        warm(lambda: sess.run(None, feeds), measuring)
        benchmark(sess.run, None, feeds)
        return
    with gert.load(model, cube_cores=1, gears=gears) as m:
        warm(lambda: m.run(feeds), measuring)
        got = benchmark(m.run, feeds)["y"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["ort_concat", "gert"])
def test_run_list_of_8(benchmark, measuring, kind):
    """``Model.run(list of 8 one-row requests)`` (merged into gear 8 on the device, split back) vs ONNX Runtime on
    the caller's concatenated batch (np.concatenate included)."""
    model = relu_model("batch")
    rng = np.random.default_rng(0)
    reqs = [{"x": rng.standard_normal((1, 64)).astype(np.float32)} for _ in range(8)]
    sess = ort_session(model, 1)

    def ort_concat():
        return sess.run(None, {"x": np.concatenate([r["x"] for r in reqs])})

    want = ort_concat()[0]
    tag(
        benchmark,
        "Model.run(list of 8) vs ORT on the concatenated batch",
        "gert" if kind == "gert" else "baseline",
        requests=8,
    )
    if kind == "ort_concat":
        warm(ort_concat, measuring)
        benchmark(ort_concat)
        return
    with gert.load(model, cube_cores=1, gears={"batch": [1, 2, 4, 8]}) as m:
        warm(lambda: m.run(reqs), measuring)
        got = benchmark(m.run, reqs)
    np.testing.assert_array_equal(np.concatenate([o["y"] for o in got]), want)
