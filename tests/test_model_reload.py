"""gert serve's reload of one model against the real tritonserver. Triton's unload call returns before the model is
unloaded (server#6126: the index says UNLOADING), and the reload sends its load at once, so that a model whose stub
died mid-request (whose unload may never finish) is back within a second. That relies on Triton moving a still
unloading instance to the background when a load of the same version comes (core src/model_lifecycle.cc AsyncLoad:
``background_models_``), so the late end of the unload does not take the new instance down; this test pins it.

The model is a plain Python-backend model.py whose finalize() takes FINALIZE_S, so each unload is UNLOADING for that
long and the order of Triton's own log lines shows what the reload did."""

from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest

from gert_triton.health import Health
from gert_triton.model_watch import ModelWatch
from gert_triton.serve_policy import Policy
from gert_triton.server import pytriton_root
from gert_triton.triton_args import plan
from gert_triton.triton_http import TritonHTTP, model_states
from triton_server import EXPLICIT, log_tail, start_server, stop_server

httpclient = pytest.importorskip("tritonclient.http")
pytestmark = pytest.mark.skipif(pytriton_root() is None, reason="needs the nvidia-pytriton wheel's tritonserver")

FINALIZE_S = 1.5
MODEL_PY = f"""
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
        return out

    def finalize(self):
        time.sleep({FINALIZE_S})
"""
CONFIG = """
name: "slow"
backend: "python"
max_batch_size: 0
input [{ name: "X", data_type: TYPE_FP32, dims: [ 2 ] }]
output [{ name: "Y", data_type: TYPE_FP32, dims: [ 2 ] }]
instance_group [{ kind: KIND_CPU, count: 1 }]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("reload")
    version = root / "repo" / "slow" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(MODEL_PY)
    (root / "repo" / "slow" / "config.pbtxt").write_text(CONFIG)
    srv = start_server(str(root / "repo"), str(root / "server.log"), extra_args=[*EXPLICIT, "--load-model=slow"])
    yield srv
    stop_server(srv)


def infer(srv) -> np.ndarray:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}")
    try:
        x = httpclient.InferInput("X", [2], "FP32")
        x.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
        return client.infer("slow", [x]).as_numpy("Y")
    finally:
        client.close()


def log_events(log: str, since: int) -> list[str]:
    """Triton's unload-finished and load-started lines for `slow` after byte ``since`` of its log, in order."""
    with open(log, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return re.findall(r"successfully unloaded 'slow'|loading: slow:1|successfully loaded 'slow'", text)


def test_reload_while_the_unload_is_still_running_leaves_the_model_serving(server):
    """ModelWatch.reload (what gert serve runs when a stub died) sends the load while Triton still unloads (the
    unload call returned at once; finalize() takes FINALIZE_S): Triton moves the unloading instance to the
    background and serves the new one, so the model is READY when the reload reports done, answers, and stays
    READY after the old instance's unload finished (Triton's log says so)."""
    log = server.log
    since = os.path.getsize(log)
    woken = []
    watch = ModelWatch(
        plan(["--model-repository=unused"]),
        Policy(load_timeout_s=60),
        Health(),
        log=lambda line: None,
        wake=lambda: woken.append(1),
        restart_server=lambda why: pytest.fail(why),
    )
    client = TritonHTTP(f"127.0.0.1:{server.http_port}")
    watch.reset(client, 1)
    watch.reload("slow", 0.0, 1, client)
    generation, name, error = watch.done.get_nowait()
    assert (generation, name, error) == (1, "slow", None), log_tail(log)
    assert woken == [1]
    assert model_states(client.index())["slow"][0] == "READY"
    np.testing.assert_array_equal(infer(server), [2.0, 4.0])
    deadline = time.monotonic() + 10
    while (events := log_events(log, since))[-1:] != ["successfully loaded 'slow'"]:
        assert time.monotonic() < deadline, events
        time.sleep(0.05)
    assert events[0] == "loading: slow:1", events  # the load was sent before the unload had finished
    while "successfully unloaded 'slow'" not in (events := log_events(log, since)):
        assert time.monotonic() < deadline, events
        time.sleep(0.05)
    assert model_states(client.index())["slow"][0] == "READY"
    np.testing.assert_array_equal(infer(server), [2.0, 4.0])
