"""The documented benchmark command really measures (pyproject's addopts disable benchmarks for the smoke run in
`python -m pytest`), its JSON holds gert and baseline in one group, and run_all.py tabulates their ratio."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from _helpers import REPO, child_pytest_env


def run_all_scripts() -> list:
    """benchmarks/run_all.py's SCRIPTS (read, not run)."""
    import ast

    tree = ast.parse(open(os.path.join(REPO, "benchmarks", "run_all.py")).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SCRIPTS":
            return [(elt.elts[0].value,) for elt in node.value.elts]
    raise AssertionError("run_all.py has no SCRIPTS")


def test_benchmark_only_measures_and_run_all_reports_ratios(tmp_path):
    j, md = tmp_path / "b.json", tmp_path / "RESULTS.md"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "benchmarks/test_model_run.py",
            "--benchmark-only",
            "--benchmark-enable",
            f"--benchmark-json={j}",
            "--benchmark-max-time=0.01",
            "--benchmark-min-rounds=3",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=child_pytest_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    benches = json.loads(j.read_text())["benchmarks"]
    assert len(benches) == 6 and all(b["stats"]["rounds"] >= 3 for b in benches)
    groups: dict = {}
    for b in benches:
        groups.setdefault(b["group"], {})[b["extra_info"]["role"]] = b["stats"]["median"]
    assert sorted(groups) == [
        "Model.run overhead relu-1x64-static",
        "Model.run overhead relu-3rows-to-gear4",
        "Model.run(list of 8) vs ORT on the concatenated batch",
    ]
    # only the tabulation is tested here: every script benchmark skipped (each runs for minutes on a busy machine)
    scripts = [name for name, *_ in run_all_scripts()]
    r = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "benchmarks", "run_all.py"),
            "--from-json",
            str(j),
            "--skip",
            ",".join(scripts),
            "--out",
            str(md),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    text = md.read_text()
    assert "## test_model_run.py" in text and "overhead over ONNX Runtime" in text
    for group, med in groups.items():
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| {group} |") and "| gert |" in ln)
        cells = [c.strip() for c in row.split("|")]
        assert float(cells[8]) == round(med["gert"] / med["baseline"], 3), row


def test_run_all_shows_the_spread_of_several_runs(tmp_path):
    """--from-json with one JSON per run (what --runs N writes): each entry's median is the median over the runs,
    and the ratio cell is the median of the runs' ratios with their [min, max]."""

    def bench(name: str, role: str, median: float) -> dict:
        return {
            "name": name,
            "fullname": f"benchmarks/test_model_run.py::{name}",
            "group": "g",
            "param": name,
            "extra_info": {"role": role},
            "stats": {"median": median, "iqr": 1e-7, "rounds": 10},
        }

    paths = []
    for k, (base, gert) in enumerate([(4e-6, 4.4e-6), (5e-6, 5.0e-6), (4e-6, 4.8e-6)]):
        p = tmp_path / f"b{k}.json"
        p.write_text(json.dumps({"benchmarks": [bench("ort", "baseline", base), bench("gert", "gert", gert)]}))
        paths.append(str(p))
    md = tmp_path / "RESULTS.md"
    scripts = [name for name, *_ in run_all_scripts()]
    r = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "benchmarks", "run_all.py"),
            "--from-json",
            *paths,
            "--skip",
            ",".join(scripts),
            "--out",
            str(md),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    row = next(ln for ln in md.read_text().splitlines() if ln.startswith("| g |") and "| gert |" in ln)
    cells = [c.strip() for c in row.split("|")]
    # the runs' ratios 1.1, 1.0, 1.2; gert's median over the runs 4.8 us
    assert cells[4] == "4.80 us" and cells[8] == "1.100 [1.000, 1.200]", row
