"""Issue 24 through the REAL tritonserver: gert_triton's cann_ops=strict refuses a model a stock CANN 8.x parser would
refuse (the load fails with GE's E13010 text), and precision_mode=force_fp16 serves numpy float16's results. One
server for the module on free ports, explicit model control."""

from __future__ import annotations

import numpy as np
import pytest

from gert_triton.repo import init_repo
from gert_triton.server import pytriton_root
from test_cann_check import qdq
from test_precision import arith, f16_reference, feeds
from triton_server import log_tail, start_server, stop_server

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException, np_to_triton_dtype  # noqa: E402

pytestmark = [pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')")]

P = {"streams": "1", "warmup": "false"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("preview-triton")
    repo = root / "repo"
    repo.mkdir()
    (root / "qdq.onnx").write_bytes(qdq().SerializeToString())
    (root / "arith.onnx").write_bytes(arith())
    init_repo(str(root / "qdq.onnx"), str(repo), name="qdq_strict", parameters={**P, "cann_ops": "strict"})
    init_repo(
        str(root / "arith.onnx"),
        str(repo),
        name="arith_fp16",
        max_batch_size=0,
        parameters={**P, "precision_mode": "force_fp16"},
    )
    log = str(root / "server.log")
    srv = start_server(str(repo), log)
    client = httpclient.InferenceServerClient(srv.url("http"), connection_timeout=60, network_timeout=60)
    try:
        yield srv, client, log
    finally:
        client.close()
        stop_server(srv)


def test_strict_model_fails_to_load_with_e13010(served):
    srv, client, log = served
    with pytest.raises(InferenceServerException) as e:
        client.load_model("qdq_strict")
    text = str(e.value) + log_tail(log, 80)
    assert "E13010" in text and "ai.onnx::17::QuantizeLinear" in text, text
    assert not client.is_model_ready("qdq_strict")


def test_force_fp16_model_serves_float16_results(served):
    srv, client, log = served
    client.load_model("arith_fp16")
    f = feeds()
    ins = []
    for name, arr in f.items():
        i = httpclient.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
        i.set_data_from_numpy(arr)
        ins.append(i)
    z = client.infer("arith_fp16", ins).as_numpy("z")
    np.testing.assert_array_equal(z, f16_reference(f["x"], f["y"]).astype(np.float32))
