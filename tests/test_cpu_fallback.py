"""gert.load(fallback="cpu") (issue 38, deliver 1): a model GE's parser refuses runs on ONNX Runtime's CPU provider
only when asked, warned, with gert.Model's request API and gert's input errors; values as ONNX Runtime's."""

from __future__ import annotations

import asyncio

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper as oh

import gert
from gert.core.validate import InputError
from gert.cpu_model import CpuModel
from gert.errors import GertError


def string_model() -> bytes:
    """Text in, numbers out (Cast string -> float, then a Mul): GE's parser refuses the string tensor."""
    g = oh.make_graph(
        [oh.make_node("Cast", ["s"], ["x"], to=TP.FLOAT), oh.make_node("Mul", ["x", "x"], ["y"])],
        "t",
        [oh.make_tensor_value_info("s", TP.STRING, ["n", 2])],
        [oh.make_tensor_value_info("y", TP.FLOAT, ["n", 2])],
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString()


def relu_model() -> bytes:
    g = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["y"])],
        "r",
        [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 3])],
        [oh.make_tensor_value_info("y", TP.FLOAT, ["n", 3])],
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString()


def _text(rows: int) -> np.ndarray:
    return np.arange(rows * 2, dtype=np.float32).reshape(rows, 2).astype(str).astype(object)


def _ort(data: bytes, feed: dict) -> np.ndarray:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)[0]


def test_without_asking_gert_load_raises_ges_refusal():
    with pytest.raises(GertError, match="aclgrphParseONNX"):
        gert.load(string_model())


def test_asked_it_runs_on_onnx_runtimes_cpu_with_a_warning_and_models_api():
    data = string_model()
    with pytest.warns(UserWarning, match="fallback='cpu'.*CPUExecutionProvider"):
        model = gert.load(data, fallback="cpu")
    with model:
        assert isinstance(model, CpuModel)
        assert [(t.name, t.dtype, t.shape) for t in model.inputs] == [("s", np.dtype(object), ("n", 2))]
        for rows in (1, 3):
            np.testing.assert_array_equal(model.run({"s": _text(rows)})["y"], _ort(data, {"s": _text(rows)}))
        outs = model.run([{"s": _text(1)}, {"s": _text(2)}])
        assert [o["y"].shape for o in outs] == [(1, 2), (2, 2)]
        assert model.submit({"s": _text(2)}).result(30)["y"].shape == (2, 2)
        assert asyncio.run(model.run_async({"s": _text(1)}))["y"].shape == (1, 2)
        assert [r["y"].shape[0] for r in model.run_batch([{"s": _text(1)}, {"s": _text(4)}])] == [1, 4]
        assert model.stats()["runs"] >= 8 and model.warmup() == 0
        with pytest.raises(InputError, match="input 's': expected rank 2, got rank 1"):
            model.run({"s": np.array(["1"], object)})
        with pytest.raises(InputError, match=r"missing \['s'\], unexpected \['t'\]"):
            model.run({"t": _text(1)})
        with pytest.raises(GertError, match="device memory"):
            model.sequence()
        np.testing.assert_array_equal(model.run({"s": _text(2)})["y"], _ort(data, {"s": _text(2)}))  # still serving
    assert model.closed
    with pytest.raises(GertError, match="closed"):
        model.run({"s": _text(1)})


def test_a_model_ge_takes_loads_on_gert_even_when_fallback_is_allowed():
    with gert.load(relu_model(), fallback="cpu") as model:
        assert isinstance(model, gert.Model)


def test_other_load_errors_are_not_taken_over_and_bad_values_are_named():
    with pytest.raises(GertError, match="device 99 does not exist"):
        gert.load(string_model(), fallback="cpu", devices=(99,))
    with pytest.raises(GertError, match="fallback: expected None or 'cpu', got 'gpu'"):
        gert.load(relu_model(), fallback="gpu")
