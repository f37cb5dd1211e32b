"""Time to ready (gert.load + warmup) with GE's compile cache: cold (an empty cache) vs warm (the cache the cold
load filled), against no cache (issue 16).

    python benchmarks/bench_cache.py [--rounds N] [--json out.json]

det with batch gears 1, 2, 4, 8 on 2 streams (640x640) and rec with 6 exact width gears (1 stream). Each load runs
in a fresh process, as a restarted server would (the interpreter and gert imported before the clock starts);
rounds interleave the three cases so that the machine's noise hits them alike. On the host NPU a compile is ONNX
Runtime creating a session (tens of ms), and a hit loads ONNX Runtime's optimized model instead, so the gain is
small; the point is the NPU, where each GE compile takes seconds to minutes. A cold load also writes the cache.
``check`` is the time the warm load spent checking entries before their hits (gert/core/cache_entry.py: who wrote each
file, the key's inputs, and each file's identity and ctime, or where those changed its SHA-256, against gert's
record), and ``check/warm`` its share of the warm load's time to ready (target: under 5%). ``copied`` loads warm
from a copy of the cache (new inodes, as after a restore): every file is hashed once; ``hash/copied`` is that
check's share of its time to ready.
Needs ``pip install --no-deps rapidocr-onnxruntime==1.4.4``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import DET, REC, machine, ppocr_model  # noqa: E402

REC_W = "p2o.DynamicDimension.1"
CASES = {
    "det": (
        DET,
        dict(
            streams=2,
            cube_cores=1,
            gears={"batch": [1, 2, 4, 8], "p2o.DynamicDimension.1": [640], "p2o.DynamicDimension.2": [640]},
        ),
    ),
    "rec": (
        REC,
        dict(
            streams=1,
            cube_cores=1,
            gears={"batch": [1], "?": [48], REC_W: [160, 320, 480, 640, 800, 960]},
            shape_policy={"?": "exact", REC_W: "exact"},
        ),
    ),
}

_CHILD = """
import json, sys, time
import gert
path, kwargs, cache = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] or None
t = time.perf_counter()
m = gert.load(path, cache_dir=cache, **kwargs)
m.warmup()
ready = time.perf_counter() - t
s = m.stats()
m.close()
print(json.dumps({"ready": ready, "graphs": s["compiles"], "hits": s["cache_hits"], "misses": s["cache_misses"],
                  "compile_s": sum(x["compile_seconds"] for x in s["streams"]),
                  "check_s": m.compile_cache.stats.seconds if m.compile_cache else 0.0,
                  "checks": m.compile_cache.stats.checks if m.compile_cache else 0}))
"""


def load_once(path: str, kwargs: dict, cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GERT_CACHE_DIR"}
    p = subprocess.run(
        [sys.executable, "-c", _CHILD, path, json.dumps(kwargs), cache], capture_output=True, text=True, env=env
    )
    if p.returncode:
        raise SystemExit(f"load failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows, raw = [], {}
    root = tempfile.mkdtemp(prefix="gert-bench-cache-")
    try:
        for name, (file, kwargs) in CASES.items():
            path = ppocr_model(file)
            if path is None:
                raise SystemExit(f"{file} not found: pip install --no-deps rapidocr-onnxruntime==1.4.4")
            samples: dict = {"none": [], "cold": [], "warm": [], "copied": []}
            size = 0
            for r in range(a.rounds):
                cache = os.path.join(root, f"{name}-{r}")
                samples["none"].append(load_once(path, kwargs, ""))
                cold = load_once(path, kwargs, cache)
                warm = load_once(path, kwargs, cache)
                assert warm["misses"] == 0 and warm["hits"] == warm["graphs"], warm
                shutil.copytree(cache, cache + "-copy")
                copied = load_once(path, kwargs, cache + "-copy")
                assert copied["misses"] == 0, copied
                samples["cold"].append(cold)
                samples["warm"].append(warm)
                samples["copied"].append(copied)
                size = du(cache)
            raw[name] = samples
            med = {k: statistics.median(x["ready"] for x in v) for k, v in samples.items()}
            med["check"] = statistics.median(x["check_s"] for x in samples["warm"])
            med["check_share"] = statistics.median(x["check_s"] / x["ready"] for x in samples["warm"])
            med["hash_share"] = statistics.median(x["check_s"] / x["ready"] for x in samples["copied"])
            rows.append((name, samples["warm"][0]["graphs"], samples["cold"][0]["misses"], med, size))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(machine() + f"; load average {os.getloadavg()[0]:.1f}")
    print(f"time to ready (gert.load + warmup), seconds, median of {a.rounds} fresh processes each")
    print(
        f"{'model':6}{'graphs':>7}{'compiled':>9}{'no cache':>10}{'cold':>8}{'warm':>8}{'warm/none':>10}"
        f"{'cache MB':>9}{'check ms':>9}{'check/warm':>11}{'copied':>8}{'hash/copied':>12}"
    )
    for name, graphs, compiled, med, size in rows:
        print(
            f"{name:6}{graphs:>7}{compiled:>9}{med['none']:>10.2f}{med['cold']:>8.2f}{med['warm']:>8.2f}"
            f"{med['warm'] / med['none']:>10.2f}{size / 2**20:>9.1f}{med['check'] * 1e3:>9.1f}"
            f"{med['check_share']:>11.1%}{med['copied']:>8.2f}{med['hash_share']:>12.1%}"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
