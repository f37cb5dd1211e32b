"""gert.Model throughput vs ONNX Runtime sessions with the same total threads, for streams x cube cores.

PP-OCR det 1x3x640x640 and cls 8x3x48x192, streams 1, 2, 4 x cube cores 1, 2. gert: ``gert.load(model,
streams=S, cube_cores=C)`` and S client threads calling ``Model.run`` (one request in flight per stream).
Baseline, same total threads (S x C): S client threads, each with its OWN ONNX Runtime InferenceSession of
intra_op_num_threads=C, calling ``run()`` -- the structure a multi-session ONNX Runtime server would have. A
timed call runs a fixed number of requests over the S threads (``requests`` in extra_info; requests/s =
requests / time). S x C above the machine's cores oversubscribes: both sides degrade.
"""

from __future__ import annotations

import numpy as np
import pytest

import gert
from _common import CLS, DET, Clients, images, ort_session, read_ppocr, tag

MODELS = {"det": (DET, (1, 640, 640), 6), "cls": (CLS, (8, 48, 192), 48)}  # name, (N, H, W), requests per timed call
ROUNDS = 3


@pytest.mark.parametrize("kind", ["ort_sessions", "gert"])  # innermost: each pair runs back to back
@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("streams", [1, 2, 4])
@pytest.mark.parametrize("name", list(MODELS))
def test_throughput(benchmark, measuring, name, streams, cores, kind):
    path, (n, h, w), requests = MODELS[name]
    model = read_ppocr(path)
    if not measuring:  # smoke run: one small request per client
        requests, h, w = streams, (h if name == "cls" else 160), (w if name == "cls" else 160)
    x = images(n, h, w, seed=1)
    tag(
        benchmark,
        f"throughput {name} {n}x3x{h}x{w} streams={streams} cube={cores}",
        "gert" if kind == "gert" else "baseline",
        requests=requests,
        items_per_request=n,
        threads=streams * cores,
    )
    sessions = [ort_session(model, cores) for _ in range(streams if kind == "ort_sessions" else 1)]
    want = sessions[0].run(None, {"x": x})[0]
    clients = Clients(streams)
    try:
        if kind == "ort_sessions":
            calls = [(lambda s=s: s.run(None, {"x": x})) for s in sessions]
            benchmark.pedantic(
                clients.run, (calls, requests), rounds=ROUNDS if measuring else 1, warmup_rounds=1 if measuring else 0
            )
            return
        with gert.load(model, streams=streams, cube_cores=cores, gears={"batch": [n]}) as m:
            calls = [lambda: m.run({"x": x})] * streams
            clients.run(calls, streams)  # every stream compiled and warm
            benchmark.pedantic(
                clients.run, (calls, requests), rounds=ROUNDS if measuring else 1, warmup_rounds=1 if measuring else 0
            )
            got = m.run({"x": x})[m.outputs[0].name]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    finally:
        clients.close()
