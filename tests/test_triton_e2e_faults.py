"""gert_triton under device faults through the REAL tritonserver (issue 13). The server's environment carries
GERT_HOST_FAULTS, so each stub process's host NPU arms the faults at aclInit and counts its own kernel launches.

- an injected task fault answers that request INTERNAL (HTTP 500 / gRPC INTERNAL) with the runtime's code and message;
- a hung task past request_timeout_ms answers UNAVAILABLE (HTTP 503 / gRPC UNAVAILABLE), the stream is aborted;
- a device-wide (sticky) fault answers INTERNAL; the stub's gert.Model recovers the device and serves on;
- the model stays READY and the following requests are answered correctly;
- a stub killed with SIGKILL: its requests fail fast (INTERNAL); the bundled Triton 2.51 python backend does not restart
  stubs, so a reload through the repository API brings the model back, and it serves again.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from gert_triton.repo import init_repo
from gert_triton.server import pytriton_root
from test_triton_e2e import (
    CALL_TIMEOUT,
    InferenceServerException,
    client_for,
    infer,
    load_model,
    metrics,
    stub_processes,
    unload_model,
    wait_for,
)
from triton_models import SEQ_OUTPUTS, seq_expected, seq_inputs, seq_model
from triton_server import gone, start_server

pytestmark = [
    pytest.mark.hostnpu_only,
    pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')"),
]

# per stub: kernel launches 1-2 run, 3 fails (execute), 4-6 run, 7 hangs until the request times out and aborts it,
# 8-12 run, 13 fails device-wide (sticky: gert.Model recovers the device), the rest run
FAULTS = "execute:after=2:count=1,hang:after=6:count=1:duration_ms=0,sticky:after=12:count=1"
TIMEOUT_MS = 500
# the models publish their gert_* metrics this often (the SIGKILL test waits for an idle publisher)
METRICS_INTERVAL_MS = 100


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton-faults")
    seq_file = root / "seq.onnx"
    seq_file.write_bytes(seq_model())
    repo = root / "repo"
    # one stream, and the tests send one request at a time: each request is one kernel launch, so the fault
    # positions are exact. Each test loads the models it uses (a new stub process, whose launches count from 0), so
    # the positions hold whatever ran before (another test, or this one again with --count).
    for name in ("faulty", "killed", "bystander"):
        init_repo(
            str(seq_file),
            str(repo),
            name=name,
            parameters={
                "streams": "1",
                "request_timeout_ms": str(TIMEOUT_MS),
                "metrics_interval_ms": str(METRICS_INTERVAL_MS),
            },
        )
    log = str(root / "server.log")
    old = os.environ.get("GERT_HOST_FAULTS")
    os.environ["GERT_HOST_FAULTS"] = FAULTS  # the server (and its stubs) inherit it
    try:
        srv = start_server(str(repo), log, ["--model-control-mode=explicit", "--exit-timeout-secs=5"])
    finally:
        if old is None:
            os.environ.pop("GERT_HOST_FAULTS", None)
        else:
            os.environ["GERT_HOST_FAULTS"] = old
    srv.log = log
    try:
        yield srv
    finally:
        srv.stop(timeout=20)


def _outcome(client, model: str, uid: int):
    r = seq_inputs(1, 4, uid)
    try:
        res = infer(client, model, r)
    except InferenceServerException as e:
        return str(e.status()), e.message()
    exp = seq_expected(r)
    return "ok" if all(np.array_equal(res.as_numpy(k), exp[k]) for k in SEQ_OUTPUTS) else "wrong"


@pytest.mark.parametrize("protocol", ["http"])
def test_task_fault_internal_timeout_unavailable_model_stays_ready(server, protocol):
    load_model(server, "faulty")
    client = client_for(server, protocol)
    try:
        got = [_outcome(client, "faulty", uid) for uid in range(1, 10)]
        assert got[0:2] == ["ok", "ok"], got
        status, msg = got[2]
        assert status == "500" and "ACL_ERROR_RT_AICORE_EXCEPTION (507015)" in msg and "injected" in msg, got[2]
        assert got[3:6] == ["ok"] * 3, got
        status, msg = got[6]
        assert status == "503" and "timed out" in msg and f"{TIMEOUT_MS / 1000:g} s" in msg, got[6]
        assert got[7:] == ["ok", "ok"], got
        assert client.is_model_ready("faulty")
    finally:
        client.close()
    g = client_for(server, "grpc")
    try:
        got = [_outcome(g, "faulty", uid) for uid in range(50, 56)]  # launches 10-15
        assert got[0:3] == ["ok"] * 3, got
        status, msg = got[3]
        assert status == "StatusCode.INTERNAL" and "device-wide" in msg, got[3]
        assert got[4:] == ["ok", "ok"], got  # the device was recovered in the stub
        assert g.is_model_ready("faulty")
    finally:
        g.close()
        unload_model(server, "faulty")


def _metrics_settled(server, pid: int) -> bool:
    """The stub's gert_* series are there and unchanged over two reads more than a publication interval apart."""

    def mine() -> list:
        return sorted(
            (name, sorted(labels.items()), value)
            for name, series in metrics(server).items()
            if name.startswith("gert_")
            for labels, value in series
            if labels.get("pid") == str(pid)
        )

    first = mine()
    time.sleep(3 * METRICS_INTERVAL_MS / 1000)
    return bool(first) and mine() == first


def test_stub_killed_with_sigkill_fails_fast_and_a_reload_serves_again(server):
    """The Python backend bundled here (Triton 2.51 in nvidia-pytriton) does not restart a dead stub: its
    libtriton_python.so has no restart path, so every later request of the instance is answered INTERNAL ("stub
    process ... is not healthy") at once, never hung. Reloading the model through the repository API starts a new
    stub, with a fresh gert.Model, and it serves again."""
    load_model(server, "killed")
    load_model(server, "bystander")
    client = client_for(server, "grpc")
    try:
        assert _outcome(client, "killed", 1) == "ok"
        stubs = stub_processes(server, "killed")
        assert len(stubs) == 1, stubs
        # the stub publishes its gert_* metrics after the request, each metric call an IPC round trip under a lock
        # in the shared memory it shares with the server: killed inside one, Triton 2.51 aborts (boost interprocess
        # lock_exception, as in triton-inference-server/server#8882). A user's stub can die anywhere; this test is
        # about the requests after it, so it kills the stub once its publisher is idle
        wait_for(lambda: _metrics_settled(server, stubs[0]), 30, "the stub's metrics publication")
        os.kill(stubs[0], signal.SIGKILL)
        wait_for(lambda: gone(stubs[0]), 30, "the killed stub has exited")
        t0 = time.monotonic()
        status, msg = _outcome(client, "killed", 2)
        assert status == "StatusCode.INTERNAL" and "not healthy" in msg, (status, msg)
        assert time.monotonic() - t0 < CALL_TIMEOUT
        # Triton reloads a loaded model only when its version's files changed (their modification times; the first
        # load's __pycache__ in the version dir looks like a change, a later load's does not; a config.pbtxt that
        # reads the same is no change), and an unload waits for the dead stub forever: so model.py is touched, as a
        # deployment replacing it would, and the model loaded again
        os.utime(os.path.join(server.repo, "killed", "1", "model.py"))
        load_model(server, "killed")  # a new stub process
        new = stub_processes(server, "killed")
        assert len(new) == 1 and new[0] != stubs[0], (stubs, new)
        assert [_outcome(client, "killed", uid) for uid in (3, 4)] == ["ok", "ok"]
        assert client.is_model_ready("killed")
        assert client.is_model_ready("bystander")  # the other model never noticed: its first request is served
        assert _outcome(client, "bystander", 60) == "ok"
    finally:
        client.close()
        unload_model(server, "killed")
        unload_model(server, "bystander")
