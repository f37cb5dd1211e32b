"""PP-OCR det with its pre/post-processing served three ways on one real tritonserver: ensemble, BLS, hooks.

    python benchmarks/bench_ensemble.py [--duration 24] [--rounds 3] [--concurrency 4] [--light-concurrency 16]
                                        [--warmup 2] [--with-ocr] [--json out.json]

Two pipelines, each served three ways. ``det`` (heavy): RapidOCR's det preprocessing of a 320x320 uint8 image
(resized to 736x736, normalized), the PP-OCR det model on gert, RapidOCR's DBPostProcess to boxes. ``cls`` (light,
where the plumbing shows): a 48x240 text-line crop -> TextClassifier.resize_norm_img -> PP-OCR cls on gert ->
ClsPostProcess (label, score). The steps are examples/ocr_pipeline.py's.

- ``ensemble`` (a): examples/ensemble_repository's ``det_ensemble``: Python model det_pre -> gert_triton det ->
  Python model det_post, Triton passing the tensors between the three (three stub processes); for cls, the
  ensemble ``gert repo init cls.onnx --pre examples/ocr_pipeline.py:cls_pre --post ...:cls_post`` writes.
- ``bls`` (b): one Python model that preprocesses, calls det with ``async_exec`` (all requests of its batch at
  once) and postprocesses (two stub processes: it and det).
- ``hooks`` (c): one gert_triton model whose ``preprocess`` / ``postprocess`` overrides do the steps (one stub).
- (d) Triton's own ONNX Runtime backend: only if the server has it (the nvidia-pytriton wheel ships the Python
  backend alone: then the script says so).
- ``ocr_bls`` (with ``--with-ocr``), for scale: the example's full BLS pipeline (det -> crops -> cls -> rec).

Every model: one instance, max_batch_size 8, dynamic_batching 2 ms; det with gert_triton's default layout. Load:
``--concurrency`` (det) / ``--light-concurrency`` (cls) gRPC clients in this process sending one image each back to
back, ``--duration`` seconds per
variant in ``--rounds`` windows that rotate through the variants. Reported: requests/s, p50 / p99 latency, det's
average batch, and each variant's requests/s and p99 over its pipeline's ensemble's, per round and in all.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")
sys.path.insert(0, HERE)
from _common import closed_loop, machine  # noqa: E402

VARIANTS = ("ensemble", "bls", "hooks")
LIGHT = ("cls_ensemble", "cls_bls", "cls_hooks")
MODEL = {
    "ensemble": "det_ensemble",
    "bls": "det_bls",
    "hooks": "det_hooks",
    "ocr_bls": "ocr",
    "cls_ensemble": "cls_light_ensemble",
    "cls_bls": "cls_bls",
    "cls_hooks": "cls_hooks",
}
OUTPUT = {
    "ensemble": "boxes",
    "bls": "boxes",
    "hooks": "boxes",
    "ocr_bls": "boxes",
    "cls_ensemble": "label",
    "cls_bls": "label",
    "cls_hooks": "label",
}
INPUT = {
    "ensemble": "image",
    "bls": "image",
    "hooks": "x",
    "ocr_bls": "image",
    "cls_ensemble": "crop",
    "cls_bls": "crop",
    "cls_hooks": "x",
}
DET_OF = {"hooks": "det_hooks", "cls_ensemble": "cls_light", "cls_bls": "cls_light", "cls_hooks": "cls_hooks"}

PRELUDE = f"""import os
import sys

sys.path.insert(0, {EXAMPLES!r})
"""

BLS_MODEL_PY = (
    PRELUDE
    + '''import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils

import ocr_pipeline as op
from gert_triton.error_codes import error_response
from gert_triton.tensors import as_array


class TritonPythonModel:
    """BLS: det_pre in-process, det by async_exec (every request of the batch at once), det_post in-process."""

    def initialize(self, args):
        op.steps()

    async def execute(self, requests):
        prepared = []
        for r in requests:
            try:
                prepared.append(op.prepare(as_array(pb_utils.get_input_tensor_by_name(r, "image"))[0]))
            except Exception as e:  # noqa: BLE001
                prepared.append(error_response(pb_utils, e, checking=True))
        return list(await asyncio.gather(*(self.answer(p) for p in prepared)))

    async def answer(self, prepared):
        if not isinstance(prepared, tuple):
            return prepared
        x, info, _ = prepared
        response = await pb_utils.InferenceRequest(model_name="det", requested_output_names=[op.OUTPUTS["det"]],
                                                   inputs=[pb_utils.Tensor("x", x)]).async_exec()
        if response.has_error():
            return pb_utils.InferenceResponse(error=response.error())
        pred = pb_utils.get_output_tensor_by_name(response, op.OUTPUTS["det"]).as_numpy()
        boxes = op.origin_boxes(op.det_boxes(pred, info), info)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("boxes", boxes[np.newaxis])])
'''
)

BLS_CONFIG = """name: "det_bls"
backend: "python"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] } ]
output [ { name: "boxes" data_type: TYPE_FP32 dims: [ -1, 4, 2 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

HOOKS_MODEL_PY = (
    PRELUDE
    + '''from collections import defaultdict, deque

import numpy as np

import ocr_pipeline as op

Base = op.gert_model("det")


class TritonPythonModel(Base):
    """gert_triton det with RapidOCR's det pre/post-processing in preprocess / postprocess. postprocess gets no
    handle on its request, so what it needs from preprocess (the resize and letterbox, "info") waits in a queue per
    det input shape: execute() calls preprocess in request order and postprocess in that order within a shape."""

    def execute(self, requests):
        self.pending = defaultdict(deque)  # what a failed request left behind goes with the previous execute
        return super().execute(requests)

    def preprocess(self, inputs):
        x, info, _ = op.prepare(inputs["x"][0])  # the client's uint8 image under det's input name
        self.pending[x.shape[2:]].append(info)
        return {"x": x}

    def postprocess(self, outputs):
        pred = outputs[op.OUTPUTS["det"]]
        info = self.pending[pred.shape[2:]].popleft()
        return {"boxes": op.origin_boxes(op.det_boxes(pred, info), info)[np.newaxis]}
'''
)

HOOKS_CONFIG = """name: "det_hooks"
backend: "python"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] } ]
output [ { name: "boxes" data_type: TYPE_FP32 dims: [ -1, 4, 2 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


CLS_BLS_MODEL_PY = (
    PRELUDE
    + '''import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils

import ocr_pipeline as op
from gert_triton.error_codes import error_response
from gert_triton.tensors import as_array


class TritonPythonModel:
    """BLS: cls_pre in-process, cls_light by async_exec (every request of the batch at once), cls_post in-process."""

    def initialize(self, args):
        op.steps()

    async def execute(self, requests):
        xs = []
        for r in requests:
            try:
                xs.append(op.cls_pre({"crop": as_array(pb_utils.get_input_tensor_by_name(r, "crop"))[0]})["x"])
            except Exception as e:  # noqa: BLE001
                xs.append(error_response(pb_utils, e, checking=True))
        return list(await asyncio.gather(*(self.answer(x) for x in xs)))

    async def answer(self, x):
        if not isinstance(x, np.ndarray):
            return x
        response = await pb_utils.InferenceRequest(model_name="cls_light", requested_output_names=[op.OUTPUTS["cls"]],
                                                   inputs=[pb_utils.Tensor("x", x[np.newaxis])]).async_exec()
        if response.has_error():
            return pb_utils.InferenceResponse(error=response.error())
        probs = pb_utils.get_output_tensor_by_name(response, op.OUTPUTS["cls"]).as_numpy()[0]
        out = op.cls_post({op.OUTPUTS["cls"]: probs})
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v[np.newaxis]) for k, v in out.items()])
'''
)

LIGHT_IO = """max_batch_size: 8
input [ {{ name: "{inp}" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] }} ]
output [ {{ name: "label" data_type: TYPE_INT32 dims: [ 1 ] }}, {{ name: "score" data_type: TYPE_FP32 dims: [ 1 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 2000 }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
CLS_BLS_CONFIG = 'name: "cls_bls"\nbackend: "python"\n' + LIGHT_IO.format(inp="crop")
CLS_HOOKS_CONFIG = 'name: "cls_hooks"\nbackend: "python"\n' + LIGHT_IO.format(inp="x")

CLS_HOOKS_MODEL_PY = (
    PRELUDE
    + '''import numpy as np

import ocr_pipeline as op

Base = op.gert_model("cls")


class TritonPythonModel(Base):
    """gert_triton cls with TextClassifier's pre/post-processing in preprocess / postprocess."""

    def preprocess(self, inputs):
        return {"x": op.cls_pre({"crop": inputs["x"][0]})["x"][np.newaxis]}

    def postprocess(self, outputs):
        return {k: v[np.newaxis] for k, v in op.cls_post({op.OUTPUTS["cls"]: outputs[op.OUTPUTS["cls"]][0]}).items()}
'''
)


def build_repo(root: str) -> str:
    """The example's entries (linked), det_bls and det_hooks; for cls the ensemble `gert repo init --pre/--post`
    writes (cls_light, cls_light_pre, cls_light_post, cls_light_ensemble), cls_bls and cls_hooks."""
    from gert_triton.repo import init_repo

    sys.path.insert(0, EXAMPLES)
    import ocr_pipeline as op

    repo = os.path.join(root, "repo")
    os.makedirs(repo)
    src = os.path.join(EXAMPLES, "ensemble_repository")
    for entry in os.listdir(src):
        if os.path.isdir(os.path.join(src, entry)):
            os.symlink(os.path.join(src, entry), os.path.join(repo, entry))
    steps = os.path.join(EXAMPLES, "ocr_pipeline.py")
    init_repo(op.model_path("cls"), repo, name="cls_light", pre=f"{steps}:cls_pre", post=f"{steps}:cls_post")
    for name, model_py, config in (
        ("det_bls", BLS_MODEL_PY, BLS_CONFIG),
        ("det_hooks", HOOKS_MODEL_PY, HOOKS_CONFIG),
        ("cls_bls", CLS_BLS_MODEL_PY, CLS_BLS_CONFIG),
        ("cls_hooks", CLS_HOOKS_MODEL_PY, CLS_HOOKS_CONFIG),
    ):
        os.makedirs(os.path.join(repo, name, "1"))
        with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
            f.write(model_py)
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config)
    return repo


def onnxruntime_backend(server_root: str) -> bool:
    return os.path.isdir(os.path.join(server_root, "backends", "onnxruntime"))


def crop() -> np.ndarray:
    """A 48x240 text-line crop [1, 48, 240, 3], as det's boxes cut them."""
    from PIL import Image, ImageDraw

    sys.path.insert(0, EXAMPLES)
    from rapidocr_on_gert import font

    im = Image.new("RGB", (240, 48), "white")
    ImageDraw.Draw(im).text((8, 8), "Hello gert 123", fill="black", font=font())
    return np.ascontiguousarray(np.array(im)[:, :, ::-1])[np.newaxis]


def image() -> np.ndarray:
    from PIL import Image, ImageDraw

    sys.path.insert(0, EXAMPLES)
    from rapidocr_on_gert import font

    im = Image.new("RGB", (320, 320), "white")
    draw = ImageDraw.Draw(im)
    for i, text in enumerate(("Hello gert 123", "Ascend NPU", "ensemble or BLS")):
        draw.text((16, 60 + 60 * i), text, fill="black", font=font())
    return np.ascontiguousarray(np.array(im)[:, :, ::-1])[np.newaxis]


def load(url: str, variant: str, x: np.ndarray, clients: int, seconds: float) -> dict:
    import tritonclient.grpc as grpcclient

    def setup(t: int) -> tuple:
        client = grpcclient.InferenceServerClient(url)
        inp = grpcclient.InferInput(INPUT[variant], list(x.shape), "UINT8")
        inp.set_data_from_numpy(x)
        outs = [grpcclient.InferRequestedOutput(OUTPUT[variant])]
        return (lambda: client.infer(MODEL[variant], [inp], outputs=outs, client_timeout=120)), client.close

    return closed_loop(clients, setup, seconds, variant)


def det_counts(client, model: str) -> tuple:
    s = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(s.get("inference_count", 0)), int(s.get("execution_count", 0))


def measure(client, url: str, variants: tuple, x: np.ndarray, clients: int, args) -> list:
    """Every variant under ``clients`` clients in ``args.rounds`` rotating windows; one row per variant, with its
    ratios to the first variant (the ensemble), in all and per round."""
    windows: dict = {v: [] for v in variants}
    batches = {v: [0, 0] for v in variants}
    for v in variants:
        load(url, v, x, clients, args.warmup)
    for r in range(args.rounds):
        for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
            before = det_counts(client, DET_OF.get(v, "det"))
            windows[v].append(load(url, v, x, clients, args.duration / args.rounds))
            after = det_counts(client, DET_OF.get(v, "det"))
            batches[v] = [batches[v][0] + after[0] - before[0], batches[v][1] + after[1] - before[1]]
        print(
            f"round {r + 1}/{args.rounds}: "
            + ", ".join(f"{v} {windows[v][-1]['latencies'].size / windows[v][-1]['seconds']:.1f}" for v in variants)
            + " req/s",
            file=sys.stderr,
        )
    rows = []
    for v in variants:
        lat = np.concatenate([w["latencies"] for w in windows[v]])
        seconds = sum(w["seconds"] for w in windows[v])
        rows.append(
            {
                "variant": v,
                "clients": clients,
                "requests": int(lat.size),
                "seconds": seconds,
                "rps": lat.size / seconds,
                "round_rps": [w["latencies"].size / w["seconds"] for w in windows[v]],
                "p50_ms": float(np.percentile(lat, 50)),
                "p99_ms": float(np.percentile(lat, 99)),
                "model_avg_batch": batches[v][0] / max(1, batches[v][1]),
            }
        )
    base = rows[0]
    for r in rows:
        r["rps_vs_ensemble"], r["p99_vs_ensemble"] = r["rps"] / base["rps"], r["p99_ms"] / base["p99_ms"]
        r["round_rps_vs_ensemble"] = [a / b for a, b in zip(r["round_rps"], base["round_rps"])]
    return rows


def print_rows(title: str, rows: list) -> None:
    print(title)
    print(
        f"{'variant':<13} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'model batch':>11} {'req/s / (a)':>11} "
        f"{'p99 / (a)':>9} {'per-round req/s / (a)':>22}"
    )
    for r in rows:
        print(
            f"{r['variant']:<13} {r['rps']:>7.1f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
            f"{r['model_avg_batch']:>11.2f} {r['rps_vs_ensemble']:>10.2f}x {r['p99_vs_ensemble']:>8.2f}x "
            f"{' '.join(f'{p:.2f}' for p in r['round_rps_vs_ensemble']):>22}"
        )


def check_same(client, variants: tuple, x: np.ndarray, outputs: tuple) -> None:
    """Every variant answers ``x`` with the same ``outputs``."""
    import tritonclient.grpc as grpcclient

    reference = None
    for v in variants:
        inp = grpcclient.InferInput(INPUT[v], list(x.shape), "UINT8")
        inp.set_data_from_numpy(x)
        r = client.infer(MODEL[v], [inp], client_timeout=120)
        got = [r.as_numpy(o) for o in outputs]
        reference = got if reference is None else reference
        for o, a, b in zip(outputs, got, reference):
            np.testing.assert_array_equal(a, b, err_msg=f"{v}: {o}")


def shutdown_log(path: str, lines: int = 40) -> str:
    """The server log from its SIGTERM on (the last ``lines`` lines of it)."""
    with open(path, errors="replace") as f:
        text = f.read()
    start = text.rfind("Signal (15) received")
    return "\n".join(text[start if start >= 0 else 0 :].splitlines()[-lines:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=24.0, help="seconds of load per variant (default 24)")
    ap.add_argument("--rounds", type=int, default=3, help="windows per variant, interleaved (default 3)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up load per variant (default 2)")
    ap.add_argument("--concurrency", type=int, default=4, help="gRPC client threads for det (default 4)")
    ap.add_argument("--light-concurrency", type=int, default=16, help="gRPC client threads for cls (default 16)")
    ap.add_argument("--with-ocr", action="store_true", help="also load the full OCR BLS pipeline (ocr_bls)")
    ap.add_argument("--json", help="write the rows as JSON to this file")
    ap.add_argument(
        "--server-log",
        help="keep the server's log at this path (else it goes with the temp directory; "
        "its shutdown part is printed when the server exits with another code than 0)",
    )
    ap.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="one more tritonserver argument (repeatable), e.g. --server-arg=--log-verbose=1",
    )
    args = ap.parse_args()
    sys.path.insert(0, EXAMPLES)
    try:
        import ocr_pipeline as op

        op.model_path("det")
    except (ImportError, FileNotFoundError) as e:
        sys.exit(f"needs rapidocr-onnxruntime: {e}")
    import tritonclient.grpc as grpcclient

    import gert
    from gert_triton.server import TritonServer

    load_before = f"{os.getloadavg()[0]:.1f}"
    root = tempfile.mkdtemp(prefix="gert-bench-ensemble-")
    log = os.path.abspath(args.server_log) if args.server_log else os.path.join(root, "server.log")
    # Triton's default exit timeout: its Python backend unloads each of the 13 stubs in ~1.2-1.5 s (gert's or not), in
    # parallel; under this load on 2 cores that took 5-6 s, and a 5 s timeout made the server exit 1 (issue 43)
    server = TritonServer(build_repo(root), log_path=log, extra_args=["--exit-timeout-secs=30", *args.server_arg])
    server_root = os.path.dirname(os.path.dirname(os.path.realpath(server.binary)))
    heavy = VARIANTS + (("ocr_bls",) if args.with_ocr else ())
    try:
        server.start()
        server.wait_ready(300)
        client = grpcclient.InferenceServerClient(server.url("grpc"))
        check_same(client, VARIANTS, image(), ("boxes",))
        check_same(client, LIGHT, crop(), ("label", "score"))
        rows = measure(client, server.url("grpc"), heavy, image(), args.concurrency, args)
        light = measure(client, server.url("grpc"), LIGHT, crop(), args.light_concurrency, args)
        client.close()
    except Exception:
        print(f"server log tail ({log}):", file=sys.stderr)
        with open(log, errors="replace") as f:
            print("".join(f.readlines()[-30:]), file=sys.stderr)
        raise
    finally:
        code = server.stop(timeout=60)
        if code != 0:
            print(f"server exit code {code}; its shutdown ({log}):\n{shutdown_log(log)}", file=sys.stderr)
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"backend={gert.backend()} ({machine()}; load average before {load_before}, after "
        f"{os.getloadavg()[0]:.1f}); {args.duration:.0f} s per variant in {args.rounds} interleaved windows; "
        f"server exit code {code}"
    )
    print_rows(f"det pipeline: 320x320 image (det at 736x736), {args.concurrency} gRPC clients", rows)
    print_rows(f"cls pipeline: 48x240 crop (cls at 48x192), {args.light_concurrency} gRPC clients", light)
    ort = onnxruntime_backend(server_root)
    print(
        "(d) Triton's onnxruntime backend: "
        + (
            "present in this server but not run by this script"
            if ort
            else f"not in this server ({os.path.join(server_root, 'backends')} holds only "
            f"{sorted(os.listdir(os.path.join(server_root, 'backends')))}): the nvidia-pytriton wheel ships the Python "
            "backend alone"
        )
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"det": rows, "cls": light, "onnxruntime_backend": ort, "machine": machine()}, f, indent=2)


if __name__ == "__main__":
    main()
