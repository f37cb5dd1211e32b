"""Models of every shape class gert_triton's config generation must handle (issue 22, issue 31 T1-T8), each with
what `gert repo init` takes for it and one request that exercises it. Used by test_triton_config.py (fake pb_utils)
and test_triton_config_e2e.py (the real server).

A ``Case``: ONNX bytes, the repo-init keyword arguments (parameters / sequence), one request (model inputs, numpy,
each with Triton's batch axis first where the config has one) and the expected outputs (numpy, the same layout).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto, helper

from models import _const, make_model, vi

HID = 4


def relu_model(dims=("N", 4), dtype=np.float32, name: str = "relu") -> bytes:
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [vi("x", dtype, list(dims))], [vi("y", dtype, list(dims))], name=name
    )


def two_out_model() -> bytes:
    """x [N, 4] -> y = Relu(x), z = Neg(x)."""
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["z"])],
        [vi("x", np.float32, ["N", 4])],
        [vi("y", np.float32, ["N", 4]), vi("z", np.float32, ["N", 4])],
        name="two_out",
    )


def unnamed_model() -> bytes:
    """Dims with no name in the file (dim_value 0 / no dim_param): x [?, 4] -> y = x * 2."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])
    return make_model([helper.make_node("Add", ["x", "x"], ["y"])], [x], [y], name="unnamed")


def axis1_model() -> bytes:
    """The batch on axis 1: x [T, N, 4] -> y = x + x (batch_dim 'N')."""
    return make_model(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        [vi("x", np.float32, [3, "N", 4])],
        [vi("y", np.float32, [3, "N", 4])],
        name="axis1",
    )


def stateful_sr_model(seed: int = 5) -> bytes:
    """A recurrent step with a 0-d sample rate shared by the batch (issue 22's fourth repro):
    input [N, 4], sr [] (0-d), state [1, N, H] -> output [N, H], stateN [1, N, H];
    stateN = tanh(input @ W * sr + state @ U), output = Squeeze(stateN, 0)."""
    rng = np.random.default_rng(seed)
    w = _const("W", (rng.standard_normal((4, HID)) * 0.5).astype(np.float32))
    u = _const("U", (rng.standard_normal((HID, HID)) * 0.5).astype(np.float32))
    axes = _const("ax0", np.array([0], np.int64))
    nodes = [
        helper.make_node("MatMul", ["input", "W"], ["xw"]),
        helper.make_node("Mul", ["xw", "sr"], ["xs"]),
        helper.make_node("MatMul", ["state", "U"], ["hu"]),
        helper.make_node("Add", ["xs", "hu"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["stateN"]),
        helper.make_node("Squeeze", ["stateN", "ax0"], ["output"]),
    ]
    return make_model(
        nodes,
        [vi("input", np.float32, ["N", 4]), vi("sr", np.float32, []), vi("state", np.float32, [1, "N", HID])],
        [vi("output", np.float32, ["N", HID]), vi("stateN", np.float32, [1, "N", HID])],
        [w, u, axes],
        name="sr_step",
    )


def colon_gru_model(seed: int = 7) -> bytes:
    """tf2onnx-style names with ':' : x:0 [N, 4], h:0 [1, N, H] -> y:0 [N, H], h_out:0 [1, N, H]."""
    rng = np.random.default_rng(seed)
    w = _const("W", (rng.standard_normal((4, HID)) * 0.5).astype(np.float32))
    u = _const("U", (rng.standard_normal((HID, HID)) * 0.5).astype(np.float32))
    axes = _const("ax0", np.array([0], np.int64))
    nodes = [
        helper.make_node("MatMul", ["x:0", "W"], ["xw"]),
        helper.make_node("MatMul", ["h:0", "U"], ["hu"]),
        helper.make_node("Add", ["xw", "hu"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_out:0"]),
        helper.make_node("Squeeze", ["h_out:0", "ax0"], ["y:0"]),
    ]
    return make_model(
        nodes,
        [vi("x:0", np.float32, ["N", 4]), vi("h:0", np.float32, [1, "N", HID])],
        [vi("y:0", np.float32, ["N", HID]), vi("h_out:0", np.float32, [1, "N", HID])],
        [w, u, axes],
        name="colon_gru",
    )


def nonzero_model() -> bytes:
    """A value-dependent output: x [N, 4] -> idx = NonZero(x) [2, ?] (int64)."""
    return make_model(
        [helper.make_node("NonZero", ["x"], ["idx"])],
        [vi("x", np.float32, ["N", 4])],
        [vi("idx", np.int64, [2, "k"])],
        name="nonzero",
    )


def bf16_model() -> bytes:
    """BF16: x bf16 [N, 4] -> y = bf16(float(x) + float(x)) (ONNX Runtime's CPU Add has no bfloat16 kernel)."""
    x = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.BFLOAT16, ["N", 4])
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["xf", "xf"], ["s"]),
        helper.make_node("Cast", ["s"], ["y"], to=TensorProto.BFLOAT16),
    ]
    return make_model(nodes, [x], [y], name="bf16")


@dataclass
class Case:
    name: str
    onnx: bytes
    init: dict  # init_repo keyword arguments (parameters, sequence, max_batch_size)
    inputs: dict  # one request, as a client sends it
    expected: dict  # its outputs, as a client gets them
    sequence: bool = False  # send with sequence_id / start / end
    note: str = ""
    datatypes: dict = field(default_factory=dict)  # input name -> Triton datatype where numpy's is not it


def _ort(model: bytes, feeds: dict) -> list:
    import onnxruntime as ort

    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def _sr_expected(x: np.ndarray, sr: float) -> np.ndarray:
    """One step from a zero state: ONNX Runtime on the model."""
    return _ort(
        stateful_sr_model(),
        {"input": x, "sr": np.array(sr, np.float32), "state": np.zeros((1, x.shape[0], HID), np.float32)},
    )[0]


def _colon_expected(x: np.ndarray) -> np.ndarray:
    return _ort(colon_gru_model(), {"x:0": x, "h:0": np.zeros((1, x.shape[0], HID), np.float32)})[0]


def shape_cases() -> list:
    """One case per shape class: 0-d inputs (with state and a batch on axis 1), unnamed dims, batch on axis 1,
    state with ':' names, value-dependent outputs, BF16."""
    x = np.array([[-1, 2, -3, 4]], np.float32)
    x3 = np.arange(12, dtype=np.float32).reshape(1, 3, 4) - 6
    xs = np.array([[0.5, -1, 2, 0.25]], np.float32)
    nz = np.array([[0, 1, 0, 2], [3, 0, 0, 0]], np.float32)
    return [
        Case(
            "sr_state",
            stateful_sr_model(),
            {"sequence": {"state": {"state": "stateN"}, "batch_dim": ["input:0", "state:1"]}},
            {"input": xs, "sr": np.array([[2.0]], np.float32)},
            {"output": _sr_expected(xs, 2.0)},
            sequence=True,
            note="0-d input + state with its batch on axis 1 (issue 22)",
        ),
        Case("unnamed", unnamed_model(), {}, {"x": x}, {"y": x + x}, note="unnamed dims"),
        Case(
            "axis1",
            axis1_model(),
            {"parameters": {"batch_dim": "N"}},
            {"x": x3},
            {"y": x3 + x3},
            note="batch on axis 1 (Triton's batch axis moved there)",
        ),
        Case(
            "colon_state",
            colon_gru_model(),
            {"sequence": {"state": {"h:0": "h_out:0"}, "batch_dim": "N"}},
            {"x:0": xs},
            {"y:0": _colon_expected(xs)},
            sequence=True,
            note="state, tf2onnx ':0' names (T5)",
        ),
        Case(
            "nonzero",
            nonzero_model(),
            {},
            {"x": nz},
            {"idx": np.stack(np.nonzero(nz)).astype(np.int64)},
            note="value-dependent output: not batchable, max_batch_size 0",
        ),
        Case("bf16", bf16_model(), {}, {"x": x}, {"y": x + x}, datatypes={"x": "BF16"}, note="BF16 (T6)"),
    ]


def sequence_config(case: Case) -> dict | None:
    return case.init.get("sequence")
