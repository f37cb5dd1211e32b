"""gert_triton end to end against the REAL tritonserver (issue 5): the server bundled in the nvidia-pytriton wheel,
started by gert_triton.server.TritonServer on free loopback ports, and tritonclient over HTTP and gRPC.

One server for the module (explicit model control, so the tests can load and unload): the PP-OCR cls model, a
generated model with two inputs and a symbolic non-batch axis (``seq``: a f32[B, S, 4] + m i64[B, S] -> y f32[B, S],
c i64[B, S]), a copy of it for unload/load under traffic, and a model whose config has a bad parameter (not loaded at
start). Covered: readiness, metadata against the config and the ONNX file, results against gert direct and ONNX
Runtime over HTTP (binary and JSON) and gRPC, dynamic batching merging under concurrent load (server statistics),
bad requests (4xx with a clear message, and the server keeps serving), a bad parameter failing the load with a
message naming it, unload + load while traffic runs, the metrics endpoint, and `gert serve` itself (SIGTERM, exit
code). Every wait is bounded; the server is stopped (process group SIGTERM, then SIGKILL) also when tests fail.
"""

from __future__ import annotations

import http.client as httplib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest

import gert
from gert_triton.config import GertParams
from gert_triton.model import io_config, onnx_io
from gert_triton.repo import init_repo
from gert_triton.server import pytriton_root
from models import CLS, ort_run, ppocr_model, text_image
from triton_models import SEQ_OUTPUTS, seq_expected, seq_inputs, seq_model
from triton_server import (
    START_TIMEOUT,
    children,
    gone,
    kill_tree,
    log_tail,
    run_serve,
    start_serve,
    start_server,
    stop_server,
)

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException, np_to_triton_dtype  # noqa: E402

pytestmark = [
    pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')"),
    pytest.mark.usefixtures("device"),  # gert direct runs in this process too
]

CLS_OUT = "save_infer_model/scale_0.tmp_1"
MAX_BATCH = 8
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
CALL_TIMEOUT = 30.0  # any single client call
LOAD_TIMEOUT = 300.0  # a model load through the repository API (a stub process, gert.load, warmup) on a busy machine
BATCH_DELAY_US = 500_000  # cls_batched's max_queue_delay_microseconds: a batch waits this long for its rows
RTOL, ATOL = 1e-4, 1e-5  # against ONNX Runtime on the model as shipped (every dim symbolic), as in test_model.py
NOT_SERVING = re.compile(
    r"unknown model|no available versions|not ready|unavailable|UNAVAILABLE|is not found", re.IGNORECASE
)


# ---- the server ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cls_path():
    return ppocr_model(CLS)


@pytest.fixture(scope="module")
def repo(tmp_path_factory, cls_path):
    root = tmp_path_factory.mktemp("triton")
    seq_file = root / "seq.onnx"
    seq_file.write_bytes(seq_model())
    repo = root / "repo"
    init_repo(cls_path, str(repo), name="cls")
    # cls with a generous batching delay: the dynamic batcher waits up to BATCH_DELAY_US for a full batch, so requests
    # that arrive together are merged whatever the machine's load (cls's own 2 ms would leave it to timing)
    init_repo(cls_path, str(repo), name="cls_batched")
    cfg = repo / "cls_batched" / "config.pbtxt"
    text = cfg.read_text()
    assert "max_queue_delay_microseconds: 2000" in text
    cfg.write_text(
        text.replace("max_queue_delay_microseconds: 2000", f"max_queue_delay_microseconds: {BATCH_DELAY_US}")
    )
    init_repo(str(seq_file), str(repo), name="seq")
    init_repo(str(seq_file), str(repo), name="reload")
    init_repo(str(seq_file), str(repo), name="bad", parameters={"streams": "zero"})
    shutil.copytree(
        os.path.join(EXAMPLES, "model_repository", "tiny_classifier"),
        repo / "tiny_classifier",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    init_repo(str(seq_file), str(repo), name="seq2", parameters={"streams": "1", "cube_cores": "1"}, instances=2)
    init_repo(
        str(seq_file),
        str(repo),
        name="tiered",
        parameters={
            "streams": "2",
            "split_batch": "false",
            "hot_after": "2",
            "hot_window": "16",
            "compile_share": "0.9",
            "metrics_interval_ms": "0",
        },
    )
    init_repo(
        cls_path,
        str(repo),
        name="cached",
        parameters={"streams": "1", "cube_cores": "1", "cache_dir": "gcache", "gears": "batch:1,2,4,8;x:2:48;x:3:192"},
        instances=2,
    )
    # one batch gear (4): a request of 1-3 rows is padded to it (the padding metrics' test)
    init_repo(
        cls_path,
        str(repo),
        name="padded",
        max_batch_size=4,
        parameters={"streams": "1", "cube_cores": "1", "gears": "batch:4;x:2:48;x:3:192"},
    )
    return str(repo)


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    log = str(tmp_path_factory.mktemp("triton-log") / "server.log")
    srv = start_server(
        repo,
        log,
        [
            "--model-control-mode=explicit",
            "--load-model=cls",
            "--load-model=seq",
            "--load-model=reload",
            "--exit-timeout-secs=5",
        ],
    )
    try:
        yield srv
    finally:
        stop_server(srv)


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(
        server.url("http"), connection_timeout=CALL_TIMEOUT, network_timeout=CALL_TIMEOUT
    )
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc(server):
    c = grpcclient.InferenceServerClient(server.url("grpc"))
    yield c
    c.close()


@pytest.fixture(scope="module")
def cls_gert(cls_path, device):
    """gert direct, as the server loads it (defaults: one stream, batch gears up to max_batch_size)."""
    m = gert.load(cls_path, max_batch=MAX_BATCH)
    yield m
    m.close()


# ---- client helpers -----------------------------------------------------------------------------------------------


def infer(client, model: str, inputs: dict, outputs=None, binary: bool = True, **kw):
    mod = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    ins = []
    for name, arr in inputs.items():
        i = mod.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
        if mod is httpclient:
            i.set_data_from_numpy(arr, binary_data=binary)
        else:
            i.set_data_from_numpy(arr)
        ins.append(i)
    outs = None
    if outputs is not None:
        outs = [
            httpclient.InferRequestedOutput(o, binary_data=binary)
            if mod is httpclient
            else grpcclient.InferRequestedOutput(o)
            for o in outputs
        ]
    if mod is grpcclient:
        kw.setdefault("client_timeout", CALL_TIMEOUT)
    return client.infer(model, ins, outputs=outs, **kw)


def client_for(server, protocol: str):
    if protocol.startswith("http"):
        return httpclient.InferenceServerClient(
            server.url("http"), connection_timeout=CALL_TIMEOUT, network_timeout=CALL_TIMEOUT
        )
    return grpcclient.InferenceServerClient(server.url("grpc"))


def check_cls_good(client) -> None:
    x = text_image(1, 48, 192, seed=7)
    out = infer(client, "cls", {"x": x}).as_numpy(CLS_OUT)
    assert out.shape == (1, 2) and np.isclose(out.sum(), 1, atol=1e-5)


def check_seq_good(client, model: str = "seq", uid: int = 3) -> None:
    r = seq_inputs(2, 5, uid)
    res = infer(client, model, r)
    exp = seq_expected(r)
    for k in SEQ_OUTPUTS:
        np.testing.assert_array_equal(res.as_numpy(k), exp[k])


def stats(client, model: str) -> dict:
    s = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return {
        "inference_count": int(s.get("inference_count", 0)),
        "execution_count": int(s.get("execution_count", 0)),
        "batches": {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in s.get("batch_stats", [])},
    }


def join_all(threads, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"threads still running after {timeout} s (a request hung): {alive}"


def wait_for(condition, timeout: float, what: str, poll: float = 0.05):
    """condition()'s value once it is truthy; fails the test naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(poll)


def load_model(server, name: str, **kw) -> None:
    """Load (or reload) ``name`` through the repository API, allowing for a model load on a busy machine (the
    clients' own timeouts are sized for one inference)."""
    c = grpcclient.InferenceServerClient(server.url("grpc"))
    try:
        c.load_model(name, client_timeout=LOAD_TIMEOUT, **kw)
    finally:
        c.close()


def unload_model(server, name: str) -> None:
    """Unload ``name`` and wait until it is gone from the server (the unload call may return before that)."""
    c = grpcclient.InferenceServerClient(server.url("grpc"))
    try:
        c.unload_model(name, client_timeout=LOAD_TIMEOUT)
        wait_for(
            lambda: (
                {m["name"]: m.get("state") for m in c.get_model_repository_index(as_json=True)["models"]}.get(name)
                not in ("READY", "UNLOADING", "LOADING")
            ),
            LOAD_TIMEOUT,
            f"{name} unloaded",
        )
    finally:
        c.close()


# ---- readiness and metadata ---------------------------------------------------------------------------------------


def test_server_and_models_ready(server, http, grpc):
    assert http.is_server_live() and grpc.is_server_live()
    for model in ("cls", "seq", "reload"):
        assert http.is_model_ready(model) and grpc.is_model_ready(model), model
    assert not http.is_model_ready("bad")
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert index["cls"]["state"] == index["seq"]["state"] == "READY" and index["bad"].get("state") != "READY"
    # Triton's strict readiness: the server is ready while no model it was asked to load failed to load
    # (test_bad_parameter_fails_the_load_naming_it makes one fail, whichever order the tests run in)
    failed = sorted(
        name
        for name, m in index.items()
        if m.get("state") == "UNAVAILABLE" and m.get("reason", "") not in ("", "unloaded")
    )
    assert http.is_server_ready() == grpc.is_server_ready() == (not failed), (failed, index)
    assert server.process.poll() is None


@pytest.mark.parametrize("model", ["cls", "seq"])
def test_metadata_matches_config_and_onnx(http, grpc, repo, model):
    _, onnx_inputs, onnx_outputs = io_config(onnx_io(os.path.join(repo, model, "1", "model.onnx")))
    cfg = http.get_model_config(model)
    assert grpc.get_model_config(model, as_json=True)["config"]["name"] == model
    assert cfg["backend"] == "python" and cfg["max_batch_size"] == MAX_BATCH
    assert "dynamic_batching" in cfg
    for kind, onnx in (("input", onnx_inputs), ("output", onnx_outputs)):
        assert [(e["name"], e["data_type"], [int(d) for d in e["dims"]]) for e in cfg[kind]] == [
            (e["name"], e["data_type"], e["dims"]) for e in onnx
        ], kind
    for meta in (http.get_model_metadata(model), grpc.get_model_metadata(model, as_json=True)):
        assert meta["name"] == model and meta["platform"] == "python" and meta["versions"] == ["1"]
        for kind, entries in (("inputs", cfg["input"]), ("outputs", cfg["output"])):
            assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in meta[kind]] == [
                (e["name"], e["data_type"][len("TYPE_") :], [-1] + [int(d) for d in e["dims"]]) for e in entries
            ]


# ---- results ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "http-json", "grpc"])
@pytest.mark.parametrize("batch,h,w", [(1, 48, 192), (3, 48, 192), (2, 48, 320)])
def test_cls_results_equal_gert_direct_and_ort(server, cls_path, cls_gert, protocol, batch, h, w):
    x = text_image(batch, h, w, seed=batch * 1000 + w)
    client = client_for(server, protocol)
    try:
        got = infer(client, "cls", {"x": x}, outputs=[CLS_OUT], binary=protocol != "http-json").as_numpy(CLS_OUT)
    finally:
        client.close()
    direct = cls_gert.run({"x": x})[CLS_OUT]
    assert got.dtype == np.float32 and got.shape == (batch, 2)
    np.testing.assert_array_equal(got, direct)  # the same gert graph at the same gear: bitwise
    np.testing.assert_allclose(got, ort_run(cls_path, [x])[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("protocol", ["http", "http-json", "grpc"])
def test_seq_results_equal_expected_and_ort(server, protocol):
    client = client_for(server, protocol)
    binary = protocol != "http-json"
    try:
        for batch, s, uid in ((2, 5, 1), (1, 9, 2), (8, 3, 3)):
            r = seq_inputs(batch, s, uid)
            res = infer(client, "seq", r, outputs=list(SEQ_OUTPUTS), binary=binary)
            ref = ort_run(seq_model(), [r["a"], r["m"]])
            for k, exp, o in zip(SEQ_OUTPUTS, (seq_expected(r)[k] for k in SEQ_OUTPUTS), ref):
                got = res.as_numpy(k)
                assert got.dtype == exp.dtype and got.shape == exp.shape, (k, got.dtype, got.shape)
                np.testing.assert_array_equal(got, exp)
                np.testing.assert_array_equal(got, o)
        # only the requested output comes back
        r = seq_inputs(1, 4, 9)
        res = infer(client, "seq", r, outputs=["c"], binary=binary)
        assert res.as_numpy("y") is None
        np.testing.assert_array_equal(res.as_numpy("c"), r["m"] * 2)
    finally:
        client.close()


# ---- load ---------------------------------------------------------------------------------------------------------


def test_dynamic_batching_merges_under_concurrent_load(server, cls_gert):
    """16 clients send at once to cls_batched (cls with max_queue_delay_microseconds BATCH_DELAY_US): the dynamic
    batcher holds each batch until max_batch_size rows or that delay, so concurrent requests are merged (the server's
    batch statistics show it) and every client gets its own result."""
    threads_n, per_thread = 16, 20
    xs = [text_image(1, 48, 192, seed=100 + t) for t in range(threads_n)]
    expected = [cls_gert.run({"x": x})[CLS_OUT] for x in xs]
    firsts = np.array([e[0, 0] for e in expected])
    gaps = np.abs(firsts[:, None] - firsts[None, :]) + np.eye(threads_n)
    assert gaps.min() > 1e-3, "the inputs must give distinguishable results (to catch cross-talk)"
    load_model(server, "cls_batched")
    grpc = grpcclient.InferenceServerClient(server.url("grpc"))
    try:
        before = stats(grpc, "cls_batched")
        errors: list = []
        barrier = threading.Barrier(threads_n)

        def worker(t: int) -> None:
            c = grpcclient.InferenceServerClient(server.url("grpc"))
            try:
                barrier.wait(CALL_TIMEOUT)
                for i in range(per_thread):
                    out = infer(c, "cls_batched", {"x": xs[t]}).as_numpy(CLS_OUT)
                    np.testing.assert_allclose(
                        out, expected[t], rtol=0, atol=ATOL, err_msg=f"thread {t} request {i}: not its own result"
                    )
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append((t, e))
            finally:
                c.close()

        threads = [
            threading.Thread(target=worker, args=(t,), name=f"client-{t}", daemon=True) for t in range(threads_n)
        ]
        for th in threads:
            th.start()
        join_all(threads, 180)
        assert not errors, f"{len(errors)} client(s) failed; first: {errors[0]}"
        # the server counts a request when it releases it, which may come just after the client has its response
        after = wait_for(
            lambda: (
                lambda a: a if a["inference_count"] - before["inference_count"] >= threads_n * per_thread else None
            )(stats(grpc, "cls_batched")),
            30,
            "the server's statistics count every request",
        )
        inferences = after["inference_count"] - before["inference_count"]
        executions = after["execution_count"] - before["execution_count"]
        merged = {
            b: n - before["batches"].get(b, 0)
            for b, n in after["batches"].items()
            if b > 1 and n > before["batches"].get(b, 0)
        }
        assert inferences == threads_n * per_thread
        assert executions < inferences, f"{inferences} requests ran in {executions} executions: nothing was merged"
        assert merged, f"no batch above 1 in the server's batch statistics: {after['batches']}"
        assert max(merged) <= MAX_BATCH
    finally:
        grpc.close()
        unload_model(server, "cls_batched")


def test_concurrent_mixed_shapes_each_get_their_own_result(server):
    """seq under load with two sequence lengths: requests are grouped by shape and split back exactly."""
    errors: list = []

    def worker(t: int) -> None:
        c = grpcclient.InferenceServerClient(server.url("grpc"))
        try:
            for i in range(10):
                r = seq_inputs(1 + (i + t) % 2, 3 if (i + t) % 3 else 6, uid=t * 100 + i)
                res = infer(c, "seq", r)
                exp = seq_expected(r)
                for k in SEQ_OUTPUTS:
                    np.testing.assert_array_equal(res.as_numpy(k), exp[k], err_msg=f"thread {t} request {i} {k}")
        except BaseException as e:  # noqa: BLE001
            errors.append((t, e))
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(t,), name=f"seq-{t}", daemon=True) for t in range(8)]
    for th in threads:
        th.start()
    join_all(threads, 60)
    assert not errors, f"{len(errors)} client(s) failed; first: {errors[0]}"


# ---- bad requests -------------------------------------------------------------------------------------------------

BAD_REQUESTS = {
    # name: (model, inputs, requested outputs, words the error message must contain)
    "wrong dtype": ("cls", lambda: {"x": text_image(1, 48, 192, 1).astype(np.float64)}, None, ["'x'", "FP64", "FP32"]),
    "wrong shape": ("cls", lambda: {"x": np.zeros((1, 4, 48, 192), np.float32)}, None, ["'x'", "shape"]),
    "wrong rank": (
        "seq",
        lambda: {"a": np.zeros((1, 3), np.float32), "m": np.zeros((1, 3), np.int64)},
        None,
        ["'a'", "shape"],
    ),
    "missing input": ("seq", lambda: {"a": np.zeros((1, 3, 4), np.float32)}, None, ["'m'"]),
    "batch above max_batch_size": (
        "cls",
        lambda: {"x": np.zeros((MAX_BATCH + 1, 3, 48, 192), np.float32)},
        None,
        ["batch", str(MAX_BATCH)],
    ),
    "S differs between inputs": (
        "seq",
        lambda: {"a": np.zeros((1, 5, 4), np.float32), "m": np.zeros((1, 6), np.int64)},
        None,
        ["'S'", "5", "6"],
    ),
    "unknown output": ("seq", lambda: seq_inputs(1, 3, 1), ["zz"], ["zz"]),
    "unknown input": ("seq", lambda: dict(seq_inputs(1, 3, 1), zz=np.zeros((1, 1), np.float32)), None, ["zz"]),
}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_request_gets_4xx_and_server_keeps_serving(server, protocol, case):
    model, make, outputs, words = BAD_REQUESTS[case]
    client = client_for(server, protocol)
    try:
        with pytest.raises(InferenceServerException) as info:
            infer(client, model, make(), outputs=outputs)
        err = info.value
        status = str(err.status())
        if protocol == "http":
            assert status.isdigit() and 400 <= int(status) < 500, f"HTTP status {status}: {err.message()}"
        else:
            assert status == "StatusCode.INVALID_ARGUMENT", f"gRPC status {status}: {err.message()}"
        for w in words:
            assert w in err.message(), f"{w!r} not in the message: {err.message()}"
        check_cls_good(client)  # the server keeps serving, both models
        check_seq_good(client)
    finally:
        client.close()


def raw_http(server, path: str, body: bytes, headers: dict) -> tuple:
    conn = httplib.HTTPConnection("127.0.0.1", server.http_port, timeout=CALL_TIMEOUT)
    try:
        conn.request("POST", path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, r.read().decode(errors="replace")
    finally:
        conn.close()


TRITON_ANSWERS_500 = {"json data too short", "malformed json"}


@pytest.mark.parametrize(
    "case", ["binary too short", "header length beyond body", "json data too short", "malformed json"]
)
def test_truncated_or_malformed_http_body_gets_4xx(server, http, case):
    x = text_image(1, 48, 192, seed=5)
    nbytes = x.nbytes
    header = {
        "inputs": [
            {"name": "x", "shape": list(x.shape), "datatype": "FP32", "parameters": {"binary_data_size": nbytes}}
        ]
    }
    if case == "binary too short":
        head = json.dumps(header).encode()
        body = head + x.tobytes()[: nbytes // 2]
        hdrs = {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"}
        words = ["'x'", "bytes"]
    elif case == "header length beyond body":
        head = json.dumps(header).encode()
        body = head + x.tobytes()
        hdrs = {"Inference-Header-Content-Length": str(len(body) + 100), "Content-Type": "application/octet-stream"}
        words = []
    elif case == "json data too short":
        body = json.dumps(
            {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel()[:100].tolist()}]}
        ).encode()
        hdrs = {"Content-Type": "application/json"}
        words = ["shape"]
    else:
        body = b'{"inputs": [{"name": "x", "shape": [1, 3'
        hdrs = {"Content-Type": "application/json"}
        words = []
    status, text = raw_http(server, "/v2/models/cls/infer", body, hdrs)
    if case in TRITON_ANSWERS_500:
        # Triton's HTTP frontend (not gert: the request never reaches the model) answers JSON parse errors with 500
        assert status in (400, 500), f"{case}: HTTP {status}: {text[:300]}"
    else:
        assert 400 <= status < 500, f"{case}: HTTP {status}: {text[:300]}"
    msg = json.loads(text).get("error", "")
    assert msg, f"{case}: no error message: {text[:300]}"
    for w in words:
        assert w in msg, f"{case}: {w!r} not in {msg!r}"
    check_cls_good(http)
    assert server.process.poll() is None


# ---- bad parameters, unload and load ------------------------------------------------------------------------------


@pytest.fixture
def own_server(repo, tmp_path):
    """A server of the test's own (seq loaded), for what has made tritonserver 2.51 abort on heap corruption
    ("malloc(): unaligned fastbin chunk detected", "corrupted double-linked list", Signal 6, then hung): a series of
    failed loads of one model with config overrides, and loading a model with two instances. On its own server such
    an abort fails only that test, never the module's shared server (and watch_for_abort ends the hang)."""
    srv = start_server(
        repo,
        str(tmp_path / "server.log"),
        ["--model-control-mode=explicit", "--load-model=seq", "--exit-timeout-secs=5"],
    )
    try:
        yield srv
    finally:
        srv.stop(timeout=20)


def test_bad_parameter_fails_the_load_naming_it(own_server):
    server = own_server
    http = httpclient.InferenceServerClient(
        server.url("http"), connection_timeout=CALL_TIMEOUT, network_timeout=LOAD_TIMEOUT
    )
    grpc = grpcclient.InferenceServerClient(server.url("grpc"))
    try:
        _bad_parameter_loads(server, http, grpc)
    finally:
        http.close()
        grpc.close()


def _bad_parameter_loads(server, http, grpc) -> None:
    # the repository's config.pbtxt: parameters { key: "streams" value: { string_value: "zero" } }
    for client in (http, grpc):
        with pytest.raises(InferenceServerException) as info:
            client.load_model("bad", **({"client_timeout": LOAD_TIMEOUT} if client is grpc else {}))
        assert "'streams'" in info.value.message() and "zero" in info.value.message(), info.value.message()
        assert not client.is_model_ready("bad")
    with open(server.log_path, errors="replace") as f:
        assert "parameter 'streams'" in f.read()
    # configs given with the load request (explicit model control): an unknown key, onnx_file leaving the model dir,
    # a batch gear above max_batch_size
    for params, words in [
        ({"colour": "red"}, ["unknown parameter 'colour'"]),
        ({"onnx_file": "../cls/1/model.onnx"}, ["'onnx_file'", "leaves"]),
        ({"gears": "batch:1,16"}, ["'gears'", "max_batch_size"]),
    ]:
        cfg = {
            "backend": "python",
            "max_batch_size": MAX_BATCH,
            "parameters": {k: {"string_value": v} for k, v in params.items()},
        }
        with pytest.raises(InferenceServerException) as info:
            grpc.load_model("bad", config=json.dumps(cfg), client_timeout=LOAD_TIMEOUT)
        for w in words:
            assert w in info.value.message(), info.value.message()
    assert not http.is_model_ready("bad")
    check_seq_good(http)
    check_seq_good(grpc)


def test_unload_and_load_while_traffic_runs(server, grpc):
    """4 clients send to `reload` without pause while it is unloaded and loaded again: before the unload they are
    served, while it is away they are refused cleanly (never a wrong result, never a hang), and every request sent
    after the load returned is served. Each phase waits for what it needs to see (a deadline, no fixed sleeps)."""
    stop = threading.Event()
    log: list = []  # (monotonic time the request was sent, thread, "ok" | error message)
    lock = threading.Lock()

    def worker(t: int, protocol: str) -> None:
        c = client_for(server, protocol)
        i = 0
        try:
            while not stop.is_set():
                r = seq_inputs(1, 4, uid=t * 1000 + i)
                i += 1
                sent = time.monotonic()
                try:
                    res = infer(c, "reload", r, client_timeout=10) if protocol == "grpc" else infer(c, "reload", r)
                    exp = seq_expected(r)
                    ok = all(np.array_equal(res.as_numpy(k), exp[k]) for k in SEQ_OUTPUTS)
                    entry = "ok" if ok else "WRONG RESULT"
                except InferenceServerException as e:
                    entry = e.message() or str(e)
                with lock:
                    log.append((sent, t, entry))
                if entry != "ok":
                    time.sleep(0.01)  # back off while the model is away
        finally:
            c.close()

    def oks_since(t0: float) -> set:
        with lock:
            return {t for sent, t, e in log if sent > t0 and e == "ok"}

    load_model(server, "reload")  # loaded at start; loaded again here in case an earlier test left it otherwise
    threads = [
        threading.Thread(target=worker, args=(t, p), name=f"traffic-{t}", daemon=True)
        for t, p in enumerate(["grpc", "grpc", "grpc", "http"])
    ]
    for th in threads:
        th.start()
    try:
        wait_for(lambda: len(oks_since(0)) == len(threads), 60, "every client served before the unload")
        t_unload = time.monotonic()
        grpc.unload_model("reload", client_timeout=LOAD_TIMEOUT)
        wait_for(lambda: not grpc.is_model_ready("reload"), 60, "the model is not ready after unload")
        t_away = time.monotonic()
        wait_for(
            lambda: [e for sent, _, e in list(log) if sent > t_away and e != "ok"],
            60,
            "a request refused while the model is unloaded",
        )
        grpc.load_model("reload", client_timeout=LOAD_TIMEOUT)
        t_loaded = time.monotonic()
        assert grpc.is_model_ready("reload")
        wait_for(lambda: len(oks_since(t_loaded)) == len(threads), 60, "every client served after the load")
    finally:
        stop.set()
        join_all(threads, 60)
    assert server.process.poll() is None, "the server died"
    before = [e for sent, _, e in log if sent < t_unload]
    after = [e for sent, _, e in log if sent > t_loaded]
    assert before.count("ok") > 0 and after.count("ok") > 0, "traffic did not run before unload or recover after load"
    assert "WRONG RESULT" not in {e for _, _, e in log}
    failures = {e for _, _, e in log if e != "ok"}
    print(
        f"unload/load under traffic: {sum(e == 'ok' for _, _, e in log)} ok, "
        f"{sum(e != 'ok' for _, _, e in log)} refused while unloaded: {failures}"
    )
    assert all(NOT_SERVING.search(e) for e in failures), f"unclean failures: {failures}"
    assert all(e == "ok" for e in after), f"failures of requests sent after the load returned: {set(after) - {'ok'}}"
    check_seq_good(grpc, "reload")


# ---- several instances --------------------------------------------------------------------------------------------


def stub_processes(server, model: str) -> list:
    """The Python-backend stub processes the server runs for ``model``."""
    found = []
    for pid in children(server.process.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(f"/{model}/1/model.py".encode()) for a in args):
            found.append(pid)
    return found


def test_the_stubs_serving_gert_models_never_load_onnx(server, grpc):
    """Issue 41: a stub keeps only what serving needs. gert_triton analyses the model at load in a child process
    (parameter load_analysis, default "process") and its compiles infer shapes without onnx, so no stub maps
    onnx's extension module (~15 MB of resident memory per stub) while it serves, compiles included."""
    check_cls_good(grpc)
    check_seq_good(grpc)
    for model in ("cls", "seq"):
        pids = stub_processes(server, model)
        assert pids, model
        for pid in pids:
            with open(f"/proc/{pid}/maps") as f:
                maps = f.read()
            assert "onnxruntime_pybind11_state" in maps, (model, pid)  # the stub is the one serving the model
            assert "onnx_cpp2py_export" not in maps, (model, pid)


def test_two_instances_each_run_their_own_gert_model(own_server):
    """instance_group count 2 (`gert repo init --instances 2`): two stub processes, each with its own gert.Model on
    the (host) NPU; concurrent clients get their own results from both. On a server of its own (own_server): the
    server has aborted on heap corruption right after loading this model (two stubs registering gert's metrics)."""
    server = own_server
    load_model(server, "seq2")
    try:
        assert len(stub_processes(server, "seq2")) == 2
        errors: list = []

        def worker(t: int) -> None:
            c = grpcclient.InferenceServerClient(server.url("grpc"))
            try:
                for i in range(10):
                    check_seq_good(c, "seq2", uid=100 * t + i)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append((t, e))
            finally:
                c.close()

        threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(8)]
        for th in threads:
            th.start()
        join_all(threads, 90)
        assert not errors, f"{len(errors)} client(s) failed; first: {errors[0]}"
    finally:
        unload_model(server, "seq2")


def test_two_instances_share_one_compile_cache(own_server, repo, cls_path):
    """cache_dir (relative to the model dir) with two instances warming up at once: each graph is compiled once over
    both stub processes (GE's {key}.lock) and the cache stays consistent; a reload takes every graph from it. On a
    server of its own, as the other two-instance test."""
    server = own_server
    http = httpclient.InferenceServerClient(
        server.url("http"), connection_timeout=CALL_TIMEOUT, network_timeout=CALL_TIMEOUT
    )
    cache = os.path.join(repo, "cached", "gcache")
    x = text_image(3, 48, 192, seed=11)

    def entries() -> dict:
        out = {}
        for name in (f for f in os.listdir(cache) if f.endswith(".idx")):
            with open(os.path.join(cache, name)) as f:
                out[name] = [e["cache_file_name"] for e in json.load(f)["cache_file_list"]]
        return out

    shutil.rmtree(cache, ignore_errors=True)  # an empty cache, whatever ran before (this test again, with --count)
    with open(server.log_path, "rb") as f:
        log_start = f.seek(0, os.SEEK_END)  # only what this test's loads log counts
    load_model(server, "cached")
    try:
        first = infer(http, "cached", {"x": x}).as_numpy(CLS_OUT)
        oms = sorted(f for f in os.listdir(cache) if f.endswith(".om"))
        assert len(oms) == 4, oms  # batch gears 1, 2, 4, 8: one .om each, though two instances compiled them
        assert sorted(om for files in entries().values() for om in files) == oms
        unload_model(server, "cached")
        load_model(server, "cached")
        np.testing.assert_array_equal(infer(http, "cached", {"x": x}).as_numpy(CLS_OUT), first)
        assert sorted(f for f in os.listdir(cache) if f.endswith(".om")) == oms  # nothing compiled again
        with open(server.log_path, "rb") as f:
            f.seek(log_start)
            hits = [int(n) for n in re.findall(r"\(([0-9]+) from the compile cache", f.read().decode(errors="replace"))]
        assert len(hits) == 4 and sum(hits[:2]) == 4 and hits[2:] == [4, 4], hits
    finally:
        http.close()
        unload_model(server, "cached")


def model_metric(server, name: str, model: str, by: str = "") -> dict:
    """The series of metric ``name`` for ``model``, summed per value of label ``by`` ("" sums them all)."""
    out: dict = {}
    for lab, v in metrics(server).get(name, []):
        if lab["model"] == model:
            out[lab.get(by, "")] = out.get(lab.get(by, ""), 0) + v
    return out


def test_auto_tier_parameters_move_a_hot_size_to_a_static_graph(server, grpc):
    """seq's S axis is auto; with hot_after 2 (hot_window 16, compile_share 0.9 in config.pbtxt) a size sent twice is
    compiled in the background on both streams and later requests of it run on a static graph, with the same
    results; the metrics count it and no request waited for a compile.

    Made to happen, not timed: the model is loaded fresh (a new stub: its tiers start empty), exactly two requests
    make the size hot, the test waits (deadline) until the metrics show both streams' compiles, and only the
    requests sent after that must run on the static graph."""
    load_model(server, "tiered")
    try:
        assert model_metric(server, "gert_background_compiles_total", "tiered") in ({}, {"": 0}), (
            "a freshly loaded model starts with no background compile"
        )
        for i in range(2):
            check_seq_good(grpc, "tiered", uid=40 + i)  # B 2, S 5 (check_seq_good's sizes): hot at the second

        def compiled() -> float:
            check_seq_good(grpc, "tiered", uid=50)  # metrics_interval_ms 0: published after each batch
            return model_metric(server, "gert_background_compiles_total", "tiered").get("", 0) >= 2

        wait_for(compiled, 120, "the hot size compiled in the background on both streams")
        bg = model_metric(server, "gert_background_compiles_total", "tiered").get("", 0)
        assert bg == 2, f"background compiles: {bg} (one per stream expected)"
        before = model_metric(server, "gert_graph_requests_total", "tiered", by="graph")
        for i in range(4):
            check_seq_good(grpc, "tiered", uid=60 + i)
        graph = wait_for(
            lambda: (lambda g: g if g.get("static", 0) - before.get("static", 0) >= 4 else None)(
                model_metric(server, "gert_graph_requests_total", "tiered", by="graph")
            ),
            30,
            "the 4 requests after the compiles counted as static",
        )
        # the last poll's request above may be published after ``before`` was read (the publisher is a thread), so
        # the 4 requests are checked by what cannot come from it: none of them ran on the dynamic-shape graph
        assert graph.get("dynamic", 0) == before.get("dynamic", 0), (before, graph)
        assert graph.get("dynamic", 0) == before.get("dynamic", 0) >= 2, (before, graph)  # the first two at least
        assert not any(model_metric(server, "gert_request_path_compiles_total", "tiered").values())
    finally:
        unload_model(server, "tiered")


# ---- the README's example ----------------------------------------------------------------------------------------


def test_example_repository_and_client(server):
    """examples/model_repository serves, and examples/client.py (HTTP and gRPC, results checked) succeeds on it."""
    load_model(server, "tiny_classifier")  # loaded here, not at server start: a broken example fails this test only
    try:
        r = subprocess.run(
            [
                sys.executable,
                os.path.join(EXAMPLES, "client.py"),
                "--http",
                server.url("http"),
                "--grpc",
                server.url("grpc"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "HTTP:" in r.stdout and "gRPC:" in r.stdout
    finally:
        unload_model(server, "tiny_classifier")


# ---- metrics ------------------------------------------------------------------------------------------------------


def metrics(server) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=CALL_TIMEOUT) as r:
        text = r.read().decode()
    out: dict = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+)\{([^}]*)\}\s+(\S+)$", line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def test_padding_metrics_say_what_the_padding_cost(server, grpc):
    """A request of 3 rows on a model whose one batch gear is 4: gert_padding_ratio 0.25 and
    gert_padding_seconds_total a quarter of the run's seconds (at most a quarter of the stream's busy time, which also
    holds the warm-up runs), published by the stub's metrics thread."""
    load_model(server, "padded")
    try:
        out = infer(grpc, "padded", {"x": text_image(3, 48, 192, seed=5)}).as_numpy(CLS_OUT)
        assert out.shape == (3, 2)

        def series(m, name: str) -> list:
            return [v for lab, v in m.get(name, []) if lab["model"] == "padded"]

        def published():
            m = metrics(server)
            # the stream's busy seconds may come a scrape after the padding's (CI): wait for both
            ready = series(m, "gert_padding_seconds_total") and series(m, "gert_padding_ratio")
            return m if ready and sum(series(m, "gert_stream_busy_seconds_total")) > 0 else None

        m = wait_for(published, 30, "the padding metrics of 'padded' published")
        assert series(m, "gert_padding_ratio") == [0.25]
        (cost,) = series(m, "gert_padding_seconds_total")
        busy = sum(series(m, "gert_stream_busy_seconds_total"))
        assert 0 < cost <= 0.25 * busy + 1e-9, (cost, busy)
    finally:
        unload_model(server, "padded")  # gone before the next test reads the server's readiness


# image widths no other request to cls uses, one per call of the metrics test (also when it runs again, with --count,
# against the same server): gert's gear labels carry the width, so the test finds its own batches among the series
_METRICS_WIDTHS = itertools.count(200, 8)


def test_metrics_endpoint_exposes_gert_metrics(server, grpc):
    """cls's gert metrics count what this test sends, whatever ran before: 3 one-row requests and one request of
    MAX_BATCH rows (a full batch, made in one call: the default layout splits it over the two idle streams, a gear
    of MAX_BATCH // 2 rows each; one stream runs it at gear MAX_BATCH), all at an image width of their own. The gear
    label shows a width only where it is a declared gear (bounded labels: other sizes show as "dynamic"), so this
    test's hits are the change from a snapshot taken once gert's earlier publications have settled (no change for
    two publication intervals); it then waits (deadline) until gert's publisher thread has published them."""
    w = next(_METRICS_WIDTHS)

    def gear_hits(m) -> dict:  # cls's gear hits by batch gear
        out: dict = {}
        for lab, v in m.get("gert_gear_hits_total", []):
            dims = dict(kv.split("=") for kv in lab["gear"].split(","))
            if lab["model"] == "cls":
                out[int(dims["batch"])] = out.get(int(dims["batch"]), 0) + v
        return out

    def settled():  # the publisher is idle: two reads more than two publication intervals apart agree
        first = gear_hits(metrics(server))
        time.sleep(2.5 * GertParams().metrics_interval_ms / 1000)  # cls publishes at the default interval
        return (first,) if gear_hits(metrics(server)) == first else None

    (before,) = wait_for(settled, 30, "earlier publications settled")

    def mine(m) -> dict:  # this test's gears: {batch gear: hits}
        now = gear_hits(m)
        return {g: n - before.get(g, 0) for g, n in now.items() if n - before.get(g, 0)}

    def cls_series(m, name: str, by: str) -> dict:
        out: dict = {}
        for lab, v in m.get(name, []):
            if lab["model"] == "cls":
                out[lab[by]] = out.get(lab[by], 0) + v
        return out

    s0 = stats(grpc, "cls")
    for seed in range(3):
        out = infer(grpc, "cls", {"x": text_image(1, 48, w, seed=seed)}).as_numpy(CLS_OUT)
        assert out.shape == (1, 2) and np.isclose(out.sum(), 1, atol=1e-5)
    out = infer(grpc, "cls", {"x": text_image(MAX_BATCH, 48, w, seed=21)}).as_numpy(CLS_OUT)
    assert out.shape == (MAX_BATCH, 2) and np.allclose(out.sum(1), 1, atol=1e-5)
    executions = 4  # one client, one request at a time: each request is one execution

    def published(m):
        hits = mine(m)
        everything = sum(cls_series(m, "gert_gear_hits_total", "gear").values())
        graphs = sum(cls_series(m, "gert_graph_requests_total", "graph").values())
        rows = sum(gear * n for gear, n in hits.items())  # no padding: 1-row gears, and 8 rows as 8 or 4 + 4
        return m if rows >= 3 + MAX_BATCH and graphs == everything else None

    m = wait_for(lambda: published(metrics(server)), 30, "gert published this test's batches")
    s = wait_for(
        lambda: (lambda s: s if s["execution_count"] - s0["execution_count"] >= executions else None)(
            stats(grpc, "cls")
        ),
        30,
        "the server counts this test's requests",
    )
    assert s["execution_count"] - s0["execution_count"] == executions
    assert s["inference_count"] - s0["inference_count"] == 3 + MAX_BATCH
    for name in ("gert_gear_hits_total", "gert_padding_ratio", "gert_stream_busy_seconds_total"):
        assert any(lab.get("model") == "cls" for lab, _ in m.get(name, [])), f"{name} has no cls series"
    # cls has the default layout: two streams when the device has two or more cube cores, each batch split over
    # the idle ones, so an execution runs one gear per stream it used
    busy = cls_series(m, "gert_stream_busy_seconds_total", "stream")
    cube = gert._cann.get_device_info(0, gert._cann.DEV_ATTR_CUBE_CORE_NUM)
    assert len(busy) == (2 if cube >= 2 else 1) and all(v > 0 for v in busy.values()), busy
    hits = mine(m)
    assert hits.get(1) == 3, hits  # the one-row requests: gear 1, never split
    big = {g: n for g, n in hits.items() if g > 1}
    assert big in ({MAX_BATCH // 2: 2}, {MAX_BATCH: 1}) if len(busy) == 2 else big == {MAX_BATCH: 1}, hits
    assert all(0 <= v < 1 for _, v in m["gert_padding_ratio"])
    # cls's image axes are auto: every run was served by its static or the dynamic-shape graph, none compiled on
    # the request path (warmup compiled the dynamic graph at load)
    graph = cls_series(m, "gert_graph_requests_total", "graph")
    assert set(graph) <= {"static", "dynamic"}, graph
    assert not any(v for lab, v in m.get("gert_request_path_compiles_total", []) if lab["model"] == "cls")
    nv = {lab["model"]: v for lab, v in metrics(server)["nv_inference_count"]}
    assert nv["cls"] == stats(grpc, "cls")["inference_count"]


# ---- gert serve ---------------------------------------------------------------------------------------------------


def test_gert_serve_runs_the_server_and_exits_on_sigterm(tmp_path):
    seq_file = tmp_path / "seq.onnx"
    seq_file.write_bytes(seq_model())
    repo = str(tmp_path / "repo")
    init_repo(str(seq_file), repo, name="seq")
    log = str(tmp_path / "serve.log")
    p, (hp, gp, mp) = start_serve(repo, log)
    server_pids: list = []
    try:
        server_pids = children(p.pid)
        assert len(server_pids) == 1, f"gert serve should run one tritonserver child, has {server_pids}"
        for client in (
            httpclient.InferenceServerClient(f"127.0.0.1:{hp}", network_timeout=CALL_TIMEOUT),
            grpcclient.InferenceServerClient(f"127.0.0.1:{gp}"),
        ):
            try:
                check_seq_good(client)
            finally:
                client.close()
        deadline = time.monotonic() + 10  # published by gert_triton's thread within metrics_interval_ms
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{mp}/metrics", timeout=CALL_TIMEOUT) as r:
                if b"gert_gear_hits_total" in r.read():
                    break
            assert time.monotonic() < deadline, "no gert metrics on the metrics endpoint"
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)  # to gert serve only: it forwards the signal to the server
        code = p.wait(60)  # the deadline: the server's --exit-timeout-secs=5 ends it well before
        assert code == 0, f"gert serve exited with {code} (the server's code after SIGTERM is 0):\n{log_tail(log)}"
        assert all(gone(pid) for pid in server_pids), "tritonserver outlived gert serve"
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{hp}/v2/health/live", timeout=2)
    finally:
        kill_tree(p, server_pids)


def test_gert_serve_exits_with_the_server_code(tmp_path):
    """A model that fails to load makes tritonserver exit 1 at start; gert serve passes that code on."""
    seq_file = tmp_path / "seq.onnx"
    seq_file.write_bytes(seq_model())
    repo = str(tmp_path / "repo")
    init_repo(str(seq_file), repo, name="bad", parameters={"streams": "zero"})
    log = str(tmp_path / "serve.log")
    p, _ = run_serve(repo, log)
    try:
        code = p.wait(START_TIMEOUT)
    finally:
        kill_tree(p, children(p.pid))
    assert code == 1, f"gert serve exited with {code}:\n{log_tail(log)}"
    assert "parameter 'streams'" in log_tail(log, 400)


def venv_site_packages() -> str:
    import site

    return next(d for d in site.getsitepackages() if d.startswith(sys.prefix))


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="runs gert serve from a virtual environment (CI makes one)")
def test_gert_serve_from_a_venv_that_is_not_activated(tmp_path):
    """`<venv>/bin/gert serve` as systemd or a container entrypoint runs it: from /, VIRTUAL_ENV and PYTHONPATH unset,
    PATH not naming the venv. The model.py imports a module that only this venv has (through a .pth file, as editable
    installs add theirs), onnxruntime and gert_triton; it loads and serves. Also: --address (a loopback address other
    than 127.0.0.1, so the test stays on loopback) and tritonserver arguments after `--` (explicit model control loads
    only the named model)."""
    gert_bin = os.path.join(sys.prefix, "bin", "gert")
    assert os.access(gert_bin, os.X_OK), f"{gert_bin}: the venv has no gert script"
    probe = f"gert_venv_probe_{os.getpid()}"
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (probe_dir / f"{probe}.py").write_text("SCALE = 1.0\n")
    pth = os.path.join(venv_site_packages(), f"{probe}.pth")
    with open(pth, "w") as f:
        f.write(f"{probe_dir}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    p, server_pids = None, []
    try:
        base = subprocess.run(
            [getattr(sys, "_base_executable", sys.executable), "-c", f"import {probe}"],
            env=env,
            cwd="/",
            capture_output=True,
            timeout=60,
        )
        assert base.returncode != 0, "the base interpreter must not see the venv-only module"
        seq_file = tmp_path / "seq.onnx"
        seq_file.write_bytes(seq_model())
        repo = str(tmp_path / "repo")
        for name in ("seq", "other"):
            init_repo(str(seq_file), repo, name=name)
        model_py = os.path.join(repo, "seq", "1", "model.py")
        with open(model_py) as f:
            code = f.read()
        with open(model_py, "w") as f:
            f.write(f"import {probe}  # installed only in the venv that runs gert serve\nimport onnxruntime\n" + code)
        log = str(tmp_path / "serve.log")
        p, (hp, gp, _) = start_serve(
            repo,
            log,
            3,
            "--model-control-mode=explicit",
            "--load-model=seq",
            host="127.0.0.2",
            gert_cmd=(gert_bin,),
            options=("--address", "127.0.0.2"),
            env=env,
            cwd="/",
        )
        server_pids = children(p.pid)
        for client in (
            httpclient.InferenceServerClient(f"127.0.0.2:{hp}", network_timeout=CALL_TIMEOUT),
            grpcclient.InferenceServerClient(f"127.0.0.2:{gp}"),
        ):
            try:
                check_seq_good(client)
                assert not client.is_model_ready("other"), "--load-model=seq after -- must load only seq"
            finally:
                client.close()
        with pytest.raises(OSError):  # it listens on the address it was given, not on 127.0.0.1
            urllib.request.urlopen(f"http://127.0.0.1:{hp}/v2/health/live", timeout=2)
    finally:
        os.unlink(pth)
        if p is not None:
            kill_tree(p, server_pids)
