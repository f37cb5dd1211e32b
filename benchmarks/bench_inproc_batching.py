"""In-process dynamic batching (issue 27): PP-OCR cls, batch-1 requests from 1 / 4 / 16 threads.

    python benchmarks/bench_inproc_batching.py [--seconds 3] [--rounds 2] [--threads 1,4,16] [--json out.json]

Variants, in one process on one model file, rounds alternating so that the machine's noise hits all alike:

- ``gert``: ``gert.load(cls)`` (dynamic batching on, the default): each thread calls ``model.run`` with one
  1x3x48x192 image, back to back;
- ``gert_off``: the same with ``dynamic_batching=False`` (each request runs alone on the stream);
- ``run_list``: one thread calling ``model.run([16 requests])`` (the batch a caller forms by hand), counted as 16
  requests per call;
- ``ort``: ONNX Runtime (CPU) with one session shared by the same threads, each running its one image.

Reported: requests/s, p50 / p99 latency per request, the mean batch the dynamic batcher formed, and the ratios the
issue sets: 16 threads' throughput against run(list of 16) (>= 0.8), one thread's p50 with batching on against off
(<= 1.1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import CLS, closed_loop, images, machine, ort_session, ppocr_model

SHAPE = (1, 3, 48, 192)
LIST = 16


def requests(n: int, seed: int = 0) -> list:
    """``n`` different 1x3x48x192 text-line images."""
    return [a[None] for a in images(n, SHAPE[2], SHAPE[3], seed)]


def measure(variant: str, models: dict, threads: int, seconds: float) -> dict:
    """One closed-loop window of ``variant`` with ``threads`` clients: requests/s, p50 / p99 ms per request."""
    imgs = requests(max(threads, LIST))
    if variant == "run_list":
        m = models["gert"]
        reqs = [{"x": a} for a in imgs[:LIST]]
        r = closed_loop(1, lambda t: ((lambda: m.run(reqs)), None), seconds, variant)
        per = LIST
    elif variant == "ort":
        sess = models["ort"]
        r = closed_loop(threads, lambda t: ((lambda: sess.run(None, {"x": imgs[t]})), None), seconds, variant)
        per = 1
    else:
        m = models[variant]
        r = closed_loop(threads, lambda t: ((lambda: m.run({"x": imgs[t]})), None), seconds, variant)
        per = 1
    lat = r["latencies"]
    return {
        "variant": variant,
        "threads": 1 if variant == "run_list" else threads,
        "rps": per * len(lat) / r["seconds"],
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per window")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over the variants (the best round is kept)")
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    path = ppocr_model(CLS)
    if path is None:
        print("skipped: needs the PP-OCR models: pip install --no-deps rapidocr-onnxruntime==1.4.4")
        return {}
    import gert

    with open(path, "rb") as f:
        data = f.read()
    counts = [int(t) for t in args.threads.split(",")]
    with gert.Device(0):
        models = {
            "gert": gert.load(data),
            "gert_off": gert.load(data, dynamic_batching=False),
            "ort": ort_session(data, 1),
        }
        try:
            for name in ("gert", "gert_off"):
                models[name].warmup()
            for m in (models["gert"], models["gert_off"]):  # first runs: pages and caches warm
                m.run([{"x": a} for a in requests(LIST)])
            best: dict = {}
            batches: dict = {}
            for _ in range(args.rounds):
                for threads in counts:
                    for variant in ("gert", "gert_off", "ort"):
                        before = models["gert"].stats()["batching"]
                        r = measure(variant, models, threads, args.seconds)
                        if variant == "gert":
                            after = models["gert"].stats()["batching"]
                            done = after["batches"] - before["batches"]
                            batches[threads] = (after["requests"] - before["requests"]) / max(1, done)
                        key = (variant, threads)
                        if key not in best or r["rps"] > best[key]["rps"]:
                            best[key] = r
                r = measure("run_list", models, 1, args.seconds)
                if ("run_list", 1) not in best or r["rps"] > best[("run_list", 1)]["rps"]:
                    best[("run_list", 1)] = r
        finally:
            for name in ("gert", "gert_off"):
                models[name].close()
    rows = sorted(best.values(), key=lambda r: (r["threads"], r["variant"]))
    print(
        f"PP-OCR cls {SHAPE}, {machine()}, gert backend {gert.backend()}; best of {args.rounds} round(s) of "
        f"{args.seconds:g} s"
    )
    print(f"{'variant':10} {'threads':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'mean batch':>10}")
    for r in rows:
        mean = f"{batches.get(r['threads'], 0):.1f}" if r["variant"] == "gert" else ""
        print(
            f"{r['variant']:10} {r['threads']:>7} {r['rps']:>8.1f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {mean:>10}"
        )
    ratios = {}
    top = max(counts)
    if ("gert", top) in best:
        ratios[f"gert {top} threads / run(list of {LIST})"] = best[("gert", top)]["rps"] / best[("run_list", 1)]["rps"]
        ratios[f"gert {top} threads / gert_off"] = best[("gert", top)]["rps"] / best[("gert_off", top)]["rps"]
        ratios[f"gert {top} threads / ort"] = best[("gert", top)]["rps"] / best[("ort", top)]["rps"]
    if ("gert", 1) in best:
        ratios["one thread p50: on / off"] = best[("gert", 1)]["p50_ms"] / best[("gert_off", 1)]["p50_ms"]
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}x")
    result = {"rows": rows, "ratios": ratios, "mean_batch": batches}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
