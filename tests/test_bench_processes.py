"""benchmarks/bench_processes.py runs both settings in separate processes and reports each round (a short run on
PP-OCR cls; each process checks its result against ONNX Runtime's; the speed itself is not asserted)."""

from __future__ import annotations

import os
import sys

from _helpers import REPO, RUNTIME

pytestmark = RUNTIME


def test_bench_processes_runs_both_settings_and_checks_results(tmp_path):
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        import bench_processes
    finally:
        sys.path.pop(0)
    out = bench_processes.main(
        ["--model", "cls", "--processes", "2", "--seconds", "0.3", "--rounds", "1", "--json", str(tmp_path / "r.json")]
    )
    assert set(out["totals"]) == {"shared", "own"}
    assert all(len(r) == 1 and len(r[0]) == 2 and min(r[0]) > 0 for r in out["rounds"].values()), out["rounds"]
    assert (tmp_path / "r.json").exists()
