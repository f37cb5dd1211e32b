"""Run the benchmarks and write benchmarks/RESULTS.md.

    python benchmarks/run_all.py [--quick] [--runs 3] [--once precision,memory] [--skip triton,rapidocr]
                                 [--json out.json]
    python benchmarks/run_all.py --from-json out.json [more.json ...] --skip triton,rapidocr    # JSONs you have

The microbenchmarks are pytest-benchmark tests (``benchmarks/test_*.py``): this runs ``pytest benchmarks/
--benchmark-only --benchmark-enable --benchmark-json=...`` and tabulates the JSON, one table per module with every
group's gert entries and their baseline (measured in the same process), the ratio and the difference of their
median times. With ``--runs N`` every benchmark runs N times (each pytest-benchmark run its own process): the
tables show each entry's median over the runs and the ratio's median [min, max] over the runs, and a script's
section holds each run's output (``--once`` names scripts to run once: those that are not timings). The benchmarks
that run several processes stay scripts, and their output is appended as it is:
``bench_triton.py`` (one real tritonserver, several model.py variants), ``bench_rapidocr.py`` (RapidOCR on
ONNX Runtime and on gert, in alternating processes) and ``bench_memory.py`` (peak and steady RSS of fresh processes, and
of a fresh tritonserver's process tree serving three models).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import subprocess
import sys
import tempfile
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _common import machine  # noqa: E402

PYTEST = ["-m", "pytest", "benchmarks/", "--benchmark-only", "--benchmark-enable", "-q", "-p", "no:cacheprovider"]
QUICK = ["--benchmark-max-time=0.2", "--benchmark-min-rounds=3"]
# benchmarks that stay scripts (several processes each): (name for --skip, script, normal args, quick args)
SCRIPTS = [
    ("triton", "bench_triton.py", [], ["--duration", "4", "--warmup", "1", "--rounds", "2"]),
    ("perf_analyzer", "bench_perf_analyzer.py", [], ["--concurrency", "4", "--rounds", "1", "--interval-ms", "1000"]),
    ("rapidocr", "bench_rapidocr.py", [], ["--pairs", "1", "--rounds", "2"]),
    ("shapes", "bench_shapes.py", [], ["--requests", "40", "--repeats", "1"]),
    ("compile", "bench_compile.py", [], ["--repeat", "2"]),
    ("cache", "bench_cache.py", [], ["--rounds", "1"]),
    ("sequences", "bench_sequences.py", [], ["--duration", "3", "--rounds", "1"]),
    ("precision", "bench_precision.py", [], []),
    ("inproc", "bench_inproc_batching.py", [], ["--seconds", "1", "--rounds", "1"]),
    ("ort_threads", "bench_ort_threads.py", [], ["--seconds", "1", "--rounds", "2"]),
    ("processes", "bench_processes.py", [], ["--seconds", "2", "--rounds", "1", "--model", "cls"]),
    ("ensemble", "bench_ensemble.py", [], ["--duration", "6", "--rounds", "2", "--warmup", "1"]),
    ("memory", "bench_memory.py", [], ["--work", "rapidocr:12,det:10,triton3:4"]),
    ("hotpath", "bench_hotpath.py", [], ["--rounds", "3", "--calls", "1000"]),
    ("graph_call", "bench_graph_call.py", [], ["--rounds", "3", "--calls", "1000"]),
    ("single_client", "bench_single_client.py", [], ["--rounds", "2", "--requests", "20"]),
]


def describe(path: str) -> str:
    """A module's docstring without its usage lines."""
    with open(path) as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    return "\n\n".join(p.strip() for p in doc.split("\n\n") if p.strip() and not p.strip().startswith("python "))


def fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.2f} {unit}"
    return f"{seconds / 1e-9:.0f} ns"


def _median(values: list) -> float:
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def group_rows(benches: list, runs: list | None = None) -> list:
    """Markdown table rows of one group: each entry's median, IQR, rounds, requests/s where it ran a fixed number
    of requests, and for gert entries their median time over the baseline's, and the difference. ``runs``: the
    same entries of every run (lists of benchmark dicts by entry name): then the median is the median over the runs
    and the ratio is the median [min, max] of the runs' ratios."""
    base = next((b for b in benches if b["extra_info"].get("role") == "baseline"), None)
    rows = []
    for b in sorted(benches, key=lambda b: b["extra_info"].get("role") != "baseline"):
        st, extra = b["stats"], b["extra_info"]
        rps = f"{extra['requests'] / st['median']:.1f}" if "requests" in extra else ""
        ratio = diff = ""
        if base is not None and b is not base:
            ratio = f"{st['median'] / base['stats']['median']:.3f}"
            delta = st["median"] - base["stats"]["median"]
            diff = ("-" if delta < 0 else "+") + fmt_time(abs(delta))
            per_run = [
                r[b["name"]]["stats"]["median"] / r[base["name"]]["stats"]["median"]
                for r in runs or []
                if b["name"] in r and base["name"] in r
            ]
            if len(per_run) > 1:  # each run's ratio is of one process: their median, and their range
                ratio = f"{_median(per_run):.3f} [{min(per_run):.3f}, {max(per_run):.3f}]"
        notes = ", ".join(f"{k}={v}" for k, v in extra.items() if k not in ("role", "requests", "widths"))
        rows.append(
            f"| {b['group']} | `{b['param'] or b['name']}` | {extra.get('role', '')} | "
            f"{fmt_time(st['median'])} | {fmt_time(st['iqr'])} | {st['rounds']} | {rps} | {ratio} | {diff} | "
            f"{notes} |"
        )
    return rows


def combine(datas: list) -> tuple:
    """Several pytest-benchmark JSONs of the same benchmarks: (one JSON whose entries carry the median over the runs
    of their medians, the entries of each run by name). One JSON: itself, and no runs."""
    if len(datas) == 1:
        return datas[0], None
    runs = [{b["name"]: b for b in d["benchmarks"]} for d in datas]
    combined = []
    for b in datas[0]["benchmarks"]:
        same = [r[b["name"]] for r in runs if b["name"] in r]
        st = dict(b["stats"])
        st["median"] = _median([x["stats"]["median"] for x in same])
        st["iqr"] = _median([x["stats"]["iqr"] for x in same])
        st["rounds"] = sum(x["stats"]["rounds"] for x in same)
        combined.append({**b, "stats": st})
    return {"benchmarks": combined}, runs


def report(datas: list) -> list:
    """One markdown section per benchmark module, from pytest-benchmark's JSON (of one run or several)."""
    data, runs = combine(datas)
    modules: OrderedDict[str, OrderedDict] = OrderedDict()
    for b in data["benchmarks"]:
        module = b["fullname"].split("::")[0]
        modules.setdefault(module, OrderedDict()).setdefault(b["group"], []).append(b)
    parts = []
    for module, groups in modules.items():
        lines = [
            f"## {os.path.basename(module)}\n",
            describe(os.path.join(REPO, module)),
            "",
            f"`python -m pytest {module} --benchmark-only --benchmark-enable`",
            "",
            "| group | benchmark | role | median | IQR | rounds | req/s | time gert/baseline | gert - baseline "
            "| extra |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for benches in groups.values():
            lines += group_rows(benches, runs)
        parts.append("\n".join(lines) + "\n")
    return parts


def run_pytest(json_path: str, quick: bool) -> int:
    cmd = [sys.executable, *PYTEST, f"--benchmark-json={json_path}", *(QUICK if quick else [])]
    print("== " + " ".join(["python", *cmd[1:]]), file=sys.stderr, flush=True)
    return subprocess.run(cmd, cwd=REPO).returncode


def run_script(name: str, script: str, args: list, runs: int = 1) -> str:
    """Run a benchmark script ``runs`` times; its outputs as a markdown section."""
    cmd = [sys.executable, os.path.join(HERE, script), *args]
    bodies = []
    for k in range(runs):
        print(
            f"== {name}{f' (run {k + 1} of {runs})' if runs > 1 else ''}: {' '.join(cmd[1:])}",
            file=sys.stderr,
            flush=True,
        )
        r = subprocess.run(cmd, capture_output=True, text=True)
        body = r.stdout.strip() or "(no output)"
        if r.returncode != 0:
            body += f"\n\nFAILED (exit {r.returncode}):\n{r.stderr.strip()[-2000:]}"
        else:
            body += "".join("\n" + ln for ln in r.stderr.splitlines() if "skipped" in ln.lower())
        bodies.append(f"run {k + 1} of {runs}:\n{body}" if runs > 1 else body)
    shown = " ".join(["python", f"benchmarks/{script}", *cmd[2:]])
    body = "\n\n".join(bodies)
    return f"## {script}\n\n{describe(os.path.join(HERE, script))}\n\n`{shown}`\n\n```\n{body}\n```\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs (for a smoke check, not for figures)")
    ap.add_argument("--skip", default="", help="comma-separated: pytest, " + ", ".join(s[0] for s in SCRIPTS))
    ap.add_argument("--json", help="keep pytest-benchmark's JSON here (default: a temporary file)")
    ap.add_argument(
        "--from-json", nargs="+", help="tabulate these pytest-benchmark JSONs (one per run) instead of running pytest"
    )
    ap.add_argument("--runs", type=int, default=1, help="run every benchmark this many times (the spread is shown)")
    ap.add_argument("--once", default="", help="comma-separated scripts to run once whatever --runs says")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    once = {s.strip() for s in args.once.split(",") if s.strip()}
    if args.runs < 1:
        ap.error(f"--runs must be >= 1, got {args.runs}")
    import gert

    when = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
    load_before = os.getloadavg()[0]
    parts = [
        f"# gert benchmark results\n\nMachine: {machine()}; backend: {gert.backend()}; {when}"
        f"{' (quick run)' if args.quick else ''}.\n\nEach group holds gert and its baseline, measured in the "
        "same process; `time gert/baseline` is the ratio of their median times (below 1: gert is faster). "
        "Absolute figures vary between machines. Regenerate with "
        f"`python benchmarks/run_all.py{' --quick' if args.quick else ''}"
        f"{f' --runs {args.runs}' if args.runs > 1 else ''}{f' --once {args.once}' if once else ''}`"
        f"{f' ({args.runs} runs: medians over the runs, ratios as median [min, max])' if args.runs > 1 else ''}"
        ".\n"
    ]
    failed = False
    if args.from_json or "pytest" not in skip:
        with tempfile.TemporaryDirectory() as tmp:
            if args.from_json:
                paths = args.from_json
            else:
                base = args.json or os.path.join(tmp, "benchmarks.json")
                paths = [
                    base if args.runs == 1 else f"{os.path.splitext(base)[0]}.{k + 1}.json" for k in range(args.runs)
                ]
                for path in paths:
                    failed |= run_pytest(path, args.quick) != 0
            datas = []
            for path in paths:
                if os.path.exists(path):
                    with open(path) as f:
                        datas.append(json.load(f))
            if datas:
                parts += report(datas)
            if len(datas) < len(paths):
                failed = True
                parts.append("## pytest-benchmark\n\nFAILED: a run wrote no JSON.\n")
    for name, script, normal, quick in SCRIPTS:
        if name not in skip:
            section = run_script(name, script, quick if args.quick else normal, 1 if name in once else args.runs)
            failed |= "\nFAILED (exit" in section
            parts.append(section)
    load_after, cpus = os.getloadavg()[0], os.cpu_count() or 1
    parts[0] = parts[0].replace(f"{when}", f"{when}; load average {load_before:.1f} before, {load_after:.1f} after", 1)
    if load_before > cpus:  # (the load after counts this run's own threads)
        parts[0] += (
            f"\n**The machine was busy with other work (load average above its {cpus} CPUs): gert and its "
            "baseline ran one after the other, so the load hit them unequally; these ratios are not "
            "reliable. Run again on a quiet machine.**\n"
        )
    with open(args.out, "w") as f:
        f.write("\n".join(parts))
    print(f"wrote {args.out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
