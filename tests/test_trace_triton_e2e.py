"""gert_triton's trace (issue 25) against the REAL tritonserver: a model with ``trace_file`` writes, when it unloads,
a Chrome trace naming the batch each Triton request rode in (by request id), and its timestamps line up with
Triton's own trace (--trace-config, steady_clock ns) through ``otherData.monotonic_origin_ns``. Its own server on
free ports (explicit model control), independent of the other e2e modules."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from gert_triton.repo import init_repo
from gert_triton.server import pytriton_root
from models import mlp_model
from triton_server import EXPLICIT, log_tail, start_server, stop_server

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = [pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')")]

CALL_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton-trace")
    repo = root / "repo"
    repo.mkdir()
    src = root / "mlp.onnx"
    src.write_bytes(mlp_model(5))
    # one stream, a 20 ms batching window: the concurrent requests below ride in shared batches
    init_repo(
        str(src),
        str(repo),
        name="mlp",
        max_batch_size=8,
        parameters={"streams": "1", "trace_file": str(root / "gert.json"), "gears": "batch:1,2,4,8"},
    )
    cfg = repo / "mlp" / "config.pbtxt"
    text = cfg.read_text()
    if "dynamic_batching" in text:
        import re

        text = re.sub(r"dynamic_batching \{.*?\n\}\n", "", text, flags=re.S)
    cfg.write_text(text + "dynamic_batching {\n  max_queue_delay_microseconds: 20000\n}\n")
    log = str(root / "server.log")
    triton_trace = str(root / "triton.json")
    with pytest.MonkeyPatch.context() as mp:  # an absolute trace_file must be inside GERT_TRACE_DIR (the server's)
        mp.setenv("GERT_TRACE_DIR", str(root))
        srv = start_server(
            str(repo),
            log,
            [
                *EXPLICIT,
                f"--trace-config=triton,file={triton_trace}",
                "--trace-config=triton,log-frequency=1",
                "--trace-config=rate=1",
                "--trace-config=level=TIMESTAMPS",
            ],
        )
    client = httpclient.InferenceServerClient(
        srv.url("http"), connection_timeout=CALL_TIMEOUT, network_timeout=CALL_TIMEOUT, concurrency=8
    )
    try:
        yield srv, client, root, log
    finally:
        client.close()
        stop_server(srv)


def _whole_json(path, timeout: float = CALL_TIMEOUT):
    """A JSON file another process (Triton's trace writer) may still be writing: parsed once it is whole."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_triton_trace_names_each_requests_batch_and_lines_up_with_tritons(served):
    srv, client, root, log = served
    try:
        client.load_model("mlp")
    except InferenceServerException as e:
        pytest.fail(f"load: {e}\n{log_tail(log)}", pytrace=False)
    pending = []
    for i in range(16):  # sent at once (the client's connection pool): the batcher groups them
        x = np.random.default_rng(i).standard_normal((1 + i % 2, 16)).astype(np.float32)
        inp = httpclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        pending.append(client.async_infer("mlp", [inp], request_id=f"req-{i}"))
    for p in pending:
        p.get_result(timeout=CALL_TIMEOUT)
    client.unload_model("mlp")  # finalize() writes the trace
    path = root / "gert.json"
    deadline = time.monotonic() + CALL_TIMEOUT
    while not path.exists():
        assert time.monotonic() < deadline, f"no trace written\n{log_tail(log)}"
        time.sleep(0.05)
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    batches = [e for e in events if e["ph"] == "X" and e["name"] == "triton_batch"]
    rode = {rid: b for b in batches for rid in b["args"]["request_ids"]}
    assert set(rode) == {f"req-{i}" for i in range(16)}, sorted(rode)
    assert any(len(b["args"]["request_ids"]) > 1 for b in batches), "no two requests shared a batch"
    for b in batches:
        assert len(b["args"]["rows"]) == len(b["args"]["request_ids"])
    executes = [e for e in events if e["ph"] == "X" and e["name"] == "triton_execute"]
    # Triton's own trace of the same requests: its COMPUTE_START..END holds the adapter's execute() of that request
    origin = data["otherData"]["monotonic_origin_ns"]
    records = []  # log-frequency=1: Triton writes each request's trace to triton.json.<n> as it completes
    for part in sorted(root.glob("triton.json.*")):
        records += _whole_json(part)
    stamps: dict = {}
    for r in records:
        for t in r.get("timestamps", []):
            stamps.setdefault(r["id"], {})[t["name"]] = t["ns"]
        if "request_id" in r:
            stamps.setdefault(r["id"], {})["request_id"] = r["request_id"]
    matched = 0
    for s in stamps.values():
        rid = s.get("request_id")
        if rid not in rode or "COMPUTE_START" not in s:
            continue
        start_us = (s["COMPUTE_START"] - origin) / 1000.0
        end_us = (s["COMPUTE_END"] - origin) / 1000.0
        ex = next(e for e in executes if rid in e["args"]["requests"])
        assert start_us - 1000 <= ex["ts"] and ex["ts"] + ex["dur"] <= end_us + 1000, (rid, start_us, ex, end_us)
        matched += 1
    assert matched, f"Triton's trace names none of the requests: {list(stamps.values())[:2]}"
