"""One client, PP-OCR det over varied sizes: gert's defaults against ONNX Runtime's defaults (issue 23).

    python benchmarks/bench_single_client.py [--requests 90] [--rounds 5] [--json out.json]

The requests are bench_shapes.py's: single images whose sizes are 70% three hot sizes, the rest a tail of multiples
of 32, a new tail in each pass. gert: ``gert.load(det)`` with its defaults, ``warmup()``, then one client calling
``Model.run``; ONNX Runtime: one InferenceSession with default options (its pool threads spin), ``run``. A round is
one pass of each over the same requests, whole passes, their order alternating from round to round (gert first in
the first, ORT first in the second, ...), 0.2 s apart (ORT's pool spins on after a run); the first round included
(gert compiles its hot sizes in the background then). Reported: each round's mean and p99 latency ratios
gert / ORT, their median over the rounds (issue 23's measure: the median of 5 interleaved rounds; targets
mean <= 1.05x, p99 <= 1.2x), and per side the mean and p99 over all rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import gert
from _common import machine, ppocr_model
from bench_shapes import MODELS, images, sizes


def timed(call, inputs: list) -> list:
    """Latency of each request, one client."""
    out = []
    for x in inputs:
        t = time.perf_counter()
        call(x)
        out.append(time.perf_counter() - t)
    return out


# A pause before each pass: ONNX Runtime's default pool keeps spinning for ~50 ms after a run (measured here: 51 ms of
# CPU in 100 ms of sleep after a det run), which would take a core from the next pass, whichever side runs it.
_SETTLE_S = 0.2


def _median(values: list) -> float:
    return float(np.median(values))


def run(requests: int = 90, rounds: int = 5) -> dict:
    path = ppocr_model(MODELS["det"])
    if path is None:
        raise SystemExit("needs: pip install --no-deps rapidocr-onnxruntime==1.4.4")
    work = [images(sizes("det", requests, seed=12 + p)) for p in range(rounds)]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    default = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = default.get_inputs()[0].name
    lat: dict = {"gert": [], "ort": []}
    per_round = []
    with gert.load(path) as m:
        m.warmup()
        sides = {"gert": lambda x: m.run({name: x}), "ort": lambda x: default.run(None, {name: x})}
        for r in range(rounds):
            this = {}
            for side in ("gert", "ort") if r % 2 == 0 else ("ort", "gert"):
                time.sleep(_SETTLE_S)
                this[side] = timed(sides[side], work[r])
                lat[side] += this[side]
            per_round.append(
                {
                    "mean": float(np.mean(this["gert"]) / np.mean(this["ort"])),
                    "p99": float(np.percentile(this["gert"], 99) / np.percentile(this["ort"], 99)),
                }
            )
        stats = m.stats()
    figs = {
        k: {"mean_ms": 1e3 * float(np.mean(v)), "p99_ms": 1e3 * float(np.percentile(v, 99))} for k, v in lat.items()
    }
    return {
        "requests": requests,
        "rounds": rounds,
        "figures": figs,
        "per_round": per_round,
        "mean_ratio": _median([x["mean"] for x in per_round]),
        "p99_ratio": _median([x["p99"] for x in per_round]),
        "streams": len(stats.get("streams", [])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=90, help="per pass")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (a pass of each side)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    r = run(args.requests, args.rounds)
    print(f"# det, one client, {r['requests']} requests per pass, {r['rounds']} interleaved rounds ({machine()})")
    for i, x in enumerate(r["per_round"]):
        print(f"round {i}: gert / ORT mean {x['mean']:.3f}x  p99 {x['p99']:.3f}x")
    for k, f in r["figures"].items():
        print(f"{k:5s} over all rounds: mean {f['mean_ms']:.1f} ms  p99 {f['p99_ms']:.1f} ms")
    print(f"gert / ORT defaults, median of the rounds: mean {r['mean_ratio']:.3f}x  p99 {r['p99_ratio']:.3f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
