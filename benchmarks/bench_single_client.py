"""One client, PP-OCR det over varied sizes: gert's defaults against ONNX Runtime's defaults (issue 23).

    python benchmarks/bench_single_client.py [--requests 90] [--passes 3] [--json out.json]

The requests are bench_shapes.py's: single images whose sizes are 70% three hot sizes, the rest a tail of multiples
of 32, a new tail in each pass. gert: ``gert.load(det)`` with its defaults, ``warmup()``, then one client calling
``Model.run``; ONNX Runtime: one InferenceSession with default options (its pool threads spin), ``run``. Whole
passes alternate (gert, ORT, gert, ORT, ...), the first included (gert compiles its hot sizes in the background
then). Reported per side: mean and p99 latency over all passes, and their ratios gert / ORT. Targets (issue 23):
mean <= 1.05x, p99 <= 1.2x.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import machine, ppocr_model  # noqa: E402
from bench_shapes import MODELS, images, sizes  # noqa: E402

import gert  # noqa: E402


def timed(call, inputs: list) -> list:
    """Latency of each request, one client."""
    out = []
    for x in inputs:
        t = time.perf_counter()
        call(x)
        out.append(time.perf_counter() - t)
    return out


def run(requests: int = 90, passes: int = 3) -> dict:
    path = ppocr_model(MODELS["det"])
    if path is None:
        raise SystemExit("needs: pip install --no-deps rapidocr-onnxruntime==1.4.4")
    work = [images(sizes("det", requests, seed=12 + p)) for p in range(passes)]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    default = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = default.get_inputs()[0].name
    lat: dict = {"gert": [], "ort": []}
    with gert.load(path) as m:
        m.warmup()
        for p in range(passes):
            lat["gert"] += timed(lambda x: m.run({name: x}), work[p])
            lat["ort"] += timed(lambda x: default.run(None, {name: x}), work[p])
        stats = m.stats()
    figs = {k: {"mean_ms": 1e3 * float(np.mean(v)), "p99_ms": 1e3 * float(np.percentile(v, 99))}
            for k, v in lat.items()}
    return {"requests": requests, "passes": passes, "figures": figs,
            "mean_ratio": figs["gert"]["mean_ms"] / figs["ort"]["mean_ms"],
            "p99_ratio": figs["gert"]["p99_ms"] / figs["ort"]["p99_ms"],
            "streams": len(stats.get("streams", []))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=90, help="per pass")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    r = run(args.requests, args.passes)
    print(f"# det, one client, {r['requests']} requests x {r['passes']} passes alternated ({machine()})")
    for k, f in r["figures"].items():
        print(f"{k:5s} mean {f['mean_ms']:.1f} ms  p99 {f['p99_ms']:.1f} ms")
    print(f"gert / ORT defaults: mean {r['mean_ratio']:.3f}x  p99 {r['p99_ratio']:.3f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
