"""In-process dynamic batching (issue 27): PP-OCR cls, batch-1 requests from 1 / 4 / 16 threads.

    python benchmarks/bench_inproc_batching.py [--seconds 3] [--rounds 5] [--threads 1,4,16] [--streams 4,16]
                                               [--variant NAME=KEY:VALUE,...] [--json out.json]

Variants, in one process on one model file, rounds alternating so that the machine's noise hits all alike:

- ``gert``: ``gert.load(cls)`` (dynamic batching on, the default): each thread calls ``model.run`` with one
  1x3x48x192 image, back to back;
- ``gert_off``: the same with ``dynamic_batching=False`` (each request runs alone on the stream);
- ``run_list``: one thread calling ``model.run([16 requests])`` (the batch a caller forms by hand), counted as 16
  requests per call;
- ``gert_2streams``: ``gert.load(cls, streams=2)`` (two streams without core limits: the host NPU splits the cores
  among the runs in progress, so a lone request still has them all);
- ``gert_<N>streams`` (``--streams N,...``): ``gert.load(cls, streams=N)``, N streams without core limits: with as
  many streams as callers a request finds a stream free, runs alone (no batching, the compiled hot path) with its
  share of the cores, as ONNX Runtime's shared session runs each caller's request on the caller's thread;
- ``--variant NAME=KEY:VALUE,...``: ``gert.load(cls, KEY=VALUE, ...)`` as NAME (values read as JSON where they
  parse), set against run(list of 16) as the stream variants are;
- ``ort``: ONNX Runtime (CPU) with one session shared by the same threads, each running its one image.

Reported, as medians over the rounds: requests/s, p50 / p99 latency per request, the process's CPU time per request
(user + system over the window: on a VM whose CPUs slow down for seconds at a time, the steadier figure of how much
work a request costs), the mean batch the dynamic batcher formed, and the ratios the issues set, each the median of
the per-round ratios: 16 threads' throughput against run(list of 16) measured in the window just before it (issue
40: >= 0.9; the per-round ratios printed beside it), one
thread's p50 with batching on against off (<= 1.1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (
    CLS,
    closed_loop,
    images,
    machine,
    ort_session,
    parse_variants,
    ppocr_model,
    thread_scaling,
    thread_scaling_line,
    typed_value,
)

SHAPE = (1, 3, 48, 192)
LIST = 16
# variants whose throughput is set against run(list of 16) measured in the window just before theirs (this VM slows
# down by up to 3x for tens of seconds at a time: a baseline from the end of the round compared different speeds)
PAIRED = ("gert", "gert_2streams")


def requests(n: int, seed: int = 0) -> list:
    """``n`` different 1x3x48x192 text-line images."""
    return [a[None] for a in images(n, SHAPE[2], SHAPE[3], seed)]


def measure(variant: str, models: dict, threads: int, seconds: float) -> dict:
    """One closed-loop window of ``variant`` with ``threads`` clients: requests/s, p50 / p99 ms per request."""
    imgs = requests(max(threads, LIST))
    cpu = os.times()
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
    done = os.times()
    lat = r["latencies"]
    return {
        "variant": variant,
        "threads": 1 if variant == "run_list" else threads,
        "rps": per * len(lat) / r["seconds"],
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "cpu_us": (done.user + done.system - cpu.user - cpu.system) * 1e6 / max(1, per * len(lat)),
    }


def medians(runs: list) -> dict:
    """One row of the rounds of a (variant, threads): the median of each figure."""
    row = dict(runs[0])
    for k in ("rps", "p50_ms", "p99_ms", "cpu_us"):
        row[k] = float(np.median([r[k] for r in runs]))
    return row


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per window")
    ap.add_argument("--rounds", type=int, default=5, help="rounds over the variants (medians reported)")
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--streams", default="", help="also gert with these stream counts, e.g. 4,16 (gert_<N>streams)")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=KEY:VALUE,...",
        help="also gert.load with these load options as NAME, e.g. gert_2nobatch=streams:2,dynamic_batching:false "
        "(values read as JSON where they parse, else text); repeatable",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    extra = {f"gert_{int(n)}streams": {"streams": int(n)} for n in args.streams.split(",") if n.strip()}
    reserved = ("gert", "gert_2streams", "gert_off", "ort", "run_list", *extra)
    extra.update(
        {
            name: {k: typed_value(v) for k, v in opts.items()}
            for name, opts in parse_variants(args.variant, reserved).items()
        }
    )
    paired = PAIRED + tuple(extra)
    path = ppocr_model(CLS)
    if path is None:
        print("skipped: needs the PP-OCR models: pip install --no-deps rapidocr-onnxruntime==1.4.4")
        return {}
    import gert

    load_before = f"{os.getloadavg()[0]:.1f}"
    scaling_before = thread_scaling()
    with open(path, "rb") as f:
        data = f.read()
    counts = [int(t) for t in args.threads.split(",")]
    with gert.Device(0):
        models = {
            "gert": gert.load(data),
            "gert_2streams": gert.load(data, streams=2),
            "gert_off": gert.load(data, dynamic_batching=False),
            "ort": ort_session(data, 1),
            **{name: gert.load(data, **opts) for name, opts in extra.items()},
        }
        ours = ("gert", "gert_2streams", *extra, "gert_off")
        try:
            for name in ours:
                models[name].warmup()
            for name in ours:  # first runs: pages and caches warm
                models[name].run([{"x": a} for a in requests(LIST)])
            rounds: dict = {}  # (variant, threads) -> each round's figures
            beside: dict = {}  # (variant, threads) -> run(list)'s figures in the window just before each of its own
            batches: dict = {}
            top = max(counts)
            for _ in range(args.rounds):
                for threads in counts:
                    for variant in (*ours, "ort"):
                        if threads == top and variant in paired:  # the ratio's baseline in the adjacent window
                            base = measure("run_list", models, 1, args.seconds)
                            beside.setdefault((variant, threads), []).append(base)
                            rounds.setdefault(("run_list", 1), []).append(base)
                        before = models["gert"].stats()["batching"]
                        r = measure(variant, models, threads, args.seconds)
                        if variant == "gert":
                            after = models["gert"].stats()["batching"]
                            done = after["batches"] - before["batches"]
                            batches.setdefault(threads, []).append(
                                (after["requests"] - before["requests"]) / max(1, done)
                            )
                        rounds.setdefault((variant, threads), []).append(r)
        finally:
            for name in ours:
                models[name].close()
    best = {key: medians(runs) for key, runs in rounds.items()}
    batches = {t: float(np.median(b)) for t, b in batches.items()}
    rows = sorted(best.values(), key=lambda r: (r["threads"], r["variant"]))
    print(
        f"PP-OCR cls {SHAPE}, {machine()}, gert backend {gert.backend()}; medians of {args.rounds} alternated "
        f"round(s) of {args.seconds:g} s; load average {load_before} -> {os.getloadavg()[0]:.1f}"
    )
    print(thread_scaling_line(scaling_before, thread_scaling()))
    print(
        f"{'variant':14} {'threads':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/req':>10} {'mean batch':>10}"
    )
    for r in rows:
        mean = f"{batches.get(r['threads'], 0):.1f}" if r["variant"] == "gert" else ""
        print(
            f"{r['variant']:14} {r['threads']:>7} {r['rps']:>8.1f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
            f"{r['cpu_us']:>10.0f} {mean:>10}"
        )

    def per_round(a: list, b: list, key: str = "rps") -> list:
        """Each round's figure of ``a`` / ``b``'s taken in the same round."""
        return [x[key] / y[key] for x, y in zip(a, b)]

    each = {}  # name -> the per-round ratios (their median is the ratio reported)
    if ("gert", top) in best:
        for variant in paired:
            each[f"{variant} {top} threads / run(list of {LIST})"] = per_round(
                rounds[(variant, top)], beside[(variant, top)]
            )
        each[f"gert {top} threads / gert_off"] = per_round(rounds[("gert", top)], rounds[("gert_off", top)])
        each[f"gert {top} threads / ort"] = per_round(rounds[("gert", top)], rounds[("ort", top)])
    if ("gert", 1) in best:
        each["one thread p50: on / off"] = per_round(rounds[("gert", 1)], rounds[("gert_off", 1)], "p50_ms")
        each["one thread p50: gert_2streams / gert"] = per_round(
            rounds[("gert_2streams", 1)], rounds[("gert", 1)], "p50_ms"
        )
    ratios = {k: float(np.median(v)) for k, v in each.items()}
    shown = {k for k in each if "run(list" in k}  # the ratios whose rounds are printed
    for k, v in ratios.items():
        rounds_of = f" (per round {', '.join(f'{x:.2f}' for x in each[k])})" if k in shown else ""
        print(f"{k}: {v:.2f}x{rounds_of}")
    result = {"rows": rows, "ratios": ratios, "per_round": {k: each[k] for k in shown}, "mean_batch": batches}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
