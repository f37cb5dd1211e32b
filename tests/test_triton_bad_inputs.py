"""The bad-input matrix through the REAL tritonserver (issue 13, item 4): one table of malformed requests, each sent
over HTTP (raw bodies, so that anything can be malformed) and over gRPC (raw ModelInferRequest protobufs, past
tritonclient's own checks). Each gets a 4xx / INVALID_ARGUMENT (or NOT_FOUND for an unknown model) whose message
names the problem; afterwards the server still answers correctly, and the stub process's memory has not grown.

Where Triton's own frontend answers before the model sees the request (JSON it cannot parse), it answers HTTP 500:
that is Triton's choice, accepted here as in test_triton_e2e.py. A NaN or Infinity in float data (binary, or JSON,
which Triton's parser accepts) is a value, not an error: it is served, and the result is the model's on that value.
A sequence id or start/end flag on a model without sequence batching is refused by gert_triton (Triton passes them
through).
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from gert_triton.repo import init_repo
from gert_triton.server import pytriton_root
from test_triton_e2e import raw_http, stub_processes
from triton_models import SEQ_OUTPUTS, seq_expected, seq_inputs, seq_model
from triton_server import start_server

grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.grpc import service_pb2  # noqa: E402

pytestmark = [pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')")]

MAX_BATCH = 8
REPEAT = 3  # each bad request is sent this often (a per-request leak would show in the RSS)
RSS_SLACK = 4 << 20  # bytes: allocator noise allowed on top of the warmed-up resident set


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton-bad")
    seq_file = root / "seq.onnx"
    seq_file.write_bytes(seq_model())
    repo = root / "repo"
    init_repo(str(seq_file), str(repo), name="seq", parameters={"streams": "1"})
    srv = start_server(
        str(repo),
        str(root / "server.log"),
        ["--model-control-mode=explicit", "--load-model=seq", "--exit-timeout-secs=5"],
    )
    try:
        yield srv
    finally:
        srv.stop(timeout=20)


# ---- requests, described once and sent over either protocol --------------------------------------------------------


def T(name, datatype, shape, data=None, raw=None, **params):
    """One input: ``data`` (numpy, sent as binary / raw contents) or ``raw`` (bytes as given)."""
    if data is not None:
        raw = np.ascontiguousarray(data).tobytes()
    return {"name": name, "datatype": datatype, "shape": list(shape), "raw": raw, "params": params}


def good(batch=1, s=4, uid=1) -> list:
    r = seq_inputs(batch, s, uid)
    return [T("a", "FP32", r["a"].shape, r["a"]), T("m", "INT64", r["m"].shape, r["m"])]


A = seq_inputs(1, 4, 7)["a"]
M = seq_inputs(1, 4, 7)["m"]


def http_body(inputs: list, outputs=None, extra=None, binary_size_delta: int = 0) -> tuple:
    header = {"inputs": []}
    tail = b""
    for t in inputs:
        entry = {"name": t["name"], "datatype": t["datatype"], "shape": t["shape"]}
        if t["raw"] is not None:
            entry["parameters"] = {"binary_data_size": len(t["raw"]) + binary_size_delta}
            tail += t["raw"]
        header["inputs"].append(entry)
    if outputs is not None:
        header["outputs"] = [{"name": o} for o in outputs]
    header.update(extra or {})
    head = json.dumps(header).encode()
    return head + tail, {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"}


def grpc_request(model: str, inputs: list, outputs=None, version: str = "", params=None):
    req = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for t in inputs:
        i = req.inputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        del i  # contents go to raw_input_contents, in input order
        if t["raw"] is not None:
            req.raw_input_contents.append(t["raw"])
    for o in outputs or []:
        req.outputs.add(name=o)
    for k, v in (params or {}).items():
        p = req.parameters[k]
        if isinstance(v, bool):
            p.bool_param = v
        elif isinstance(v, int):
            p.int64_param = v
        else:
            p.string_param = str(v)
    return req


# Each case: (description, how to send it, words the error must contain). "how" is a dict with optional keys: model,
# version, inputs, outputs, params (request-level), http (a raw (path, body, headers) instead), grpc_skip (no gRPC
# equivalent: the malformation is JSON-level), delta (binary_data_size off by this), grpc_raw (a ModelInferRequest
# mutator).
CASES = [
    ("wrong dtype FP64 for a", {"inputs": [T("a", "FP64", A.shape, A.astype(np.float64)), good()[1]]}, ["a", "FP64"]),
    ("wrong dtype INT32 for m", {"inputs": [good()[0], T("m", "INT32", M.shape, M.astype(np.int32))]}, ["m", "INT32"]),
    (
        "BYTES for a numeric input",
        {"inputs": [T("a", "BYTES", [1, 1], raw=struct.pack("<I", 3) + b"abc"), good()[1]]},
        ["a", "BYTES"],
    ),
    ("unknown datatype", {"inputs": [T("a", "FP33", A.shape, A), good()[1]]}, ["'a'", "data-type"]),
    ("rank too low", {"inputs": [T("a", "FP32", [1, 4], A[0]), good()[1]]}, ["a"]),
    ("rank too high", {"inputs": [T("a", "FP32", [1, 4, 4, 1], A), good()[1]]}, ["a"]),
    ("wrong fixed dim", {"inputs": [T("a", "FP32", [1, 4, 3], A[..., :3]), good()[1]]}, ["a"]),
    (
        "S differs between inputs",
        {"inputs": [good()[0], T("m", "INT64", [1, 5], np.zeros((1, 5), np.int64))]},
        ["'S'", "4", "5"],
    ),
    ("missing input", {"inputs": [good()[0]]}, ["m"]),
    ("extra input", {"inputs": good() + [T("zz", "FP32", [1, 1], np.zeros((1, 1), np.float32))]}, ["zz"]),
    ("duplicated input", {"inputs": good() + [good()[0]]}, ["a"]),
    ("no inputs at all", {"inputs": []}, ["input"]),
    (
        "empty batch",
        {
            "inputs": [
                T("a", "FP32", [0, 4, 4], np.zeros((0, 4, 4), np.float32)),
                T("m", "INT64", [0, 4], np.zeros((0, 4), np.int64)),
            ]
        },
        [],
    ),
    ("batch above max_batch_size", {"inputs": good(batch=MAX_BATCH + 1)}, ["batch"]),
    ("negative dim", {"inputs": [T("a", "FP32", [1, -4, 4], A), good()[1]]}, []),
    ("huge dim", {"inputs": [T("a", "FP32", [1, 1 << 40, 4], A), good()[1]]}, []),
    ("binary data too short", {"inputs": [T("a", "FP32", A.shape, raw=A.tobytes()[:-4]), good()[1]]}, ["a"]),
    ("binary data too long", {"inputs": [T("a", "FP32", A.shape, raw=A.tobytes() + b"\0" * 8), good()[1]]}, ["a"]),
    ("binary_data_size beyond the body", {"inputs": good(), "delta": 64, "grpc_skip": True}, []),
    ("unknown model", {"model": "nope", "inputs": good()}, ["nope"]),
    ("unknown version", {"version": "7", "inputs": good()}, ["7"]),
    ("non-numeric version", {"version": "abc", "inputs": good()}, []),  # HTTP: 404 from Triton's router
    ("unknown requested output", {"inputs": good(), "outputs": ["zz"]}, ["zz"]),
    (
        "sequence id on a model without sequence batching",
        {"inputs": good(), "params": {"sequence_id": 42}},
        ["sequence"],
    ),
    (
        "sequence_start without sequence id",
        {"inputs": good(), "params": {"sequence_start": True}},
        ["sequence_start=True"],
    ),
    ("priority of the wrong type", {"inputs": good(), "params": {"priority": "high"}}, ["priority"]),
    (
        "malformed JSON",
        {
            "http": (
                "/v2/models/seq/infer",
                b'{"inputs": [{"name": "a", "shape": [1, 4',
                {"Content-Type": "application/json"},
            ),
            "grpc_skip": True,
        },
        [],
    ),
    (
        "JSON body not an object",
        {"http": ("/v2/models/seq/infer", b"[1, 2, 3]", {"Content-Type": "application/json"}), "grpc_skip": True},
        [],
    ),
    (
        "JSON inputs not a list",
        {
            "http": ("/v2/models/seq/infer", b'{"inputs": {"a": 1}}', {"Content-Type": "application/json"}),
            "grpc_skip": True,
        },
        [],
    ),
    (
        "JSON data of the wrong length",
        {
            "http": (
                "/v2/models/seq/infer",
                json.dumps(
                    {
                        "inputs": [
                            {"name": "a", "datatype": "FP32", "shape": [1, 4, 4], "data": [0.5] * 15},
                            {"name": "m", "datatype": "INT64", "shape": [1, 4], "data": [1] * 4},
                        ]
                    }
                ).encode(),
                {"Content-Type": "application/json"},
            ),
            "grpc_skip": True,
        },
        [],
    ),
    (
        "JSON strings for FP32 data",
        {
            "http": (
                "/v2/models/seq/infer",
                json.dumps(
                    {
                        "inputs": [
                            {"name": "a", "datatype": "FP32", "shape": [1, 4, 4], "data": ["x"] * 16},
                            {"name": "m", "datatype": "INT64", "shape": [1, 4], "data": [1] * 4},
                        ]
                    }
                ).encode(),
                {"Content-Type": "application/json"},
            ),
            "grpc_skip": True,
        },
        [],
    ),
    (
        "NaN for an INT64 input in JSON",
        {
            "http": (
                "/v2/models/seq/infer",
                (
                    b'{"inputs": [{"name": "a", "datatype": "FP32", "shape": [1, 1, 4], "data": [1, 2, 3, 4]},'
                    b' {"name": "m", "datatype": "INT64", "shape": [1, 1], "data": [NaN]}]}'
                ),
                {"Content-Type": "application/json"},
            ),
            "grpc_skip": True,
        },
        [],
    ),
    (
        "shape with a non-integer",
        {
            "http": (
                "/v2/models/seq/infer",
                json.dumps(
                    {"inputs": [{"name": "a", "datatype": "FP32", "shape": [1, "four", 4], "data": [0.5] * 16}]}
                ).encode(),
                {"Content-Type": "application/json"},
            ),
            "grpc_skip": True,
        },
        [],
    ),
    (
        "raw contents for a missing input",
        {"grpc_raw": lambda r: r.raw_input_contents.append(M.tobytes()), "inputs": good()[:1], "http_skip": True},
        [],
    ),
    ("sequence end flag", {"inputs": good(), "params": {"sequence_end": True}}, ["sequence_end=True"]),
]

PARSE_ERRORS_500 = {
    "malformed JSON",
    "JSON body not an object",
    "JSON inputs not a list",
    "NaN for an INT64 input in JSON",
    "shape with a non-integer",
    "JSON strings for FP32 data",
    "JSON data of the wrong length",
    "negative dim",
    "priority of the wrong type",
}


def send_http(server, how: dict) -> tuple:
    if "http" in how:
        path, body, headers = how["http"]
    else:
        model, version = how.get("model", "seq"), how.get("version", "")
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
        body, headers = http_body(
            how["inputs"],
            how.get("outputs"),
            {"parameters": how["params"]} if how.get("params") else None,
            how.get("delta", 0),
        )
    status, text = raw_http(server, path, body, headers)
    try:
        msg = json.loads(text).get("error", "")
    except (ValueError, AttributeError):
        msg = text
    return status, msg


def send_grpc(client, how: dict) -> tuple:
    req = grpc_request(
        how.get("model", "seq"), how["inputs"], how.get("outputs"), how.get("version", ""), how.get("params")
    )
    if "grpc_raw" in how:
        how["grpc_raw"](req)
    try:
        client._client_stub.ModelInfer(request=req, timeout=30)
    except Exception as e:  # noqa: BLE001 - grpc.RpcError
        return str(e.code()), e.details()
    return "OK", ""


def check_served(server, client) -> None:
    r = seq_inputs(2, 5, 99)
    status, text = raw_http(
        server,
        "/v2/models/seq/infer",
        *http_body([T("a", "FP32", r["a"].shape, r["a"]), T("m", "INT64", r["m"].shape, r["m"])], outputs=None),
    )
    assert status == 200, text[:300]
    res = client.infer("seq", [_grpc_input(k, v) for k, v in r.items()])
    exp = seq_expected(r)
    for k in SEQ_OUTPUTS:
        np.testing.assert_array_equal(res.as_numpy(k), exp[k])


def _grpc_input(name, arr):
    from tritonclient.utils import np_to_triton_dtype

    i = grpcclient.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
    i.set_data_from_numpy(arr)
    return i


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_bad_input_matrix_over_http_and_grpc(server):
    assert len(CASES) >= 30
    client = grpcclient.InferenceServerClient(server.url("grpc"))
    try:
        for _uid in range(30):  # warm up: graphs compiled, buffers grown, allocator settled
            check_served(server, client)
        stub = stub_processes(server, "seq")
        assert len(stub) == 1, stub
        before = rss(stub[0])
        problems, sent = [], 0
        for name, how, words in CASES:
            for protocol in ("http", "grpc"):
                if how.get(f"{protocol}_skip"):
                    continue
                for _ in range(REPEAT):
                    if protocol == "http":
                        status, msg = send_http(server, how)
                        ok = 400 <= status < 500 or (name in PARSE_ERRORS_500 and status == 500)
                    else:
                        status, msg = send_grpc(client, how)
                        ok = status in (
                            "StatusCode.INVALID_ARGUMENT",
                            "StatusCode.NOT_FOUND",
                            "StatusCode.UNAVAILABLE" if how.get("model") == "nope" else "-",
                        )
                    sent += 1
                    missing = [w for w in words if w not in msg]
                    if not ok or missing or not msg:
                        problems.append(f"{name} [{protocol}]: {status} {msg[:200]!r} (missing {missing})")
                        break
            check_served(server, client)  # after every case: the server answers correctly
        assert not problems, f"{len(problems)} of the cases were not answered as expected:\n" + "\n".join(problems)
        for _ in range(10):
            check_served(server, client)
        after = rss(stub[0])
        assert stub_processes(server, "seq") == stub, "the stub process was replaced"
        assert after <= before + max(RSS_SLACK, before // 20), (
            f"stub RSS grew from {before >> 20} MiB to {after >> 20} MiB over {sent} bad requests"
        )
    finally:
        client.close()


def test_nan_in_binary_data_is_served_as_a_value(server):
    r = seq_inputs(1, 4, 5)
    r["a"][0, 1, :] = np.nan
    client = grpcclient.InferenceServerClient(server.url("grpc"))
    try:
        res = client.infer("seq", [_grpc_input(k, v) for k, v in r.items()])
        exp = seq_expected(r)
        for k in SEQ_OUTPUTS:
            np.testing.assert_array_equal(res.as_numpy(k), exp[k])  # NaN where NumPy has NaN
    finally:
        client.close()
