"""Issue 22 against the REAL tritonserver: requests that Triton's dynamic batcher hands to one execute() (merged by
gert's Engine, padded to a gear) each get exactly their own rows, equal to ONNX Runtime on that request alone; a
model with an output reduced over the batch (R8) never sees pad rows or other requests' rows.

The server is the one bundled in nvidia-pytriton, started by gert_triton.server.TritonServer (as in
tests/test_triton_e2e.py); every wait is bounded and the server is stopped also when a test fails.
"""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest
from onnx import helper

from gert_triton.repo import init_repo
from gert_triton.server import pytriton_root
from models import _const, make_model, vi
from test_pipeline_property import FAMILIES, ort_alone
from triton_server import running_server

grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import np_to_triton_dtype  # noqa: E402

pytestmark = [pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')")]

CALL_TIMEOUT = 30.0


def unnamed_model() -> bytes:
    """x [?, 4] (the batch dim unnamed) -> y = x * 2 + 1 [?, 4], z = ReduceSum(x, axis 1, keepdims) [?, 1]."""
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["x2"]),
        helper.make_node("Add", ["x2", "one"], ["y"]),
        helper.make_node("ReduceSum", ["x", "ax1"], ["z"], keepdims=1),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, [None, 4])],
        [vi("y", np.float32, [None, 4]), vi("z", np.float32, [None, 1])],
        [
            _const("two", np.array(2, np.float32)),
            _const("one", np.array(1, np.float32)),
            _const("ax1", np.array([1], np.int64)),
        ],
        name="unnamed_e2e",
    )


MODELS = {
    "unnamed": (unnamed_model(), FAMILIES["unnamed"][2]),
    "reduce": (FAMILIES["reduce"][0], FAMILIES["reduce"][2]),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline-triton")
    repo = root / "repo"
    for name in ("unnamed", "reduce"):
        path = root / f"{name}.onnx"
        path.write_bytes(MODELS[name][0])
        # unnamed: padded to gears 1, 2, 4; reduce: its batch is exact (an output reduced over it), any size runs
        params = {"gears": "batch:1,2,4", "streams": "1"} if name == "unnamed" else {"streams": "1"}
        init_repo(str(path), str(repo), name=name, parameters=params)
    with running_server(str(repo), str(root / "server.log"), ["--exit-timeout-secs=5"]) as srv:
        yield srv


def infer(client, model: str, feeds: dict, outputs: list) -> dict:
    inputs = []
    for k, v in feeds.items():
        i = grpcclient.InferInput(k, list(v.shape), np_to_triton_dtype(v.dtype))
        i.set_data_from_numpy(v)
        inputs.append(i)
    res = client.infer(
        model, inputs, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs], client_timeout=CALL_TIMEOUT
    )
    return {o: res.as_numpy(o) for o in outputs}


@pytest.mark.parametrize("model, outputs", [("unnamed", ["y", "z"]), ("reduce", ["y", "m"])])
def test_concurrent_requests_each_get_their_own_rows(server, model, outputs):
    """Many requests of 1-3 rows at once (the dynamic batcher may merge them into one execute, gert merges and pads
    them to a gear): each one's outputs equal ONNX Runtime on that request alone."""
    onnx_model, make = MODELS[model]
    rng = np.random.default_rng(5)
    reqs = [make(rng, int(n)) for n in rng.integers(1, 4, 48)]
    client = grpcclient.InferenceServerClient(server.url("grpc"))
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda r: infer(client, model, r, outputs), reqs))
    finally:
        client.close()
    for i, (r, got) in enumerate(zip(reqs, results)):
        want = ort_alone(onnx_model, r)
        for o in outputs:
            assert got[o].shape == want[o].shape, (model, i, o, got[o].shape, want[o].shape)
            np.testing.assert_allclose(got[o], want[o], rtol=1e-5, atol=1e-5, err_msg=f"{model} request {i} {o}")
