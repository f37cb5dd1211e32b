"""Small generated models shared by the gert_triton unit and end-to-end tests (issue 5).

``seq_model``: two inputs with a batch axis and a symbolic non-batch axis, two outputs of two dtypes:
    a f32[B, S, 4], m i64[B, S] -> y f32[B, S] = ReduceSum(a, -1) * Cast(m),  c i64[B, S] = m + m
Integer-valued inputs make every output exact, so a result says exactly which request it came from.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from models import make_model, vi

SEQ_INPUTS = ("a", "m")
SEQ_OUTPUTS = ("y", "c")


def seq_model() -> bytes:
    nodes = [
        helper.make_node("ReduceSum", ["a", "last"], ["s"], keepdims=0),
        helper.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["s", "mf"], ["y"]),
        helper.make_node("Add", ["m", "m"], ["c"]),
    ]
    return make_model(
        nodes,
        [vi("a", np.float32, ["B", "S", 4]), vi("m", np.int64, ["B", "S"])],
        [vi("y", np.float32, ["B", "S"]), vi("c", np.int64, ["B", "S"])],
        [numpy_helper.from_array(np.array([-1], np.int64), "last")],
        name="seq",
    )


def seq_inputs(batch: int, s: int, uid: int) -> dict:
    """A request unique to ``uid``: small integers, exact in float32 through the sums."""
    rng = np.random.default_rng(uid)
    a = rng.integers(-50, 50, (batch, s, 4)).astype(np.float32) + uid
    m = rng.integers(1, 9, (batch, s)).astype(np.int64) + uid
    return {"a": a, "m": m}


def seq_expected(inputs: dict) -> dict:
    a, m = inputs["a"], inputs["m"]
    return {"y": (a.sum(-1, dtype=np.float32) * m.astype(np.float32)).astype(np.float32), "c": m + m}


def fixed_model() -> bytes:
    """No batch axis (first dims fixed): x f32[2, 3] -> y = x + x."""
    return make_model(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        [vi("x", np.float32, [2, 3])],
        [vi("y", np.float32, [2, 3])],
        name="fixed",
    )


def reduce_all_model() -> bytes:
    """A symbolic first input dim but a fixed first output dim, so not batchable as onnxruntime_backend decides:
    x f32[n, 4] -> total f32[1, 1] = ReduceSum(x, keepdims=1)."""
    return make_model(
        [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=1)],
        [vi("x", np.float32, ["n", 4])],
        [vi("total", np.float32, [1, 1])],
        name="reduce_all",
    )
