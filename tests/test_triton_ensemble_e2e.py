"""Issue 26: gert models in a Triton ensemble and behind a BLS model, against the REAL tritonserver.

The server runs `gert serve` on examples/ensemble_repository from another working directory (its own free ports),
with two settings changed so that batching is made to happen, not hoped for: the BLS model ``ocr`` and the model
``det`` wait up to WAIT_US for a batch of N (preferred_batch_size), and the tests send N requests at once
(released together by a barrier). Everything else is the example as committed: the ensemble ``det_ensemble`` and
the BLS model ``ocr`` answer N text images with the boxes and text that the same pipeline gives in-process on gert
(examples/ocr_pipeline.py) and that RapidOCR gives on ONNX Runtime, over HTTP and gRPC; a bad image fails alone with
INVALID_ARG; det runs the BLS model's N det calls as one batch (Triton's statistics and gert's gear hits).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest

from gert_triton.server import free_port, pytriton_root
from triton_server import log_tail

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
pytest.importorskip("rapidocr_onnxruntime")
pytest.importorskip("cv2")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = [pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
EXAMPLE_REPO = os.path.join(EXAMPLES, "ensemble_repository")
sys.path.insert(0, EXAMPLES)
import ocr_pipeline as op  # noqa: E402  (examples/ocr_pipeline.py)

N = 4  # images per test, sent at once
WAIT_US = 1_500_000  # the batchers of ocr and det wait this long for N requests
START_TIMEOUT = 150.0
CALL_TIMEOUT = 60.0
TEXTS = ["Hello gert 123", "Ascend NPU runtime", "quick brown fox 42", "GE graph compile"]


def text_images() -> list:
    """N BGR images of one size (so that det can batch them), one line of different text each."""
    from PIL import Image, ImageDraw
    from rapidocr_on_gert import font

    f = font()
    out = []
    for i, text in enumerate(TEXTS[:N]):
        im = Image.new("RGB", (320, 320), "white")  # det reads it at 736x736 (RapidOCR's limit_side_len)
        ImageDraw.Draw(im).text((12 + 6 * i, 60 + 40 * i), text, fill="black", font=f)
        out.append(np.ascontiguousarray(np.array(im)[:, :, ::-1]))
    return out


def with_batch_wait(config: str) -> str:
    """The config with its dynamic batcher waiting up to WAIT_US for a batch of N."""
    block = f"dynamic_batching {{\n  preferred_batch_size: [ {N} ]\n  max_queue_delay_microseconds: {WAIT_US}\n}}\n"
    new, count = re.subn(r"^dynamic_batching \{\n.*?^\}\n", block, config, flags=re.S | re.M)
    assert count == 1, config
    return new


def test_repository(root) -> str:
    """examples/ensemble_repository with ocr's and det's batchers waiting for N (every model dir a link to the
    example's, but those two configs)."""
    repo = root / "repo"
    repo.mkdir()
    for entry in sorted(os.listdir(EXAMPLE_REPO)):
        src = os.path.join(EXAMPLE_REPO, entry)
        if not os.path.isdir(src):
            continue
        if entry in ("ocr", "det"):
            (repo / entry).mkdir()
            with open(os.path.join(src, "config.pbtxt")) as f:
                (repo / entry / "config.pbtxt").write_text(with_batch_wait(f.read()))
            os.symlink(os.path.join(src, "1"), repo / entry / "1")
        else:
            os.symlink(src, repo / entry)
    return str(repo)


test_repository.__test__ = False  # a helper, not a test


class Served:
    """`gert serve REPO` in a subprocess, started from ``cwd``, on free loopback ports."""

    def __init__(self, repo: str, cwd: str, log: str):
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.log = log
        self._out = open(log, "wb")
        gert_cli = os.path.join(os.path.dirname(sys.executable), "gert")
        cmd = [
            gert_cli if os.path.exists(gert_cli) else sys.executable,
            *([] if os.path.exists(gert_cli) else ["-m", "gert"]),
            "serve",
            repo,
            "--http-port",
            str(self.http_port),
            "--grpc-port",
            str(self.grpc_port),
            "--metrics-port",
            str(self.metrics_port),
        ]
        self.process = subprocess.Popen(
            cmd, cwd=cwd, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gert serve exited with {self.process.returncode}\n{log_tail(self.log)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"not ready within {timeout:.0f} s\n{log_tail(self.log)}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # gert serve forwards it to tritonserver and waits
            try:
                self.process.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self._out.close()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            return r.read().decode()


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """The server, started (not yet ready: the in-process reference is computed while it loads)."""
    root = tmp_path_factory.mktemp("triton-ensemble")
    elsewhere = root / "cwd"
    elsewhere.mkdir()
    srv = Served(test_repository(root), str(elsewhere), str(root / "server.log"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def server(launched, expected):
    try:
        launched.wait_ready(START_TIMEOUT)
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    return launched


@pytest.fixture(scope="module")
def images():
    return text_images()


@pytest.fixture(scope="module")
def expected(launched, images):
    """The pipeline in-process on gert, and RapidOCR on ONNX Runtime, for every image."""
    from rapidocr_onnxruntime import RapidOCR

    import gert

    models = {n: gert.load(op.model_path(n), streams=1) for n in ("det", "cls", "rec")}
    try:
        infer = op.gert_infer(models)
        ocr = [asyncio.run(op.ocr(im, infer)) for im in images]
        boxes = []
        for im in images:
            pre = op.det_pre({"image": im})
            pred = models["det"].run({"x": pre["x"][np.newaxis]})[op.OUTPUTS["det"]]
            boxes.append(op.det_post({op.OUTPUTS["det"]: pred[0], "info": pre["info"]})["boxes"])
    finally:
        for m in models.values():
            m.close()
    engine = RapidOCR()
    rapid = [op.rapidocr_result(engine(im)) for im in images]
    rapid_boxes = [np.array(engine(im, use_cls=False, use_rec=False)[0], np.float32) for im in images]
    return {"ocr": ocr, "boxes": boxes, "rapid": rapid, "rapid_boxes": rapid_boxes}


def client(server, protocol: str):
    if protocol == "http":
        return httpclient, httpclient.InferenceServerClient(
            f"127.0.0.1:{server.http_port}", connection_timeout=CALL_TIMEOUT, network_timeout=CALL_TIMEOUT
        )
    return grpcclient, grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


def send_together(server, protocol: str, model: str, arrays: list, outputs: tuple) -> list:
    """Every array as its own request, all released at once (one client and thread each); per request the
    outputs {name: array} or the InferenceServerException it failed with."""
    barrier = threading.Barrier(len(arrays))

    def one(arr):
        mod, c = client(server, protocol)
        try:
            batch = arr[np.newaxis]
            inp = mod.InferInput("image", list(batch.shape), "UINT8")
            inp.set_data_from_numpy(batch)
            barrier.wait(CALL_TIMEOUT)
            kw = {"client_timeout": CALL_TIMEOUT} if protocol == "grpc" else {}
            r = c.infer(model, [inp], **kw)
            return {name: r.as_numpy(name) for name in outputs}
        except InferenceServerException as e:
            return e
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(len(arrays)) as pool:
        return list(pool.map(one, arrays))


def stats(server, model: str) -> tuple:
    """(inference_count, execution_count) of ``model`` (Triton's statistics)."""
    _, c = client(server, "http")
    try:
        s = c.get_inference_statistics(model)["model_stats"][0]
        return int(s["inference_count"]), int(s["execution_count"])
    finally:
        c.close()


def invalid_arg(e, protocol: str) -> bool:
    return isinstance(e, InferenceServerException) and e.status() == (
        "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
    )


# ---- the example is what `gert repo init --pre/--post` writes --------------------------------------------------------


def test_example_ensemble_is_what_repo_init_writes(tmp_path):
    from gert_triton.repo import init_repo

    init_repo(op.model_path("det"), str(tmp_path), name="det", pre="ocr_pipeline:det_pre", post="ocr_pipeline:det_post")
    for entry in ("det", "det_pre", "det_post", "det_ensemble"):
        with open(os.path.join(EXAMPLE_REPO, entry, "config.pbtxt")) as f:
            assert (tmp_path / entry / "config.pbtxt").read_text() == f.read(), entry
    assert (tmp_path / "det_pre" / "1" / "model.py").read_text().startswith("from gert_triton.steps import")
    assert os.path.isdir(tmp_path / "det_ensemble" / "1")


# ---- against the server ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ensemble_gives_the_in_process_and_rapidocr_boxes(server, images, expected, protocol):
    got = send_together(server, protocol, "det_ensemble", images, ("boxes",))
    for i, r in enumerate(got):
        assert not isinstance(r, Exception), f"image {i}: {r}\n{log_tail(server.log)}"
        np.testing.assert_array_equal(r["boxes"][0], expected["boxes"][i], err_msg=f"image {i}: gert in-process")
        np.testing.assert_array_equal(r["boxes"][0], expected["rapid_boxes"][i], err_msg=f"image {i}: RapidOCR")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bls_gives_the_in_process_and_rapidocr_text(server, images, expected, protocol):
    got = send_together(server, protocol, "ocr", images, ("boxes", "text", "scores"))
    for i, r in enumerate(got):
        assert not isinstance(r, Exception), f"image {i}: {r}\n{log_tail(server.log)}"
        texts = [t.decode("utf-8") for t in r["text"][0]]
        for what, want in (("gert in-process", expected["ocr"][i]), ("RapidOCR", expected["rapid"][i])):
            assert texts == want.texts, f"image {i}: {what}"
            np.testing.assert_array_equal(r["boxes"][0], want.boxes, err_msg=f"image {i}: {what}")
            np.testing.assert_allclose(r["scores"][0], want.scores, rtol=1e-5, err_msg=f"image {i}: {what}")
    assert [t for e in expected["rapid"] for t in e.texts], "RapidOCR read no text: the test images are wrong"


def batched_gear_hits(server) -> int:
    """det's gear hits of batch gears above 1 (gert_gear_hits_total; the gear label is "batch=B,<dim>=...")."""
    pattern = re.compile(r'^gert_gear_hits_total\{[^}]*gear="batch=(\d+)[^"]*"[^}]*model="det"[^}]*\} ([\d.]+)$', re.M)
    return sum(int(float(n)) for b, n in pattern.findall(server.metrics()) if int(b) > 1)


def test_bls_calls_from_concurrent_requests_run_as_one_det_batch(server, images):
    """N requests to the BLS model at once: their N det calls (async_exec) meet in det's batcher and run as one
    execute of batch N (Triton's statistics), which gert runs as batch gears above 1 (its gear hits: the default
    layout splits the batch over det's two streams)."""
    before, hits_before = stats(server, "det"), batched_gear_hits(server)
    got = send_together(server, "grpc", "ocr", images, ("text",))
    assert not any(isinstance(r, Exception) for r in got), got
    inferences, executions = (a - b for a, b in zip(stats(server, "det"), before))
    assert inferences == N
    assert executions == 1, f"det ran the {N} BLS calls in {executions} executions"
    deadline = time.monotonic() + 10  # the gert_* metrics are published every metrics_interval_ms (1000 by default)
    while batched_gear_hits(server) == hits_before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert batched_gear_hits(server) > hits_before, [ln for ln in server.metrics().splitlines() if "gear_hits" in ln]


@pytest.mark.parametrize("model, outputs", [("det_ensemble", ("boxes",)), ("ocr", ("text", "boxes"))])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_bad_image_fails_alone_with_invalid_arg(server, images, expected, model, outputs, protocol):
    bad = np.zeros((0, 320, 3), np.uint8)  # no rows: det_pre / ocr refuse it before any model runs
    arrays = [bad] + images[1:]
    got = send_together(server, protocol, model, arrays, outputs)
    assert invalid_arg(got[0], protocol), got[0]
    assert "input 'image'" in got[0].message() and "[0, 320, 3]" in got[0].message(), got[0].message()
    for i, r in enumerate(got[1:], start=1):
        assert not isinstance(r, Exception), f"image {i}: {r}"
        want = expected["boxes"][i] if model == "det_ensemble" else expected["ocr"][i].boxes
        np.testing.assert_array_equal(r["boxes"][0], want)


def test_client_script_reads_the_text(server, images):
    r = subprocess.run(
        [
            sys.executable,
            os.path.join(EXAMPLES, "ensemble_client.py"),
            "--count",
            "1",
            "--http",
            f"127.0.0.1:{server.http_port}",
            "--grpc",
            f"127.0.0.1:{server.grpc_port}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "'Hello gert 123'" in r.stdout, r.stdout
