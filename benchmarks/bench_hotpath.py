"""gert's per-request cost against ONNX Runtime's ``InferenceSession.run()``, in one process (issue 23).

    python benchmarks/bench_hotpath.py [--rounds 5] [--calls 4000] [--json out.json] [--profile N]

Cases (one intra-op thread each side; gert: cube_cores=1):

- ``one-node``: a Relu on [1, 64] (static graph): ``Model.run`` vs ``InferenceSession.run()``;
- ``gear``: a symbolic batch, 3 rows padded to gear 4 and sliced back, vs ORT on the 3 rows;
- ``list8``: ``Model.run(list of 8 requests of 1 row)`` (merged into one batch of gear 8, split back) vs ORT on the 8
  rows concatenated by the caller (``np.concatenate`` included).

Each round times ``--calls`` calls of every case and side, interleaved (gert, gert's Python path, ORT, per case),
so that noise from the other processes on the machine hits all alike; reported: the median over the rounds of the
per-call mean of each side, and the ratios to ORT. "Python path": the same gert model with its compiled hot path
(gert/core/_hotpath.pyx) turned off, i.e. the request pipeline as it ran before it. ``--profile N``: instead,
cProfile over N ``Model.run`` calls of the one-node case (the top functions by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gert
from _common import machine, ort_session, per_call, relu_model


def cases() -> dict:
    """name -> (gert callable, ORT callable, check), built on the loaded models (kept open by the caller)."""
    rng = np.random.default_rng(0)
    out = {}
    x1 = rng.standard_normal((1, 64)).astype(np.float32)
    static = relu_model(1)
    m1 = gert.load(static, cube_cores=1)
    s1 = ort_session(static, 1)
    p1 = gert.load(static, cube_cores=1)
    out["one-node"] = (m1, lambda: m1.run({"x": x1}), lambda: s1.run(None, {"x": x1}), p1, lambda: p1.run({"x": x1}))

    sym = relu_model("batch")
    x3 = rng.standard_normal((3, 64)).astype(np.float32)
    m3 = gert.load(sym, cube_cores=1, gears={"batch": [1, 2, 4, 8]})
    p3 = gert.load(sym, cube_cores=1, gears={"batch": [1, 2, 4, 8]})
    s3 = ort_session(sym, 1)
    out["gear"] = (m3, lambda: m3.run({"x": x3}), lambda: s3.run(None, {"x": x3}), p3, lambda: p3.run({"x": x3}))

    reqs = [{"x": rng.standard_normal((1, 64)).astype(np.float32)} for _ in range(8)]
    out["list8"] = (
        m3,
        lambda: m3.run(reqs),
        lambda: s3.run(None, {"x": np.concatenate([r["x"] for r in reqs])}),
        p3,
        lambda: p3.run(reqs),
    )
    for m in (p1, p3):
        m._hot.enabled = False  # the Python path, for comparison
    for name, (_, g, o, _, py) in out.items():  # same results, and warm
        want = o()[0]
        for fn in (g, py):
            got = fn()
            if name == "list8":
                got = {"y": np.concatenate([r["y"] for r in got])}
            np.testing.assert_array_equal(got["y"], want)
    return out


def _close(built: dict) -> None:
    for c in built.values():
        for m in (c[0], c[3]):
            if not m.closed:
                m.close()


def measure(rounds: int, calls: int) -> dict:
    built = cases()
    sides = ("gert", "python", "ort")
    times = {name: {s: [] for s in sides} for name in built}
    try:
        for _, g, o, _, py in built.values():  # warm every side
            for fn in (g, py, o):
                per_call(fn, calls // 4)
        for _ in range(rounds):
            for name, (_, g, o, _, py) in built.items():
                for side, fn in zip(sides, (g, py, o)):
                    times[name][side].append(per_call(fn, calls))
        hits = {name: c[0].stats()["hot_path"]["hits"] for name, c in built.items()}
    finally:
        _close(built)
    result = {}
    for name, t in times.items():
        med = {s: statistics.median(t[s]) for s in sides}
        result[name] = {
            "gert_us": med["gert"] * 1e6,
            "python_path_us": med["python"] * 1e6,
            "ort_us": med["ort"] * 1e6,
            "ratio": med["gert"] / med["ort"],
            "python_path_ratio": med["python"] / med["ort"],
            "hot_path_hits": hits[name],
            **{f"{s}_rounds_us": [x * 1e6 for x in t[s]] for s in sides},
        }
    return result


def profile(calls: int, python_path: bool = False) -> None:
    built = cases()
    try:
        g = built["one-node"][4 if python_path else 1]
        per_call(g, 1000)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            g()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)
    finally:
        _close(built)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--profile", type=int, default=0, help="cProfile N Model.run calls of the one-node case")
    ap.add_argument("--python-path", action="store_true", help="--profile the Python path (hot path off)")
    args = ap.parse_args(argv)
    if args.profile:
        profile(args.profile, args.python_path)
        return 0
    result = measure(args.rounds, args.calls)
    print(f"# {machine()}; median of {args.rounds} interleaved rounds of {args.calls} calls")
    print(f"{'case':<10} {'gert us':>9} {'ORT run() us':>13} {'ratio':>7}   {'Python path us':>15} {'ratio':>7}")
    for name, r in result.items():
        print(
            f"{name:<10} {r['gert_us']:>9.2f} {r['ort_us']:>13.2f} {r['ratio']:>6.2f}x   "
            f"{r['python_path_us']:>15.2f} {r['python_path_ratio']:>6.2f}x"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "rounds": args.rounds, "calls": args.calls, "cases": result}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
