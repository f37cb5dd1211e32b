"""Issue 43 item 3: tritonserver serving examples/ensemble_repository (six Python stubs: det, cls, rec on gert, the
ensemble's det_pre / det_post steps, the BLS model ocr) starts, answers, and stops cleanly, ten times in a row:
exit status 0 each time, no abort in its log, every stub process gone and every stub's shared memory region
removed from /dev/shm.

Why a stop failed before (the notes of issue 43): Triton's Python backend takes ~1.2-1.5 s to unload each stub,
gert's or not (a plain model.py takes as long), the stubs in parallel; benchmarks/bench_ensemble.py gave its 13 stubs
an exit timeout of 5 s, which a loaded 2-core machine overran (exit 1, "Exit timeout expired. Exiting
immediately."), and a server that exits that way while unloads still run can abort on its way out. gert's finalize
is bounded (gert_triton/model.py) and the exit timeout here is Triton's default (30 s).
"""

from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest

from gert_triton.server import pytriton_root
from triton_server import ABORTED, log_tail, start_server

grpcclient = pytest.importorskip("tritonclient.grpc")
pytest.importorskip("rapidocr_onnxruntime")
pytest.importorskip("cv2")

pytestmark = [pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE_REPO = os.path.join(ROOT, "examples", "ensemble_repository")
CYCLES = 10
EXIT_TIMEOUT_S = 30  # Triton's default: the stubs' unload, in parallel, on a loaded machine
STOP_WAIT_S = 90.0  # SIGTERM -> exit, above the exit timeout (a stop that overran it is SIGKILLed and fails)
CALL_TIMEOUT = 120.0
REGION = re.compile(r"(triton_python_backend_shm_region_[0-9a-f-]+)")


def image() -> np.ndarray:
    """A 320x320 BGR text image [1, 320, 320, 3], as the ensemble takes it."""
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (320, 320), "white")
    ImageDraw.Draw(im).text((20, 140), "gert shutdown 42", fill="black")
    return np.ascontiguousarray(np.array(im)[:, :, ::-1])[np.newaxis]


def children(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return not f.read().split(") ")[-1].startswith("Z")
    except OSError:
        return False


def shutdown_log(path: str) -> str:
    with open(path, errors="replace") as f:
        text = f.read()
    at = text.rfind("Signal (15) received")
    return text[at:] if at >= 0 else log_tail(path)


def test_ensemble_repository_starts_and_stops_cleanly_ten_times(tmp_path):
    x = image()
    for cycle in range(CYCLES):
        log = str(tmp_path / f"server{cycle}.log")
        srv = start_server(EXAMPLE_REPO, log, [f"--exit-timeout-secs={EXIT_TIMEOUT_S}", "--log-verbose=1"])
        try:
            stubs = children(srv.process.pid)
            client = grpcclient.InferenceServerClient(srv.url("grpc"))
            try:  # every stub of the pipeline does work before the stop: det_pre, det, det_post
                inp = grpcclient.InferInput("image", list(x.shape), "UINT8")
                inp.set_data_from_numpy(x)
                boxes = client.infer("det_ensemble", [inp], client_timeout=CALL_TIMEOUT).as_numpy("boxes")
                assert boxes is not None and boxes.ndim == 4, f"cycle {cycle}: det_ensemble answered {boxes!r}"
            finally:
                client.close()
        finally:
            started = time.monotonic()
            code = srv.stop(timeout=STOP_WAIT_S)
            took = time.monotonic() - started
        with open(log, errors="replace") as f:
            text = f.read()
        assert len(stubs) >= 6, f"cycle {cycle}: expected the repository's six stubs, found {stubs}"
        assert code == 0, f"cycle {cycle}: tritonserver exited with {code} after {took:.1f} s:\n{shutdown_log(log)}"
        assert not ABORTED.search(text), f"cycle {cycle}: tritonserver aborted:\n{shutdown_log(log)}"
        left = [p for p in stubs if alive(p)]
        assert not left, f"cycle {cycle}: stub processes {left} outlived the server"
        regions = sorted(set(REGION.findall(text)))
        assert regions, f"cycle {cycle}: no stub shared memory region named in the log"
        kept = [r for r in regions if os.path.exists(os.path.join("/dev/shm", r))]
        assert not kept, f"cycle {cycle}: shared memory regions left behind: {kept}"
