"""Run every benchmark suite and write benchmarks/RESULTS.md.

    python benchmarks/run_all.py [--quick] [--skip triton,model]

Each suite measures gert against its baseline in the same process (or, for serving, the same server run) and
prints a table with gert, the baseline and their ratio; RESULTS.md collects the tables with what each measures,
the command that reproduces it, and the machine.
"""
from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import machine  # noqa: E402

# (name, script, normal args, quick args)
SUITES = [
    ("memcpy", "bench_memcpy.py", [], ["--repeat", "5"]),
    ("graph", "bench_graph.py", [], ["--repeat", "5"]),
    ("model", "bench_model.py", [], ["--quick"]),
    ("compile", "bench_compile.py", [], ["--repeat", "2"]),
    ("triton", "bench_triton.py", [], ["--duration", "4", "--warmup", "1", "--rounds", "2"]),
]


def describe(script: str) -> str:
    """The first paragraph of the script's docstring, after its usage line."""
    import ast

    with open(os.path.join(HERE, script)) as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    paras = [p.strip() for p in doc.split("\n\n") if p.strip()]
    text = [p for p in paras if not p.startswith("python ")]
    return "\n\n".join(text[:2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs (for a smoke check, not for figures)")
    ap.add_argument("--skip", default="", help="comma-separated suites to skip: " + ",".join(s[0] for s in SUITES))
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    import gert

    parts = [f"# gert benchmark results\n\nMachine: {machine()}; backend: {gert.backend()}; "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
             f"{' (quick run)' if args.quick else ''}.\n\nRatios compare gert with a baseline measured in the "
             "same run; absolute figures vary between machines. Regenerate with "
             f"`python benchmarks/run_all.py{' --quick' if args.quick else ''}`.\n"]
    failed = []
    for name, script, normal, quick in SUITES:
        if name in skip:
            continue
        cmd = [sys.executable, os.path.join(HERE, script), *(quick if args.quick else normal)]
        print(f"== {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True)
        shown = " ".join(["python", f"benchmarks/{script}", *cmd[2:]])
        body = r.stdout.strip() or "(no output)"
        if r.returncode != 0:
            failed.append(name)
            body += f"\n\nFAILED (exit {r.returncode}):\n{r.stderr.strip()[-2000:]}"
        elif r.stderr.strip():
            notes = [l for l in r.stderr.strip().splitlines() if "skipped" in l.lower()]
            if notes:
                body += "\n\n" + "\n".join(notes)
        parts.append(f"## {name}\n\n{describe(script)}\n\n`{shown}`\n\n```\n{body}\n```\n")
        print(body, file=sys.stderr)
    with open(args.out, "w") as f:
        f.write("\n".join(parts))
    print(f"wrote {args.out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
