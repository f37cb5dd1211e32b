"""``Model.run`` overhead over ONNX Runtime ``InferenceSession.run()`` on a one-node graph (Relu), 1 thread each.

Two cases: a static 1x64 graph, and a symbolic batch where 3 rows run padded to gear 4 and are sliced back.
Target (issue 4): at most 15 us above ONNX Runtime.
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
