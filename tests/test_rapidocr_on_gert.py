"""A real ONNX Runtime application on gert, unchanged: RapidOCR (det -> cls -> rec, PP-OCR models) over a dozen
rendered text images of different sizes, once on ONNX Runtime and once with gert.patch_onnxruntime(when="always")
applied before RapidOCR is imported. Same texts, same boxes, same scores (to float tolerance)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _helpers import RUNTIME
from models import CLS, ppocr_model

pytestmark = RUNTIME
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "rapidocr_on_gert.py")


def run_app(mode: str) -> dict:
    r = subprocess.run([sys.executable, SCRIPT, mode], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.fixture(scope="module")
def apps():
    ppocr_model(CLS)  # skips (fails under CI) without the PP-OCR wheel
    for mod in ("cv2", "pyclipper", "shapely", "PIL", "yaml"):
        pytest.importorskip(mod)
    return run_app("ort"), run_app("gert")


def test_rapidocr_runs_on_gert_sessions(apps):
    ort_run, gert_run = apps
    for part in ("text_det", "text_cls", "text_rec"):
        assert gert_run["sessions"][part] == "gert.ort_session.InferenceSession", gert_run["sessions"]
        assert ort_run["sessions"][part].startswith("onnxruntime."), ort_run["sessions"]
        st = gert_run["sessions"][part + "_stats"]
        assert st["compiles"] >= 1 and st["request_path_compiles"] == 0, st  # compiled at creation / in background
        assert st["static_hits"] + st["dynamic_hits"] >= 1, st


def test_rapidocr_gives_the_same_text_boxes_and_scores(apps):
    ort_run, gert_run = apps
    want, got = ort_run["results"], gert_run["results"]
    assert len(want) == len(got) == 12
    assert sum(len(r) for r in want) >= 12, "the reference read text in every image"
    for i, (w, g) in enumerate(zip(want, got)):
        assert [t for _, t, _ in g] == [t for _, t, _ in w], f"image {i}"
        for (gb, _, gs), (wb, _, ws) in zip(g, w):
            assert max(abs(a - b) for ga, wa in zip(gb, wb) for a, b in zip(ga, wa)) <= 1.0, f"image {i} box"
            assert abs(gs - ws) <= 1e-3, f"image {i} score"
