"""gert's shape inference without ONNX (gert/core/wire_graph.py, gert/core/shape_rules.py) against ONNX's own.

- The wire reader: every field shape inference reads equals what ``onnx`` parses, over ONNX's node test models, the
  PP-OCR models and generated ones (or the reader leaves the model to ONNX).
- The rules: ``shape_infer.infer`` of the serialized model (wire reader + rules, ONNX only for what they leave)
  against ``shape_infer.infer(proto, rules=False)`` (ONNX's per-node inference for every node): the same shapes and
  element types, or the same refusal (ShapeError), for generated nodes of every operator with a rule, for ONNX's
  node test models and the PP-OCR models at many sizes; and against ONNX Runtime's output shapes where it runs.
- A process that infers PP-OCR's shapes from bytes never imports ``onnx``.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from hypothesis import example, given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

import gert
from _helpers import run_python
from gert.core import shape_infer, shape_rules, wire_graph
from gert.core.skeleton import skeleton
from models import CLS, DET, REC, ppocr_model

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

    NODE_CASES = {c.name: c.model for c in collect_testcases(None)}


# ---- the wire reader ----------------------------------------------------------------------------------------------
def _same_tensor(w: wire_graph.WireTensor, p: onnx.TensorProto) -> None:
    assert (w.name, w.data_type, w.dims) == (p.name, p.data_type, tuple(p.dims))
    stripped = p.data_location == TensorProto.EXTERNAL
    assert w.external == stripped
    if not stripped:
        want = numpy_helper.to_array(p)
        got = w.to_array()
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def _same_graph(w: wire_graph.WireGraph, g: onnx.GraphProto) -> None:
    assert len(w.node) == len(g.node)
    for wn, pn in zip(w.node, g.node):
        assert (wn.op_type, wn.domain, wn.name) == (pn.op_type, pn.domain, pn.name)
        assert (wn.input, wn.output) == (list(pn.input), list(pn.output))
        assert wn.to_proto() == pn
        assert [a.name for a in wn.attribute] == [a.name for a in pn.attribute]
        for wa, pa in zip(wn.attribute, pn.attribute):
            assert (wa.type, wa.i, wa.s, wa.ints, wa.strings) == (pa.type, pa.i, pa.s, list(pa.ints), list(pa.strings))
            assert np.array_equal(np.float32(wa.f), np.float32(pa.f), equal_nan=True)
            assert np.array_equal(np.float32(wa.floats), np.float32(pa.floats), equal_nan=True)
            assert (wa.t is None) == (not pa.HasField("t"))
            if wa.t is not None:
                _same_tensor(wa.t, pa.t)
    assert len(w.initializer) == len(g.initializer)
    for wt, pt in zip(w.initializer, g.initializer):
        _same_tensor(wt, pt)
    for wv, pv in zip(w.input, g.input):
        tt = pv.type.tensor_type
        assert (wv.name, wv.elem_type) == (pv.name, tt.elem_type)
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
        assert wv.dims == (tuple(dims) if tt.HasField("shape") else None)
    assert [v.name for v in w.output] == [v.name for v in g.output]


def _read_or_none(data: bytes):
    try:
        return wire_graph.parse(data)
    except wire_graph.Unsupported:
        return None


def test_the_wire_reader_reads_what_onnx_parses_of_every_node_test_model():
    """ONNX's node test models (every operator's cases): the wire reader gives ONNX's fields of each model it
    takes, and leaves only models with subgraphs, sparse data or the like to ONNX."""
    read = left = 0
    for name, model in NODE_CASES.items():
        data = model.SerializeToString()
        w = _read_or_none(data)
        if w is None:
            left += 1
            continue
        read += 1
        proto = skeleton(data)
        assert w.ir_version == proto.ir_version, name
        assert [(o.domain, o.version) for o in w.opset_import] == [(o.domain, o.version) for o in proto.opset_import]
        _same_graph(w.graph, proto.graph)
    assert read > 10 * left, (read, left)


@pytest.mark.parametrize("name", [DET, REC, CLS])
def test_the_wire_reader_reads_the_ppocr_models_as_onnx_parses_their_skeletons(name):
    data = open(ppocr_model(name), "rb").read()
    w = wire_graph.parse(data)
    _same_graph(w.graph, skeleton(data).graph)
    assert w.ByteSize() == skeleton(data).ByteSize()
    assert not w.has_external()


def test_the_wire_reader_leaves_what_it_does_not_read_to_onnx():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "b", [], [y])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    model = helper.make_model(helper.make_graph([node], "g", [cond, x], [y]))
    with pytest.raises(wire_graph.Unsupported):
        wire_graph.parse(model.SerializeToString())
    # and shape_infer parses it with ONNX: the same answer as ONNX's inference
    got = shape_infer.infer(model.SerializeToString(), {"c": (), "x": (2,)})
    assert got.output_shapes == [(2,)]
    with pytest.raises(wire_graph.Unsupported):
        wire_graph.parse(b"\x0a\xff")  # a truncated field


# ---- the rules against ONNX's inference -----------------------------------------------------------------------------
def _outcome(model, dims: dict, rules: bool):
    try:
        r = shape_infer.infer(model, dims, rules=rules)
    except shape_infer.ShapeError:
        return "ShapeError"
    return (r.output_shapes, r.output_dims, r.output_elem, r.all_known)


def _assert_same_as_onnx(model: onnx.ModelProto, dims: dict):
    """gert's inference of the bytes equals ONNX's per-node inference of the parsed model; returns it."""
    want = _outcome(model, dims, rules=False)
    got = _outcome(model.SerializeToString(), dims, rules=True)
    assert got == want, (helper.printable_graph(model.graph), dims)
    return got


def _ort_shapes(model: onnx.ModelProto, dims: dict):
    """ONNX Runtime's output shapes for zero inputs of ``dims``, or None where it refuses the model or the run."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        feeds = {i.name: np.zeros(dims[i.name], _np_type(i.type)) for i in sess.get_inputs()}
        return [tuple(o.shape) for o in sess.run(None, feeds)]
    except Exception:  # noqa: BLE001 - a model or sizes ONNX Runtime refuses
        return None


def _np_type(ort_type: str):
    return {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}[ort_type]


def _one_node(op: str, inputs: list, attrs: dict, opset: int, consts: dict = (), n_out: int = 1) -> onnx.ModelProto:
    """A model of one ``op`` node: graph inputs ``inputs`` [(name, elem, rank)], constant inputs ``consts``
    {name: array} as initializers, every dim of the graph inputs symbolic in the file."""
    consts = dict(consts)
    names = [n for n, _, _ in inputs]
    g_inputs = [helper.make_tensor_value_info(n, e, [f"{n}{k}" for k in range(r)]) for n, e, r in inputs]
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    order = attrs.pop("_order", None) or [*names, *consts]
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, order, outs, **attrs)
    graph = helper.make_graph([node], "g", g_inputs, [helper.make_value_info(o, onnx.TypeProto()) for o in outs])
    graph.initializer.extend(inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


_dim = st.integers(1, 9)


@st.composite
def conv_cases(draw):
    n = draw(st.integers(1, 3))
    group = draw(st.sampled_from([1, 2]))
    c_in = group * draw(st.integers(1, 3))
    m = group * draw(st.integers(1, 3))
    kernel = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    x = [draw(st.integers(1, 3)), c_in + draw(st.sampled_from([0, 0, 0, 1]))] + draw(
        st.lists(st.integers(1, 12), min_size=n, max_size=n)
    )
    attrs: dict = {"group": group}
    if draw(st.booleans()):
        attrs["strides"] = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    if draw(st.booleans()):
        attrs["dilations"] = draw(st.lists(st.integers(1, 2), min_size=n, max_size=n))
    pad_kind = draw(st.sampled_from(["none", "pads", "VALID", "SAME_UPPER"]))
    if pad_kind == "pads":
        attrs["pads"] = draw(st.lists(st.integers(0, 2), min_size=2 * n, max_size=2 * n))
    elif pad_kind != "none":
        attrs["auto_pad"] = pad_kind
    if draw(st.booleans()):
        attrs["kernel_shape"] = kernel
    transpose = draw(st.booleans())
    w_shape = [c_in, m // group, *kernel] if transpose else [m, c_in // group, *kernel]
    if transpose and draw(st.booleans()):
        attrs["output_padding"] = [0] * n
    opset = draw(st.sampled_from([11, 13, 17]))
    return ("ConvTranspose" if transpose else "Conv"), x, w_shape, attrs, opset


@settings(max_examples=150)
@given(conv_cases())
def test_conv_and_conv_transpose_as_onnx_infers_them(case):
    op, x, w_shape, attrs, opset = case
    w = np.zeros(w_shape, np.float32)
    model = _one_node(op, [("x", TensorProto.FLOAT, len(x))], attrs, opset, {"w": w})
    got = _assert_same_as_onnx(model, {"x": x})
    if got != "ShapeError" and got[3]:
        ort = _ort_shapes(model, {"x": x})
        assert ort is None or ort == got[0], (ort, got)


@st.composite
def pool_cases(draw):
    op = draw(st.sampled_from(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"]))
    n = draw(st.integers(1, 3))
    x = [draw(_dim), draw(_dim)] + draw(st.lists(st.integers(1, 12), min_size=n, max_size=n))
    attrs: dict = {}
    if not op.startswith("Global"):
        attrs["kernel_shape"] = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
        if draw(st.booleans()):
            attrs["strides"] = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
        if draw(st.booleans()):
            attrs["pads"] = draw(st.lists(st.integers(0, 1), min_size=2 * n, max_size=2 * n))
        if draw(st.booleans()):
            attrs["ceil_mode"] = draw(st.integers(0, 1))
        if op == "MaxPool" and draw(st.booleans()):
            attrs["dilations"] = draw(st.lists(st.integers(1, 2), min_size=n, max_size=n))
    opset = draw(st.sampled_from([11, 12, 19, 22]))
    return op, x, attrs, opset


@settings(max_examples=120)
@given(pool_cases())
# found by this test: an axis shorter than its window beside one whose ceil count ONNX's inference gets wrong
@example(
    ("MaxPool", [1, 1, 1, 1, 2], {"kernel_shape": [1, 2, 1], "strides": [1, 1, 2], "pads": [0] * 6, "ceil_mode": 1}, 11)
)
# found by this test (CI, session 25): an axis shorter than its window, ceil_mode, version 22: ONNX's inference counts
# one window (its count rounded toward zero), ONNX Runtime none
@example(("MaxPool", [1, 1, 1, 1, 1], {"kernel_shape": [4, 1, 1], "strides": [3, 1, 1], "ceil_mode": 1}, 22))
def test_pools_as_onnx_runtime_computes_them(case):
    """Pools as ONNX's inference gives them, except with ceil_mode where the last window would start in the end
    padding: ONNX's inference counts it, ONNX Runtime's kernels (what the host NPU runs) and PyTorch do not, and the
    rule leaves that axis unknown (the graph's outputs are then allocated at execution). A shape the rules know is
    ONNX Runtime's where it runs the node; an axis they leave unknown is one where ONNX's inference is not."""
    op, x, attrs, opset = case
    model = _one_node(op, [("x", TensorProto.FLOAT, len(x))], attrs, opset)
    got = _outcome(model.SerializeToString(), {"x": x}, rules=True)
    want = _outcome(model, {"x": x}, rules=False)
    if not attrs.get("ceil_mode"):
        assert got == want
    if got == "ShapeError":
        return
    ort = _ort_shapes(model, {"x": x})
    if got[3]:
        assert ort is None or ort == got[0], (ort, got)
    elif got != want:  # an axis left unknown by the rule: ONNX's inference gave one the kernel does not compute
        assert ort is None or want[0] != ort, (ort, want)


def _one_pool(op: str, shape: list, opset: int, **attrs) -> bytes:
    """A model of one ``op`` pool node in ceil_mode over a float input ``x`` of the fixed ``shape`` (a static
    graph), its output's shape left to inference."""
    node = helper.make_node(op, ["x"], ["y"], ceil_mode=1, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


@pytest.mark.usefixtures("device")
def test_a_pool_whose_last_ceil_window_starts_in_the_padding_runs_as_onnx_runtime_runs_it():
    """AveragePool, ceil_mode 1, kernel 2, stride 2, end pad 1 over 2 values: ONNX's inference says 2 outputs, ONNX
    Runtime computes 1 (and refuses an output of either size handed to it). The static graph took ONNX's shape and
    its run failed as a device fault (AICORE exception); now the axis is unknown at compile time and the output is
    allocated at execution, as ONNX Runtime computes it."""
    model = _one_pool("AveragePool", [1, 1, 1, 2], 11, kernel_shape=[1, 2], strides=[1, 2], pads=[0, 0, 0, 1])
    x = np.array([[[[1.0, 3.0]]]], np.float32)
    (want,) = _ort_run(model, {"x": x})
    with gert.load(model) as m:
        got = m.run({"x": x})["y"]
    assert got.shape == want.shape == (1, 1, 1, 1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.usefixtures("device")
def test_a_pool_window_longer_than_its_axis_in_ceil_mode_runs_as_onnx_runtime_runs_it():
    """MaxPool version 22, ceil_mode 1, kernel 3, stride 2 over 1 value: ONNX's inference says 1 output (its
    window count rounded toward zero), ONNX Runtime computes none. The static graph took ONNX's shape and its run
    failed as a device fault (AICORE exception, ONNX Runtime refusing the output it was handed); now the axis is
    unknown at compile time and the empty output is allocated at execution."""
    model = _one_pool("MaxPool", [1, 1, 2, 1], 22, kernel_shape=[1, 3], strides=[1, 2])
    x = np.array([[[[1.0], [3.0]]]], np.float32)
    (want,) = _ort_run(model, {"x": x})
    with gert.load(model, cann_ops="off") as m:  # (a stock CANN parser lacks MaxPool-22: not this test's point)
        got = m.run({"x": x})["y"]
    assert got.shape == want.shape == (1, 1, 2, 0)


def _ort_run(model: bytes, feeds: dict) -> list:
    import onnxruntime as ort

    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


_shape = st.lists(_dim, min_size=1, max_size=4)


def _one_input(draw, ops: list, opsets: list) -> tuple:
    """(op, opset, x's dims, inputs, dims, attrs, consts) of a case whose first input is a float ``x`` of drawn dims."""
    op, opset, x = draw(st.sampled_from(ops)), draw(st.sampled_from(opsets)), draw(_shape)
    return op, opset, x, [("x", TensorProto.FLOAT, len(x))], {"x": x}, {}, {}


@st.composite
def layout_cases(draw):
    """Concat, Reshape, Transpose, Squeeze, Unsqueeze, Slice, Flatten, Gather, Cast: shapes, attributes and
    constant operands drawn, some of them not fitting."""
    ops = ["Concat", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice", "Flatten", "Gather", "Cast"]
    op, opset, x, inputs, dims, attrs, consts = _one_input(draw, ops, [11, 13, 14, 18])
    r = len(x)
    if op == "Concat":
        y = list(x)
        axis = draw(st.integers(-r - 1, r))
        if -r <= axis < r:
            y[axis] = draw(_dim)
        if draw(st.booleans()):
            y[draw(st.integers(0, r - 1))] += 1  # may not fit
        inputs.append(("z", TensorProto.FLOAT, r))
        dims["z"] = y
        attrs["axis"] = axis
    elif op == "Reshape":
        total = int(np.prod(x))
        target = [d for d in draw(st.lists(st.sampled_from([-1, 0, 1, 2, 3, total]), min_size=1, max_size=4))]
        consts["shape"] = np.array(target, np.int64)
        if opset >= 14 and draw(st.booleans()):
            attrs["allowzero"] = 1
    elif op == "Transpose":
        if draw(st.booleans()):
            attrs["perm"] = draw(st.permutations(range(r)))
    elif op in ("Squeeze", "Unsqueeze"):
        axes = draw(st.lists(st.integers(-r - 1, r), max_size=2, unique=True))
        if op == "Squeeze":
            x = [1 if draw(st.booleans()) else d for d in x]
            dims["x"] = x
        if axes or op == "Unsqueeze":
            if opset >= 13:
                consts["axes"] = np.array(axes, np.int64)
            elif axes:
                attrs["axes"] = axes
    elif op == "Slice":
        k = draw(st.integers(1, r))
        consts["starts"] = np.array(draw(st.lists(st.integers(-12, 12), min_size=k, max_size=k)), np.int64)
        consts["ends"] = np.array(
            draw(st.lists(st.sampled_from([-12, -1, 0, 1, 3, 7, 12, 2**62]), min_size=k, max_size=k)), np.int64
        )
        if draw(st.booleans()):
            consts["axes"] = np.array(draw(st.permutations(range(-r, 0)))[:k], np.int64)
        if "axes" in consts and draw(st.booleans()):
            consts["steps"] = np.array(draw(st.lists(st.sampled_from([-3, -1, 1, 2]), min_size=k, max_size=k)))
            consts["steps"] = consts["steps"].astype(np.int64)
    elif op == "Flatten":
        attrs["axis"] = draw(st.integers(-r, r))
    elif op == "Gather":
        inputs.append(("i", TensorProto.INT64, 2))
        dims["i"] = draw(st.lists(st.integers(1, 3), min_size=2, max_size=2))
        attrs["axis"] = draw(st.integers(-r, r - 1))
    elif op == "Cast":
        attrs["to"] = draw(st.sampled_from([TensorProto.INT64, TensorProto.FLOAT16, TensorProto.DOUBLE]))
    return op, inputs, dims, attrs, consts, opset


def _check_case(case, against_ort: bool) -> None:
    """A generated one-node case: gert's inference equals ONNX's, and ONNX Runtime's output shapes where it runs."""
    op, inputs, dims, attrs, consts, opset = case
    model = _one_node(op, inputs, dict(attrs), opset, consts)
    got = _assert_same_as_onnx(model, dims)
    if against_ort and got != "ShapeError" and got[3]:
        ort = _ort_shapes(model, dims)
        assert ort is None or ort == got[0], (ort, got)


@settings(max_examples=300)
@given(layout_cases())
def test_layout_operators_as_onnx_infers_them(case):
    _check_case(case, against_ort=False)


@st.composite
def matmul_reduce_resize_cases(draw):
    ops = ["MatMul", "ReduceMean", "ReduceSum", "ReduceMax", "Resize"]
    op, opset, x, inputs, dims, attrs, consts = _one_input(draw, ops, [11, 13, 18])
    r = len(x)
    if op == "MatMul":
        y = draw(st.lists(_dim, min_size=1, max_size=4))
        if draw(st.booleans()) and len(y) >= 2:
            y[-2] = x[-1]
        if draw(st.booleans()):
            y = list(x[:-2]) + [x[-1], draw(_dim)]
        inputs.append(("z", TensorProto.FLOAT, len(y)))
        dims["z"] = y
    elif op.startswith("Reduce"):
        axes = draw(st.lists(st.integers(-r - 1, r), max_size=r, unique=True))
        if draw(st.booleans()):
            attrs["keepdims"] = draw(st.integers(0, 1))
        takes_input = opset >= (13 if op == "ReduceSum" else 18)
        if takes_input:
            if axes or draw(st.booleans()):
                consts["axes"] = np.array(axes, np.int64)
            if draw(st.booleans()):
                attrs["noop_with_empty_axes"] = draw(st.integers(0, 1))
        elif axes:
            attrs["axes"] = axes
    else:
        consts["roi"] = np.array([], np.float32)
        if draw(st.booleans()):
            consts["scales"] = np.array(
                draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 1.7, 3.3]), min_size=r, max_size=r)), np.float32
            )
        else:
            consts["scales"] = np.array([], np.float32)
            consts["sizes"] = np.array(draw(st.lists(_dim, min_size=r, max_size=r)), np.int64)
    return op, inputs, dims, attrs, consts, opset


@settings(max_examples=200)
@given(matmul_reduce_resize_cases())
def test_matmul_reductions_and_resize_as_onnx_infers_them(case):
    _check_case(case, against_ort=case[0] != "Resize")


def _input_dims(model: onnx.ModelProto):
    """The node test model's declared input dims, if every one is a known size."""
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for v in model.graph.input:
        if v.name in inits:
            continue
        if not v.type.HasField("tensor_type") or not v.type.tensor_type.HasField("shape"):
            return None
        dims = [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
        if any(d is None for d in dims):
            return None
        out[v.name] = dims
    return out


def test_every_node_test_model_is_inferred_as_onnx_infers_it():
    """ONNX's node test models at their declared sizes: gert's inference of the bytes equals ONNX's per-node
    inference, operator by operator (those with a rule of gert's and the rest, which go to ONNX)."""
    checked = ruled = 0
    for model in NODE_CASES.values():
        dims = _input_dims(model)
        if dims is None:
            continue
        _assert_same_as_onnx(model, dims)
        checked += 1
        ruled += any(n.op_type in shape_rules.RULES for n in model.graph.node)
    assert checked > 1000 and ruled > 200, (checked, ruled)


@pytest.mark.parametrize(
    "name,sizes",
    [
        (DET, [(1, 3, 32, 32), (1, 3, 640, 640), (2, 3, 224, 288), (1, 3, 96, 1280), (4, 3, 40, 72)]),
        (REC, [(1, 3, 48, 320), (4, 3, 48, 96), (2, 3, 48, 1000), (1, 3, 48, 8), (3, 3, 48, 13)]),
        (CLS, [(1, 3, 48, 192), (8, 3, 48, 64), (3, 3, 48, 600), (1, 3, 48, 7)]),
    ],
)
def test_the_ppocr_models_are_inferred_as_onnx_infers_them(name, sizes):
    proto = onnx.load(ppocr_model(name))
    for size in sizes:
        got = _assert_same_as_onnx(proto, {"x": size})
        assert got[3], (size, got)  # every shape known: GE compiles it static


def test_inferring_the_ppocr_models_from_bytes_imports_no_onnx():
    """A Triton stub's compiles (the host NPU's shape inference of a static graph, its predicted output shapes):
    ~15 MB of resident memory per process saved (issue 41)."""
    paths = [(ppocr_model(n), h) for n, h in ((DET, 64), (REC, 48), (CLS, 48))]
    out = run_python(
        "import sys\n"
        "from gert.core import shape_infer\n"
        f"for p, h in {paths!r}:\n"
        "    data = open(p, 'rb').read()\n"
        "    for w in (32, 96, 320):\n"
        "        r = shape_infer.infer(data, {'x': (2, 3, h, w)})\n"
        "        assert r.all_known, (p, w, r)\n"
        "print(sorted(m for m in sys.modules if m == 'onnx' or m.startswith('onnx.')))\n"
    )
    assert out.strip().splitlines()[-1] == "[]", out
