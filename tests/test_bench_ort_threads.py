"""benchmarks/bench_ort_threads.py runs and checks what it measures: both variants from several threads on one session,
each result compared with ONNX Runtime's (a short window on PP-OCR cls; the speed itself is not asserted)."""

from __future__ import annotations

import os
import sys

from _helpers import REPO, RUNTIME
from models import CLS, ppocr_model

pytestmark = RUNTIME


def test_bench_ort_threads_measures_both_sessions_and_counts_wrong_results(tmp_path):
    path = ppocr_model(CLS)
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        import bench_ort_threads
    finally:
        sys.path.pop(0)
    out = bench_ort_threads.main(
        ["--model", path, "--threads", "3", "--seconds", "0.3", "--rounds", "2", "--json", str(tmp_path / "r.json")]
    )
    assert [r["variant"] for r in out["rows"]] == ["ort", "gert"]
    assert all(r["rps"] > 0 and r["wrong"] == 0 for r in out["rows"]), out["rows"]
    assert len(out["ratios"]) == 2 and (tmp_path / "r.json").exists()
