"""GE's compile-time folding (gert/core/shape_infer.py) computes what ONNX Runtime computes.

A fold that differs from ONNX Runtime gives a static graph whose output shapes differ from the run's: a good request
then fails on the device (found by the row fuzzer: Slice with a negative step from below the axis, GlobalMaxPool on
rank 3). Each fold here is checked against ONNX Runtime on the same constants.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from gert.core import shape_infer


def _folded_and_ort(node, consts: dict, opset: int = 18):
    out = node.output[0]
    g = helper.make_graph(
        [node],
        "g",
        [],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    folded = shape_infer.trace(m, {}).values.get(out)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
    return folded, want


BIG = 2**62


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(-8, 8) | st.sampled_from([BIG, -BIG]),
    st.integers(-8, 8) | st.sampled_from([BIG, -BIG]),
    st.sampled_from([-3, -2, -1, 1, 2, 3]),
)
def test_slice_folds_as_onnx_runtime_slices(n, start, end, step):
    data = np.arange(n, dtype=np.float32)
    node = helper.make_node("Slice", ["d", "s", "e", "a", "t"], ["y"])
    folded, want = _folded_and_ort(
        node, {"d": data, "s": np.array([start]), "e": np.array([end]), "a": np.array([0]), "t": np.array([step])}
    )
    assert folded is not None and folded.shape == want.shape and np.array_equal(folded, want), (folded, want)


def test_global_max_pool_folds_with_every_spatial_axis_1():
    for shape in ((2, 3, 4), (2, 3, 4, 5), (2, 3, 2, 2, 2)):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        folded, want = _folded_and_ort(helper.make_node("GlobalMaxPool", ["x"], ["y"]), {"x": x})
        assert folded.shape == want.shape and np.array_equal(folded, want), shape
