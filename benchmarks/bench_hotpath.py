"""gert's per-request cost against ONNX Runtime's ``InferenceSession.run()``, in one process (issue 23).

    python benchmarks/bench_hotpath.py [--rounds 5] [--calls 4000] [--json out.json] [--profile N]

Cases (one intra-op thread each side; gert: cube_cores=1):

- ``one-node``: a Relu on [1, 64] (static graph): ``Model.run`` vs ``InferenceSession.run()``;
- ``gear``: a symbolic batch, 3 rows padded to gear 4 and sliced back, vs ORT on the 3 rows;
- ``list8``: ``Model.run(list of 8 requests of 1 row)`` (merged into one batch of gear 8, split back) vs ORT on the 8
  rows concatenated by the caller (``np.concatenate`` included).

Each round times ``--calls`` calls of every case and side, interleaved (gert, ORT, gert, ORT, ... per case), so
that noise from the other processes on the machine hits both alike; reported: the median over the rounds of the
per-call mean of each side, and their ratio. ``--profile N``: instead, cProfile over N ``Model.run`` calls of the
one-node case (the top functions by own time).
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine, ort_session, relu_model  # noqa: E402

import gert  # noqa: E402


def _per_call(fn, calls: int) -> float:
    """Mean seconds per call of ``fn`` over ``calls`` calls."""
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls


def cases() -> dict:
    """name -> (gert callable, ORT callable, check), built on the loaded models (kept open by the caller)."""
    rng = np.random.default_rng(0)
    out = {}
    x1 = rng.standard_normal((1, 64)).astype(np.float32)
    static = relu_model(1)
    m1 = gert.load(static, cube_cores=1)
    s1 = ort_session(static, 1)
    out["one-node"] = (m1, lambda: m1.run({"x": x1}), lambda: s1.run(None, {"x": x1}))

    sym = relu_model("batch")
    x3 = rng.standard_normal((3, 64)).astype(np.float32)
    m3 = gert.load(sym, cube_cores=1, gears={"batch": [1, 2, 4, 8]})
    s3 = ort_session(sym, 1)
    out["gear"] = (m3, lambda: m3.run({"x": x3}), lambda: s3.run(None, {"x": x3}))

    reqs = [{"x": rng.standard_normal((1, 64)).astype(np.float32)} for _ in range(8)]
    out["list8"] = (m3, lambda: m3.run(reqs),
                    lambda: s3.run(None, {"x": np.concatenate([r["x"] for r in reqs])}))
    for name, (_, g, o) in out.items():  # same results, and warm
        got, want = g(), o()
        if name == "list8":
            got = {"y": np.concatenate([r["y"] for r in got])}
        np.testing.assert_array_equal(got["y"], want[0])
    return out


def measure(rounds: int, calls: int) -> dict:
    built = cases()
    times = {name: {"gert": [], "ort": []} for name in built}
    try:
        for name, (_, g, o) in built.items():  # warm both sides
            _per_call(g, calls // 4)
            _per_call(o, calls // 4)
        for _ in range(rounds):
            for name, (_, g, o) in built.items():
                times[name]["gert"].append(_per_call(g, calls))
                times[name]["ort"].append(_per_call(o, calls))
    finally:
        for m in {id(m): m for m, _, _ in built.values()}.values():
            m.close()
    result = {}
    for name, t in times.items():
        g, o = statistics.median(t["gert"]), statistics.median(t["ort"])
        result[name] = {"gert_us": g * 1e6, "ort_us": o * 1e6, "ratio": g / o,
                        "gert_rounds_us": [x * 1e6 for x in t["gert"]], "ort_rounds_us": [x * 1e6 for x in t["ort"]]}
    return result


def profile(calls: int) -> None:
    built = cases()
    try:
        g = built["one-node"][1]
        _per_call(g, 1000)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            g()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)
    finally:
        for m in {id(m): m for m, _, _ in built.values()}.values():
            m.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--profile", type=int, default=0, help="cProfile N Model.run calls of the one-node case")
    args = ap.parse_args(argv)
    if args.profile:
        profile(args.profile)
        return 0
    result = measure(args.rounds, args.calls)
    print(f"# {machine()}; median of {args.rounds} interleaved rounds of {args.calls} calls")
    print(f"{'case':<10} {'gert us':>9} {'ORT run() us':>13} {'ratio':>7}")
    for name, r in result.items():
        print(f"{name:<10} {r['gert_us']:>9.2f} {r['ort_us']:>13.2f} {r['ratio']:>6.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "rounds": args.rounds, "calls": args.calls, "cases": result}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
