"""GE's compile-time folding (gert/core/shape_infer.py) computes what ONNX Runtime computes.

A fold that differs from ONNX Runtime gives a static graph whose output shapes differ from the run's: a good request
then fails on the device (found by the row fuzzer: Slice with a negative step from below the axis, GlobalMaxPool on
rank 3). Each fold here is checked against ONNX Runtime on the same constants.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from hypothesis import assume, given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from gert.core import folds, shape_infer


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


# ---- the folds done without onnx.reference (gert/core/folds.py DIRECT) --------------------------------------------
def _reference(node, ins: list, opset: int):
    """onnx.reference's outputs for ``node`` on ``ins``, or the exception it raised."""
    from onnx.reference import ReferenceEvaluator

    try:
        return ReferenceEvaluator(node, opsets={"": opset}).run(None, {i: v for i, v in zip(node.input, ins) if i})
    except Exception as e:  # noqa: BLE001 - the failure is the answer
        return e


def _same_as_reference(node, ins: list, opset: int) -> None:
    want = _reference(node, ins, opset)
    try:
        got = folds.fold(node, ins, opset)
    except Exception as e:  # noqa: BLE001 - must fail where the reference fails
        assert isinstance(want, Exception), (node.op_type, opset, e, want)
        return
    if got is None:  # left to onnx.reference: the same by construction
        return
    assert not isinstance(want, Exception), (node.op_type, opset, got, want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape, (node.op_type, g, w)
        assert np.array_equal(g, w), (node.op_type, g, w)


SMALL = st.lists(st.integers(-3, 5), min_size=0, max_size=4)
INT_DTYPES = st.sampled_from([np.int64, np.int32, np.float32, np.bool_, np.uint8, np.float16])


@settings(max_examples=200, deadline=None)
@given(SMALL, INT_DTYPES, st.sampled_from(sorted(folds._CAST_TO)), st.sampled_from([13, 19, 21]))
def test_cast_folds_as_onnx_reference(values, dtype, to, opset):
    _same_as_reference(helper.make_node("Cast", ["x"], ["y"], to=to), [np.array(values).astype(dtype)], opset)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=3),
    st.integers(-3, 2),
    st.sampled_from([np.int64, np.float32]),
    st.booleans(),
)
def test_concat_folds_as_onnx_reference(shapes, axis, dtype, scalar):
    ins = [np.arange(a * b, dtype=dtype).reshape(a, b) for a, b in shapes]
    if scalar:
        ins[0] = np.array(1, dtype)  # a 0-d input: the reference refuses it
    names = [f"x{i}" for i in range(len(ins))]
    _same_as_reference(helper.make_node("Concat", names, ["y"], axis=axis), ins, 13)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([(2, 3, 4), (6,), (1, 0, 3), ()]),
    st.lists(st.integers(-1, 6), min_size=0, max_size=4),
    st.sampled_from([0, 1]),
    st.sampled_from([5, 13, 14, 19]),
)
def test_reshape_folds_as_onnx_reference(shape, target, allowzero, opset):
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    node = helper.make_node("Reshape", ["x", "s"], ["y"], **({"allowzero": allowzero} if opset >= 14 else {}))
    _same_as_reference(node, [data, np.array(target, np.int64)], opset)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([(1, 3, 1), (2,), (), (1,)]),
    st.lists(st.integers(-4, 3), min_size=0, max_size=3),
    st.sampled_from(["Squeeze", "Unsqueeze"]),
    st.sampled_from([11, 13, 21]),
    st.booleans(),
)
def test_squeeze_unsqueeze_fold_as_onnx_reference(shape, axes, op, opset, given_axes):
    data = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    if opset < 13:  # axes an attribute: onnx.reference runs a lone node at the latest opset, so ONNX Runtime decides
        rank = data.ndim + (len(axes) if op == "Unsqueeze" else 0)
        valid = [a + rank if a < 0 else a for a in axes if -rank <= a < rank]
        assume(len(set(valid)) == len(axes))  # axes in range, none twice (ONNX Runtime takes a repeated one)
        assume(op == "Unsqueeze" or all(data.shape[a] == 1 for a in valid))
        node = helper.make_node(op, ["x"], ["y"], **({"axes": axes} if given_axes and axes else {}))
        _same_as_ort(node, [data], opset)
        return
    node = helper.make_node(op, ["x", "a"] if given_axes else ["x"], ["y"])
    _same_as_reference(node, [data, np.array(axes, np.int64)] if given_axes else [data], opset)


def _same_as_ort(node, ins: list, opset: int) -> None:
    """The fold (through shape_infer.trace) equals ONNX Runtime's run of the node on the same constants; a node
    ONNX Runtime refuses is not folded."""
    consts = [numpy_helper.from_array(v, n) for n, v in zip(node.input, ins)]
    out = helper.make_tensor_value_info(node.output[0], TensorProto.INT64, None)
    m = helper.make_model(
        helper.make_graph([node], "g", [], [out], consts), opset_imports=[helper.make_opsetid("", opset)]
    )
    m.ir_version = 6
    try:
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
    except Exception:  # noqa: BLE001 - ONNX Runtime refuses the node: no fold either
        want = None
    folded = shape_infer.trace(m, {}).values.get(node.output[0])
    if want is None:
        assert folded is None, (node, folded)
    else:
        assert folded is not None and folded.shape == want.shape and np.array_equal(folded, want), (folded, want)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([(4,), (3, 2), (2, 2, 2)]),
    st.lists(st.integers(-4, 4), min_size=0, max_size=3),
    st.integers(-3, 2),
    st.booleans(),
    st.sampled_from([np.int64, np.int32, np.float64]),
)
def test_gather_folds_as_onnx_reference(shape, indices, axis, scalar, itype):
    data = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    idx = np.array(indices[0] if scalar and indices else indices, itype)
    _same_as_reference(helper.make_node("Gather", ["x", "i"], ["y"], axis=axis), [data, idx], 13)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["Add", "Sub", "Mul", "Identity"]),
    st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=3),
    st.lists(st.integers(-5, 5), min_size=0, max_size=3),
    st.sampled_from([(np.int64, np.int64), (np.int32, np.int32), (np.float32, np.float32), (np.int64, np.int32)]),
)
def test_arithmetic_folds_as_onnx_reference(op, a, b, dtypes):
    x, y = np.array(a).astype(dtypes[0]), np.array(b if b else 3).astype(dtypes[1])  # [] -> a 0-d operand
    node = helper.make_node(op, ["x"] if op == "Identity" else ["x", "y"], ["out"])
    with np.errstate(over="ignore"):
        _same_as_reference(node, [x] if op == "Identity" else [x, y], 17)


def _shape_chain_model() -> bytes:
    """Exporters' shape computation on a dynamic input: Shape -> Gather / Slice -> Cast -> Unsqueeze -> Concat ->
    Reshape, and Squeeze / Identity / Mul on the way (PP-OCR's rec and cls fold such chains)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    c = {
        "zero": np.array(0, np.int64),
        "s0": np.array([1], np.int64),
        "s1": np.array([3], np.int64),
        "ax": np.array([0], np.int64),
        "two": np.array([2], np.int64),
        "m1": np.array([-1], np.int64),
    }
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Slice", ["shp", "s0", "s1"], ["cw"]),
        helper.make_node("Cast", ["cw"], ["cwf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["cwf"], ["cwi"], to=TensorProto.INT64),
        helper.make_node("Identity", ["cwi"], ["cw2"]),
        helper.make_node("Squeeze", ["n1", "ax"], ["n0"]),
        helper.make_node("Unsqueeze", ["n0", "ax"], ["n2"]),
        helper.make_node("Mul", ["n2", "two"], ["n3"]),
        helper.make_node("Sub", ["n3", "n2"], ["n4"]),
        helper.make_node("Add", ["n4", "zero"], ["n5"]),
        helper.make_node("Concat", ["n5", "m1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    g = helper.make_graph(nodes, "chain", [x], [y], [numpy_helper.from_array(v, k) for k, v in c.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_shape_chain_loads_without_onnx_reference(tmp_path):
    """A model whose folds are all direct ones loads (gert.load: planning, compiles) in a fresh process that never
    imports onnx.reference (12 MB a Triton stub would keep); its shapes are folded, not left unknown."""
    import subprocess
    import sys

    path = tmp_path / "chain.onnx"
    path.write_bytes(_shape_chain_model())
    code = (
        "import sys, numpy as np, gert\n"
        "from gert.core import shape_infer\n"
        f"m = gert.load({str(path)!r}, max_batch=4)\n"
        "y = m.run({'x': np.ones((2, 3, 5), np.float32)})['y']\n"
        "assert y.shape == (2, 15), y.shape\n"
        "import onnx\n"
        f"r = shape_infer.infer(onnx.load({str(path)!r}), {{'x': (2, 3, 5)}})\n"
        "assert r.all_known and r.output_shapes == [(2, 15)], r\n"
        "m.close()\n"
        "print('REFERENCE', 'onnx.reference' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "REFERENCE False" in r.stdout, r.stdout
