"""In-process dynamic batching (issue 27), PP-OCR cls 1x3x48x192: 16 threads each running one request (the
dynamic batcher merges them) against the same 16 requests as ``model.run([...])`` in one call (the baseline: the
batch formed by hand); and one lone request with dynamic batching on against off (the default must add no delay).
The script ``bench_inproc_batching.py`` measures 1 / 4 / 16 threads and ONNX Runtime with the same threads."""

from __future__ import annotations

import numpy as np
import pytest

import gert
from _common import CLS, Clients, images, read_ppocr, tag

THREADS = 16


@pytest.fixture(scope="module")
def cls_model():
    return read_ppocr(CLS)


def _requests(n: int) -> list:
    return [{"x": a[None]} for a in images(n, 48, 192, seed=3)]


@pytest.mark.parametrize("kind", ["run_list", "threads"])  # innermost: the pair runs back to back
def test_sixteen_threads_vs_run_list(benchmark, measuring, cls_model, kind):
    reqs = _requests(THREADS)
    tag(
        benchmark,
        f"inproc batching cls 1x3x48x192, {THREADS} requests",
        "gert" if kind == "threads" else "baseline",
        requests=THREADS,
        threads=THREADS if kind == "threads" else 1,
    )
    with gert.load(cls_model) as m:
        m.warmup()
        want = m.run(reqs, timeout=None)
        if kind == "run_list":
            benchmark.pedantic(m.run, (reqs,), rounds=10 if measuring else 1, warmup_rounds=1 if measuring else 0)
            return
        clients = Clients(THREADS)
        try:
            calls = [(lambda r=r: m.run(r)) for r in reqs]
            benchmark.pedantic(
                clients.run, (calls, THREADS), rounds=10 if measuring else 1, warmup_rounds=1 if measuring else 0
            )
        finally:
            clients.close()
        for r, w in zip(reqs, want):
            np.testing.assert_allclose(m.run(r)[m.outputs[0].name], w[m.outputs[0].name], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batching", [False, True])
def test_lone_request_latency(benchmark, measuring, cls_model, batching):
    (req,) = _requests(1)
    tag(benchmark, "inproc batching cls 1x3x48x192, one lone request", "gert" if batching else "baseline")
    with gert.load(cls_model, dynamic_batching=batching) as m:
        m.warmup()
        m.run(req)
        benchmark.pedantic(m.run, (req,), rounds=50 if measuring else 1, warmup_rounds=3 if measuring else 0)
