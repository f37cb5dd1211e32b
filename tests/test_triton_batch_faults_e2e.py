"""A device fault inside a batch Triton merged, through the REAL tritonserver (issue 27): only the request that fails
alone fails. The server's environment carries GERT_HOST_FAULTS, so each model's stub process arms its host NPU at
aclInit: its first two kernel launches fail (AI Core exception, 507015). Triton merges three concurrent requests
into one execute (preferred_batch_size 3 and a 20 s queue delay: the batch goes when the third arrives); its run is
launch 1 and fails; execute retries the requests one by one (gert.core.engine.run_isolated through Engine.run_many),
the first of them is launch 2 and fails; the other two get ONNX Runtime's results. Without the retry all three
fail; without the merge two would. The retry is counted in gert_retried_batches_total (Triton's metrics
endpoint). One server for this module on free ports, independent of the others."""

from __future__ import annotations

import os
import re
import time
import urllib.request

import numpy as np
import pytest

from config_models import relu_model
from gert_triton.repo import init_repo
from gert_triton.server import pytriton_root
from models import ort_run
from test_triton_e2e import CALL_TIMEOUT, InferenceServerException
from triton_models import SEQ_OUTPUTS, seq_inputs, seq_model
from triton_server import start_server

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import np_to_triton_dtype  # noqa: E402

pytestmark = [
    pytest.mark.hostnpu_only,
    pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')"),
]

FAULTS = "execute:after=0:count=2"  # per stub: kernel launches 1 and 2 fail, the rest run
# one stream, nothing compiled or run at load: the launches a model's stub makes are exactly the tests' runs
MODELS = {
    "seq_pad": (seq_model, {"streams": "1", "warmup": "false"}),  # 3 rows run padded to gear 4
    "relu_exact": (
        relu_model,
        {"streams": "1", "warmup": "false", "gears": "batch:1,2,4,8", "shape_policy": "batch:exact"},
    ),  # 3 rows run as gear pieces 2 + 1
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton-batch-faults")
    repo = root / "repo"
    for name, (make, parameters) in MODELS.items():
        onnx = root / f"{name}.onnx"
        onnx.write_bytes(make())
        target = init_repo(str(onnx), str(repo), name=name, parameters=parameters)
        cfg = os.path.join(target, "config.pbtxt")
        with open(cfg) as f:
            text = f.read()
        assert "max_queue_delay_microseconds: 2000" in text, text
        with open(cfg, "w") as f:
            f.write(
                text.replace(
                    "max_queue_delay_microseconds: 2000",
                    "preferred_batch_size: [ 3 ]\n  max_queue_delay_microseconds: 20000000",
                )
            )
    log = str(root / "server.log")
    old = os.environ.get("GERT_HOST_FAULTS")
    os.environ["GERT_HOST_FAULTS"] = FAULTS  # the server (and its stubs) inherit it
    try:
        srv = start_server(
            str(repo),
            log,
            ["--model-control-mode=explicit", *(f"--load-model={n}" for n in MODELS), "--exit-timeout-secs=5"],
        )
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


def _requests(name: str) -> list:
    if name == "seq_pad":
        return [seq_inputs(1, 4, uid) for uid in (31, 32, 33)]
    return [{"x": np.array([[i + 1.0, -1, 2, -3]], np.float32) * (-1) ** i} for i in range(3)]


def _send_together(client, name: str, reqs: list) -> list:
    """The requests sent at once (async); per request its outputs dict, or (status, message) of its error."""
    handles = []
    for r in reqs:
        ins = []
        for k, arr in r.items():
            i = httpclient.InferInput(k, list(arr.shape), np_to_triton_dtype(arr.dtype))
            i.set_data_from_numpy(arr)
            ins.append(i)
        handles.append(client.async_infer(name, ins))
    out = []
    for h in handles:
        try:
            res = h.get_result(timeout=CALL_TIMEOUT)
        except InferenceServerException as e:
            out.append((str(e.status()), e.message()))
            continue
        out.append({o["name"]: res.as_numpy(o["name"]) for o in res.get_response()["outputs"]})
    return out


def _expected(name: str, r: dict) -> dict:
    data = seq_model() if name == "seq_pad" else relu_model()
    names = SEQ_OUTPUTS if name == "seq_pad" else ("y",)
    return dict(zip(names, ort_run(data, list(r.values()))))


def _executions(client, name: str, deadline_s: float = 30.0) -> int:
    """Triton's execution count of the model, once it reports one (statistics go out after execute() returned)."""
    end = time.monotonic() + deadline_s
    while True:
        n = int(client.get_inference_statistics(name)["model_stats"][0]["execution_count"])
        if n or time.monotonic() > end:
            return n
        time.sleep(0.05)


def _retried_metric(server, name: str, deadline_s: float = 30.0) -> float:
    """gert_retried_batches_total of the model on Triton's metrics endpoint, once published (the publisher thread
    sends it after the batch; 0.0 if it never comes)."""
    pattern = re.compile(r"^gert_retried_batches_total\{([^}]*)\}\s+(\S+)$", re.M)
    end = time.monotonic() + deadline_s
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=CALL_TIMEOUT) as r:
            text = r.read().decode()
        values = [float(v) for labels, v in pattern.findall(text) if f'model="{name}"' in labels]
        if values or time.monotonic() > end:
            return sum(values)
        time.sleep(0.05)


@pytest.mark.parametrize("name", list(MODELS))
def test_fault_in_a_merged_batch_fails_only_the_request_that_fails_alone(server, name):
    client = httpclient.InferenceServerClient(
        server.url("http"), connection_timeout=CALL_TIMEOUT, network_timeout=CALL_TIMEOUT, concurrency=8
    )
    try:
        reqs = _requests(name)
        got = _send_together(client, name, reqs)
        failed = [k for k, g in enumerate(got) if isinstance(g, tuple)]
        assert len(failed) == 1, f"exactly one request fails (the merged run failed, then one request alone): {got}"
        status, msg = got[failed[0]]
        assert status == "500" and "ACL_ERROR_RT_AICORE_EXCEPTION (507015)" in msg and "injected" in msg, got
        for k, (r, g) in enumerate(zip(reqs, got)):
            if k in failed:
                continue
            want = _expected(name, r)
            assert set(g) == set(want), (k, sorted(g))
            for out, arr in want.items():
                np.testing.assert_array_equal(g[out], arr, err_msg=f"request {k} output {out}")
        assert _executions(client, name) == 1, "the three requests ran as one execute"
        again = _send_together(client, name, reqs)  # no fault armed any more: every request served
        for k, (r, g) in enumerate(zip(reqs, again)):
            assert isinstance(g, dict), (k, g)
            for out, arr in _expected(name, r).items():
                np.testing.assert_array_equal(g[out], arr, err_msg=f"request {k} output {out}")
        assert client.is_model_ready(name)
        assert _retried_metric(server, name) == 1.0, "gert_retried_batches_total counts the retried batch"
    finally:
        client.close()
