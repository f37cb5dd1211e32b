"""Run the differential row fuzzer (tests/test_fuzz_rows.py, long profile) for N minutes and count what happened.

    python benchmarks/fuzz_rows.py --minutes 10            # counts; failures' repro scripts into --out
    python benchmarks/fuzz_rows.py --minutes 30 --strict   # every known class strict (is it fixed?)

The fuzzer runs in pytest subprocesses of --chunk examples each, every one with a new hypothesis seed, failures
recorded and not raised (GERT_FUZZ_COLLECT=1: no shrinking, the run goes on). A subprocess that dies (a crash, an
abort) is counted as a crash with the example it was running (its repro is kept) and the next chunk starts.
Printed: examples, per op family, per front door, per outcome, per request outcome, failures per class with the
smallest repro of each (written to --out as <class>.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _chunk(stats: str, examples: int, seed: int, strict: bool, budget: float) -> int:
    """One pytest run of the long profile; its return code (None when it ran out of time)."""
    env = dict(os.environ, GERT_FUZZ_STATS=stats, GERT_FUZZ_COLLECT="1", GERT_FUZZ_EXAMPLES=str(examples))
    if strict:
        env["GERT_FUZZ_STRICT"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-n",
        "0",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        os.path.join("tests", "test_fuzz_rows.py"),
        "-k",
        "every_request",
        "--hypothesis-profile",
        "long",
        f"--hypothesis-seed={seed}",
    ]
    try:
        return subprocess.run(
            cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=budget
        ).returncode
    except subprocess.TimeoutExpired:
        return -999


def _crash(stats: str, rc: int) -> None:
    """The example a dead subprocess was running, recorded as a crash."""
    current = stats + ".current.py"
    text = open(current).read() if os.path.exists(current) else "(no example recorded)"
    line = {
        "families": [],
        "ops": [],
        "door": "?",
        "outcome": f"FAIL:crash(rc {rc})",
        "requests": [],
        "failures": [["crash", None, None, f"the fuzzing process died with rc {rc}", f"crash(rc {rc})"]],
        "repro": text,
    }
    with open(stats, "a") as f:
        f.write(json.dumps(line) + "\n")


def _table(title: str, counter: collections.Counter) -> None:
    print(f"{title}:")
    for k, v in counter.most_common():
        print(f"  {v:7d}  {k}")


def report(stats: str, out: str) -> int:
    """Print the counts of ``stats``; write the smallest repro per failure class into ``out``; failures found."""
    lines = [json.loads(x) for x in open(stats)] if os.path.exists(stats) else []
    print(f"examples: {len(lines)}")
    _table("per op family (examples using it)", collections.Counter(f for x in lines for f in x["families"]))
    _table("per front door", collections.Counter(x["door"] for x in lines))
    _table("per outcome", collections.Counter(x["outcome"] for x in lines))
    _table("per request outcome", collections.Counter(r for x in lines for r in x["requests"]))
    _table(
        "load refusals (GertError at load, by message)",
        collections.Counter(
            re.sub(r"\d+", "N", re.sub(r"'[^']*'|\[[^\]]*\]", "_", x["load_error"]))[:80]
            for x in lines
            if x.get("load_error")
        ),
    )
    smallest: dict = {}
    for x in lines:
        if not x["outcome"].startswith(("FAIL", "known")):
            continue
        klass = x["failures"][0][4]
        size = len(x.get("repro", ""))
        if klass not in smallest or size < smallest[klass][0]:
            smallest[klass] = (size, x)
    if smallest:
        os.makedirs(out, exist_ok=True)
    for klass, (_, x) in sorted(smallest.items()):
        path = os.path.join(out, klass.replace(":", "_").replace(" ", "_").replace("(", "").replace(")", "") + ".py")
        with open(path, "w") as f:
            f.write(x.get("repro", ""))
        print(f"class {klass}: smallest repro {path}: {x['failures'][0][0]} {x['failures'][0][3][:120]}")
    return sum(1 for x in lines if x["outcome"].startswith("FAIL"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--chunk", type=int, default=1000, help="examples per pytest subprocess")
    ap.add_argument("--strict", action="store_true", help="no known class: every failure counts")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "gert_fuzz_rows"))
    args = ap.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    stats = os.path.join(args.out, "stats.jsonl")
    rng = random.Random(args.seed)
    deadline = time.monotonic() + 60 * args.minutes
    chunks = crashes = 0
    while time.monotonic() < deadline:
        rc = _chunk(stats, args.chunk, rng.randrange(2**31), args.strict, deadline - time.monotonic() + 120)
        chunks += 1
        if rc not in (0, 1, 5, -999):  # pytest: passed / failed / nothing collected; -999: out of time
            crashes += 1
            _crash(stats, rc)
    print(f"{args.minutes} minutes, {chunks} pytest runs, {crashes} crashed; stats in {stats}")
    failed = report(stats, args.out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
