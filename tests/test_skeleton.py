"""A model's skeleton (gert/core/skeleton.py): the shape work at load reads a model without its weights' bytes, and
learns from it exactly what it learns from the whole model (issue 28: host memory)."""

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import numpy_helper

from gert.core import onnx_io, shape_infer
from gert.core.skeleton import KEPT_ELEMENTS, is_skeleton_tensor, skeleton, strip
from gert.core.skeleton_wire import Unsupported, strip_bytes
from models import CLS, DET, REC, ppocr_model


def _weights_model() -> onnx.ModelProto:
    """x [N, 8, H, W] -> Conv (a 64x8x3x3 weight: 4608 elements) -> ReduceMean over H, W -> MatMul by a Constant node
    (64x100) -> Reshape by a small shape initializer to [N, 10, 10]; plus an If whose branch holds a large Constant
    (never taken: the condition is a constant)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.random((64, 8, 3, 3), dtype=np.float32), "w")
    shape = numpy_helper.from_array(np.array([-1, 10, 10], np.int64), "shape")
    cond = numpy_helper.from_array(np.array(True), "cond")
    big = oh.make_node("Constant", [], ["m"], value=numpy_helper.from_array(rng.random((64, 100), dtype=np.float32)))
    branch_const = oh.make_node(
        "Constant", [], ["b"], value=numpy_helper.from_array(rng.random((5000,), dtype=np.float32))
    )
    then_g = oh.make_graph(
        [oh.make_node("Identity", ["z"], ["t"])],
        "then",
        [],
        [oh.make_tensor_value_info("t", onnx.TensorProto.FLOAT, None)],
    )
    else_g = oh.make_graph(
        [branch_const, oh.make_node("Mul", ["z", "b0"], ["e"]), oh.make_node("Constant", [], ["b0"], value_float=1.0)],
        "else",
        [],
        [oh.make_tensor_value_info("e", onnx.TensorProto.FLOAT, None)],
    )
    nodes = [
        oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        oh.make_node("ReduceMean", ["c"], ["r"], axes=[2, 3], keepdims=0),
        big,
        oh.make_node("MatMul", ["r", "m"], ["p"]),
        oh.make_node("Reshape", ["p", "shape"], ["z"]),
        oh.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    g = oh.make_graph(
        nodes,
        "weights",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8, "H", "W"])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [w, shape, cond],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _constants(graph: onnx.GraphProto) -> dict:
    """name -> TensorProto of every initializer and Constant value, subgraphs included."""
    out = {t.name: t for t in graph.initializer}
    for n in graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                out[n.output[0]] = a.t
            elif a.type == onnx.AttributeProto.GRAPH:
                out.update(_constants(a.g))
    return out


def test_strip_drops_the_data_of_large_constants_only():
    m = _weights_model()
    before = {k: (t.data_type, list(t.dims), numpy_helper.to_array(t)) for k, t in _constants(m.graph).items()}
    assert strip(m) == 3  # the Conv weight, the MatMul Constant, the branch's Constant
    after = _constants(m.graph)
    assert set(after) == set(before)
    for name, t in after.items():
        dtype, dims, value = before[name]
        assert (t.data_type, list(t.dims)) == (dtype, dims), name  # the type shape work reads stays
        if value.size > KEPT_ELEMENTS:
            assert is_skeleton_tensor(t) and not t.raw_data and not t.float_data, name
            # a reader of its values is told (here onnx's checker error), never given an empty tensor
            with pytest.raises(Exception):  # noqa: B017 - any error will do
                numpy_helper.to_array(t)
        else:
            assert not is_skeleton_tensor(t), name
            np.testing.assert_array_equal(numpy_helper.to_array(t), value)
    assert strip(m) == 0  # stripped once


def test_a_skeleton_holds_no_weights_and_leaves_the_model_as_it_is():
    m = _weights_model()
    full = m.SerializeToString()
    small = skeleton(full)
    assert small.ByteSize() < 4096 < len(full) // 10
    assert skeleton(m).ByteSize() == small.ByteSize()
    assert m.SerializeToString() == full  # a ModelProto given is not stripped in place


def test_the_model_read_at_load_is_a_skeleton():
    """gert.load keeps the ModelProto of onnx_io.read for its shape work (gert/model.py): without its weights."""
    full = _weights_model().SerializeToString()
    read = onnx_io.read(full)
    assert read.proto.ByteSize() < len(full) // 10
    assert [v.name for v in read.proto.graph.input] == ["x"]


def test_shape_work_on_a_skeleton_learns_what_the_full_model_tells():
    m = _weights_model()
    small = skeleton(m)
    axes = {("x", 0): "batch", ("x", 2): "H", ("x", 3): "W"}
    assert onnx_io.output_dims(small, axes) == onnx_io.output_dims(m, axes)
    assert onnx_io.output_dims(small, axes)["y"] == ("batch", 10, 10)
    for dims in ((2, 8, 5, 7), (1, 8, 32, 3)):
        a, b = shape_infer.infer(m, {"x": dims}), shape_infer.infer(small, {"x": dims})
        assert (a.output_dims, a.all_known, a.unknown) == (b.output_dims, b.all_known, b.unknown)
        assert a.output_dims == [[dims[0], 10, 10]] or a.output_dims == [(dims[0], 10, 10)]


def test_shape_work_on_the_ppocr_det_skeleton_learns_what_the_full_model_tells():
    with open(ppocr_model(DET), "rb") as f:
        data = f.read()
    full, small = onnx.load_from_string(data), skeleton(data)
    assert small.ByteSize() < len(data) // 10  # its many small constants (batch norms) stay
    axes = {("x", 0): "batch", ("x", 2): "H", ("x", 3): "W"}
    assert onnx_io.output_dims(small, axes) == onnx_io.output_dims(full, axes)
    a, b = shape_infer.infer(full, {"x": (1, 3, 96, 160)}), shape_infer.infer(small, {"x": (1, 3, 96, 160)})
    assert (a.output_dims, a.all_known) == (b.output_dims, b.all_known)
    assert a.all_known


def _ppocr_bytes() -> dict:
    out = {}
    for name in (DET, CLS, REC):
        path = ppocr_model(name)
        if path is not None:
            with open(path, "rb") as f:
                out[name] = f.read()
    return out


def test_the_skeleton_cut_from_bytes_is_the_one_strip_makes_of_the_whole_model():
    """skeleton_wire.strip_bytes (no parse of the weights) gives the very bytes of ``strip`` on the parsed model:
    initializers, Constant nodes and a subgraph's Constant, small constants kept, for the test model and PP-OCR."""
    models = {"weights": _weights_model().SerializeToString(), **_ppocr_bytes()}
    for name, data in models.items():
        small, n = strip_bytes(data, KEPT_ELEMENTS)
        full = onnx.load_from_string(data)
        assert n == strip(full) > 0, name
        assert onnx.load_from_string(small) == full, name
        assert onnx.load_from_string(small).SerializeToString() == full.SerializeToString(), name
        assert skeleton(memoryview(data)) == full, name  # a lent buffer as well


def test_a_skeleton_of_bytes_never_parses_the_whole_model(monkeypatch):
    """skeleton(bytes) parses only the skeleton's bytes: a parse of the whole model (its weights in protobuf's arena,
    after a copy of a lent buffer) left ~16 MB more of a Triton stub's heap in use for PP-OCR rec (issue 41)."""
    data = _weights_model().SerializeToString()
    parsed = []
    real = onnx.load_from_string
    monkeypatch.setattr(onnx, "load_from_string", lambda b, *a, **k: parsed.append(len(b)) or real(b, *a, **k))
    small = skeleton(memoryview(data))
    assert parsed and max(parsed) < len(data) // 10, parsed
    assert small.ByteSize() < len(data) // 10


def test_bytes_the_wire_walker_does_not_take_are_parsed_whole():
    """Malformed bytes keep ONNX's own error; a ModelProto whose graph is given twice (protobuf merges the two) is
    stripped as the whole model's parse reads it."""
    data = _weights_model().SerializeToString()
    with pytest.raises(Unsupported):
        strip_bytes(data[:-3], KEPT_ELEMENTS)
    with pytest.raises(Exception) as err:  # protobuf's DecodeError
        skeleton(data[:-3])
    assert not isinstance(err.value, Unsupported)
    m = onnx.load_from_string(data)
    extra = onnx.ModelProto()
    extra.graph.node.add().CopyFrom(m.graph.node[0])
    twice = data + extra.SerializeToString()  # protobuf merges the second graph into the first
    with pytest.raises(Unsupported):
        strip_bytes(twice, KEPT_ELEMENTS)
    full = onnx.load_from_string(twice)
    strip(full)
    assert skeleton(twice) == full


def test_the_cann_op_check_at_load_never_parses_the_weights(monkeypatch):
    """gert.load's CANN op check (gert/preview/cann_ops.py: enforce) reads ops and opsets from the skeleton: it parsed
    the whole model before (rec: ~10 MB more at the stub's load peak, issue 41), and its report is the same."""
    from gert.preview import cann_ops

    data = _weights_model().SerializeToString()
    want = cann_ops.check_proto(onnx.load_from_string(data))
    parsed = []
    real = onnx.load_from_string
    monkeypatch.setattr(onnx, "load_from_string", lambda b, *a, **k: parsed.append(len(b)) or real(b, *a, **k))
    got = cann_ops.check_proto(cann_ops.load_proto(data))
    assert parsed and max(parsed) < len(data) // 10, parsed
    assert got.to_dict() == want.to_dict()
