"""What tracing costs ``Model.run`` (issue 25): gert.trace off (the hot path's one check) against the same
pipeline without the trace points is not measurable here, so the pair is off vs on, on a one-node graph (Relu
1x64, static), 1 thread: off must stay at the plain run's cost (compare with benchmarks/test_model_run.py), on
shows what the trace events cost per request (stages=True: the static graph runs as timed separate calls)."""

from __future__ import annotations

import numpy as np
import pytest

import gert
from _common import relu_model, tag, warm


@pytest.mark.parametrize("tracing", ["off", "on", "on-fused"])
def test_trace_overhead(benchmark, measuring, tracing):
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)}
    tag(benchmark, "Model.run with gert.trace", "baseline" if tracing == "off" else "gert")
    with gert.load(relu_model(1), cube_cores=1) as m:
        warm(lambda: m.run(feeds), measuring)
        if tracing == "off":
            got = benchmark(m.run, feeds)["y"]
        else:
            with gert.trace(stages=tracing == "on"):
                got = benchmark(m.run, feeds)["y"]
    np.testing.assert_array_equal(got, np.maximum(feeds["x"], 0))
