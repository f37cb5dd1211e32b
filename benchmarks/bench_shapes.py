"""Varying input sizes on gert's defaults (shape policy auto) against ONNX Runtime run directly (issue 12).

    python benchmarks/bench_shapes.py [--model det|rec|both] [--requests N] [--repeats K] [--json out.json]

Each model gets a stream of single-image requests whose sizes come from a skewed distribution: a few hot sizes take
70% of the requests, the rest is a long tail of multiples of 32 (det: H and W in 128..480; rec: W in 64..800 at
H 48). gert: ``gert.load(model, streams=2)`` with every other setting at its default, warmup() (compiles the
dynamic-shape graph), then 4 client threads calling ``Model.run``.

Two ONNX Runtime baselines get the same 4 client threads and the same requests:
- the target's: 2 InferenceSessions with the same intra-op thread count as gert's streams (their effective cube
  cores) and no spinning pools (with ORT's default spinning, 2 sessions x 2 threads on 2 cores ran at a third of
  this speed), the clients alternating between them;
- ORT's defaults: one InferenceSession with default options shared by the clients, as applications (RapidOCR) run it.

Three passes, each with the same hot sizes and a new tail. The first (gert's whole pass, then each baseline's)
includes the background compiles of the hot sizes; the later ones start once gert's compile queue is empty and
interleave gert and the baselines in 12 windows, each window in another order (every order twice), so that other
load on the machine hits all alike (tail sizes that turn hot still compile in the background meanwhile). Each
model is run ``--repeats`` times (3), each time with a new Model; reported per pass: the median and range of the
throughput ratio gert/ORT and the p99 latency ratio (against both baselines), the share of gert's requests served
by static graphs, background compiles, and compiles made on the request path after load (target 0). About 2-3
minutes on a 2-core machine with the defaults.

``run(model, requests)`` returns one run's figures as a dict, for other benchmark suites to call.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import gert
from _common import machine, ppocr_model

MODELS = {"det": "ch_PP-OCRv4_det_infer.onnx", "rec": "ch_PP-OCRv4_rec_infer.onnx"}
HOT = {"det": [(256, 320), (320, 448), (224, 288)], "rec": [(48, 320), (48, 192), (48, 448)]}
HOT_SHARE = 0.7
STREAMS, CLIENTS = 2, 4
WINDOWS = 12  # interleaved windows in the passes after the first: each order of the 3 calls twice
PASSES = 3


def sizes(model: str, n: int, seed: int = 12) -> list:
    """n (H, W) pairs: HOT[model] with 70% of the draws (weights 3:2:1), a uniform tail of multiples of 32."""
    rng = np.random.default_rng(seed)
    hot = HOT[model]
    weights = np.array([3, 2, 1][: len(hot)], float)
    out = []
    for _ in range(n):
        if rng.random() < HOT_SHARE:
            out.append(hot[rng.choice(len(hot), p=weights / weights.sum())])
        elif model == "det":
            out.append((int(rng.integers(4, 16)) * 32, int(rng.integers(4, 16)) * 32))
        else:
            out.append((48, int(rng.integers(2, 26)) * 32))
    return out


def images(shapes: list, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    cache = {}
    for hw in set(shapes):
        cache[hw] = rng.standard_normal((1, 3) + hw).astype(np.float32)
    return [cache[hw] for hw in shapes]


def drive(call, inputs: list, clients: int) -> tuple:
    """``clients`` threads take requests in order from ``inputs``; returns (seconds, per-request latencies)."""
    lat = [0.0] * len(inputs)
    nxt = iter(range(len(inputs)))
    lock = threading.Lock()
    errors = []

    def client(slot: int):
        while True:
            with lock:
                i = next(nxt, None)
            if i is None:
                return
            t = time.perf_counter()
            try:
                call(slot, inputs[i])
            except Exception as e:  # noqa: BLE001 - reported after the run
                errors.append(e)
                return
            lat[i] = time.perf_counter() - t

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0, lat


def interleaved(calls: list, inputs: list, clients: int, windows: int) -> list:
    """drive() each of ``calls`` over the same requests in ``windows`` slices, in a new order each slice (every order
    of the calls in turn, so that each call follows each other one equally often: what one leaves behind, such as
    spinning threads, hits the others alike); returns per call (seconds, latencies)."""
    orders = list(itertools.permutations(range(len(calls))))
    out = [(0.0, []) for _ in calls]
    step = -(-len(inputs) // windows)
    for k, i in enumerate(range(0, len(inputs), step)):
        part = inputs[i : i + step]
        for c in orders[k % len(orders)]:
            secs, lat = drive(calls[c], part, clients)
            out[c] = (out[c][0] + secs, out[c][1] + lat)
    return out


def wait_idle(m, timeout: float = 60.0) -> None:
    """Until the model's compiler thread has nothing queued or compiling."""
    deadline = time.monotonic() + timeout
    while m.stats()["tiers"]["pending"] and time.monotonic() < deadline:
        time.sleep(0.05)


def p99(lat: list) -> float:
    return float(np.percentile(lat, 99))


def _ort_sessions(path: str, threads: int) -> tuple:
    """The baselines: STREAMS sessions with the streams' thread count and no spinning (the target's baseline), and
    one session with ONNX Runtime's defaults shared by all clients (what applications such as RapidOCR do)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    same = [ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]) for _ in range(STREAMS)]
    plain = ort.SessionOptions()
    plain.log_severity_level = 3
    default = ort.InferenceSession(path, plain, providers=["CPUExecutionProvider"])
    return same, default


def run(model: str = "det", requests: int = 300) -> dict:
    """PASSES passes of ``requests`` requests, gert defaults against ORT; returns the figures per pass."""
    path = ppocr_model(MODELS[model])
    if path is None:
        raise SystemExit("needs: pip install --no-deps rapidocr-onnxruntime==1.4.4")
    passes = [images(sizes(model, requests, seed=12 + p)) for p in range(PASSES)]  # same hot sizes, a new tail
    t0 = time.perf_counter()
    m = gert.load(path, streams=STREAMS)
    m.warmup()
    load_s = time.perf_counter() - t0
    threads = m.stats()["streams"][0]["cube_cores"]
    sessions, default = _ort_sessions(path, threads)
    name = sessions[0].get_inputs()[0].name
    out = {
        "model": model,
        "requests": requests,
        "streams": STREAMS,
        "clients": CLIENTS,
        "threads_per_stream": threads,
        "distinct_sizes": len({x.shape for xs in passes for x in xs}),
        "load_and_warmup_s": round(load_s, 2),
        "passes": [],
    }

    def gert_call(slot, x):
        m.run({name: x})

    def ort_call(slot, x):
        sessions[slot % STREAMS].run(None, {name: x})

    def default_call(slot, x):
        default.run(None, {name: x})

    calls = [gert_call, ort_call, default_call]
    try:
        before = m.stats()
        for p, inputs in enumerate(passes):
            if p == 0:  # with the background compiles: gert's whole pass, then the baselines'
                (g_s, g_lat), (o_s, o_lat), (d_s, d_lat) = [drive(c, inputs, CLIENTS) for c in calls]
            else:  # compiles done: short interleaved windows, so that other load on the machine hits all alike
                wait_idle(m)
                (g_s, g_lat), (o_s, o_lat), (d_s, d_lat) = interleaved(calls, inputs, CLIENTS, WINDOWS)
            st = m.stats()
            served = (st["static_hits"] - before["static_hits"]) + (st["dynamic_hits"] - before["dynamic_hits"])
            out["passes"].append(
                {
                    "gert_req_s": round(requests / g_s, 1),
                    "ort_req_s": round(requests / o_s, 1),
                    "throughput_ratio": round(o_s / g_s, 3),
                    "gert_p99_ms": round(p99(g_lat) * 1e3, 1),
                    "ort_p99_ms": round(p99(o_lat) * 1e3, 1),
                    "p99_ratio": round(p99(g_lat) / p99(o_lat), 3),
                    "ort_default_req_s": round(requests / d_s, 1),
                    "throughput_ratio_ort_default": round(d_s / g_s, 3),
                    "p99_ratio_ort_default": round(p99(g_lat) / p99(d_lat), 3),
                    "static_share": round((st["static_hits"] - before["static_hits"]) / served, 3),
                    "request_path_compiles": st["request_path_compiles"] - before["request_path_compiles"],
                    "background_compiles": st["background_compiles"] - before["background_compiles"],
                }
            )
            before = st
        out["static_shapes"] = m.stats()["tiers"]["static_shapes"]
    finally:
        m.close()
    return out


def summary(runs: list) -> dict:
    """Per pass, over repeated runs: the median and the range of each ratio, the sum of the compile counts."""
    out = {"runs": len(runs), "passes": []}
    for p in range(PASSES):
        row = {}
        for k in (
            "throughput_ratio",
            "p99_ratio",
            "throughput_ratio_ort_default",
            "p99_ratio_ort_default",
            "static_share",
        ):
            vals = [r["passes"][p][k] for r in runs]
            row[k] = {"median": round(float(np.median(vals)), 3), "min": min(vals), "max": max(vals)}
        for k in ("background_compiles", "request_path_compiles"):
            row[k] = sum(r["passes"][p][k] for r in runs)
        out["passes"].append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["det", "rec", "both"], default="both")
    ap.add_argument("--requests", type=int, default=0, help="per pass (default: det 240, rec 240)")
    ap.add_argument("--repeats", type=int, default=3, help="whole runs per model, each with a new Model (default 3)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    results = []
    print(f"# gert defaults vs ONNX Runtime, varying sizes ({machine()})")
    for model in ["det", "rec"] if args.model == "both" else [args.model]:
        runs = [run(model, args.requests or 240) for _ in range(max(1, args.repeats))]
        s = summary(runs)
        r = runs[0]
        results.append({"model": model, "summary": s, "runs": runs})
        print(
            f"\n{model}: {r['requests']} requests/pass, {r['distinct_sizes']} distinct sizes, {r['streams']} streams "
            f"x {r['threads_per_stream']} threads, {r['clients']} clients; load+warmup {r['load_and_warmup_s']} s; "
            f"{r['static_shapes']} static shapes at the end; median [min, max] of {s['runs']} runs"
        )
        print(
            "| pass | throughput ratio | p99 ratio | vs ORT defaults: throughput | p99 | static share "
            "| background compiles | request-path compiles |"
        )
        print("|---|---|---|---|---|---|---|---|")

        def cell(d: dict) -> str:
            return f"{d['median']} [{d['min']}, {d['max']}]"

        for i, p in enumerate(s["passes"], 1):
            print(
                f"| {i} | {cell(p['throughput_ratio'])} | {cell(p['p99_ratio'])} | "
                f"{cell(p['throughput_ratio_ort_default'])} | {cell(p['p99_ratio_ort_default'])} | "
                f"{p['static_share']['median']} | {p['background_compiles']} | {p['request_path_compiles']} |"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
