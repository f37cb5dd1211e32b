"""Session.RunGraphWithStreamAsync (ge::Tensor handles over device memory) on the host NPU: it compiles and loads the
graph on first use (GE: "used to compile, load, and run graphs"), runs asynchronously on the stream, allocates the
outputs of a dynamic graph left empty, and refuses what ExecuteGraphWithStreamAsync refuses, under its own name."""

import gc

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import gert
from _helpers import RUNTIME
from models import next_graph_id

pytestmark = RUNTIME


def affine_model(batch) -> bytes:
    """y = x * 3 + b (float32 [batch, 4]); batch an int (static) or a name (dynamic)."""
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 4])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch, 4])
    three = onnx.numpy_helper.from_array(np.array(3, np.float32), "three")
    b = onnx.numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")
    g = oh.make_graph(
        [oh.make_node("Mul", ["x", "three"], ["t"]), oh.make_node("Add", ["t", "b"], ["y"])],
        "affine",
        [x],
        [y],
        [three, b],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def expected(x: np.ndarray) -> np.ndarray:
    return x * np.float32(3) + np.arange(4, dtype=np.float32)


def add(session, model) -> int:
    gid = next_graph_id()
    session.add_graph(gid, gert.Graph.from_onnx(model))
    return gid


def test_static_graph_compiles_loads_and_runs_on_first_use(session, stream):
    gid = add(session, affine_model(3))  # no compile_graph / load_graph: RunGraphWithStreamAsync does both
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        out = gert.DeviceTensor.empty((3, 4), np.float32)
        got = session.run_async(gid, stream, [gert.DeviceTensor.from_numpy(x, stream)], [out])
        assert got[0] is out
        y = out.to_numpy(stream)
        stream.synchronize()
        np.testing.assert_array_equal(y, expected(x))
    assert session.summary(gid).is_static  # it was compiled...
    with pytest.raises(gert.GeError, match="already loaded"):  # ...and loaded, on this stream, once
        session.load_graph(gid, stream)


def test_dynamic_graph_outputs_left_empty_are_allocated_by_ge_and_freed_with_the_tensor(session, stream):
    gid = add(session, affine_model("N"))
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    (y,) = session.run_async(gid, stream, [gert.DeviceTensor.from_numpy(x, stream)])
    assert y.shape == (5, 4) and y.dtype == np.float32
    got = y.to_numpy(stream)
    stream.synchronize()
    np.testing.assert_array_equal(got, expected(x))
    free_with = gert.memory_info(0).free
    del y
    gc.collect()
    assert gert.memory_info(0).free > free_with, "GE's output memory is freed when its last handle goes"
    # another batch size through the same loaded graph
    x2 = np.ones((2, 4), np.float32)
    (y2,) = session.run_async(gid, stream, [gert.DeviceTensor.from_numpy(x2, stream)])
    got = y2.to_numpy(stream)
    stream.synchronize()
    np.testing.assert_array_equal(got, expected(x2))


def test_refusals_name_run_graph_with_stream_async(session, stream):
    static = add(session, affine_model(3))
    x = gert.DeviceTensor.from_numpy(np.zeros((3, 4), np.float32), stream)
    with pytest.raises(gert.GeError) as ei:  # a static graph needs its outputs allocated
        session.run_async(static, stream, [x])
    assert ei.value.message.startswith("RunGraphWithStreamAsync:") and "static" in ei.value.message
    with pytest.raises(gert.GeError) as ei:  # the wrong dtype, named with both sides
        session.run_async(
            static,
            stream,
            [gert.DeviceTensor.from_numpy(np.zeros((3, 4), np.float64), stream)],
            [gert.DeviceTensor.empty((3, 4), np.float32)],
        )
    assert ei.value.message.startswith("RunGraphWithStreamAsync:")
    assert "'x'" in ei.value.message and "DT_DOUBLE" in ei.value.message and "DT_FLOAT" in ei.value.message
    with pytest.raises(gert.GeError) as ei:  # host memory: GE takes device memory only
        session.run_async(
            static,
            stream,
            [gert.DeviceTensor(gert.HostBuffer(48), (3, 4), np.dtype(np.float32))],
            [gert.DeviceTensor.empty((3, 4), np.float32)],
        )
    assert "RunGraphWithStreamAsync: inputs[0]" in ei.value.message and "HostBuffer" in ei.value.message
    with pytest.raises(gert.GeError) as ei:
        session.run_async(987654, stream, [x], [gert.DeviceTensor.empty((3, 4), np.float32)])
    assert "RunGraphWithStreamAsync" in ei.value.message and "987654" in ei.value.message
    stream.synchronize()
    # the session still works after every refusal
    out = gert.DeviceTensor.empty((3, 4), np.float32)
    session.run_async(static, stream, [x], [out])
    got = out.to_numpy(stream)
    stream.synchronize()
    np.testing.assert_array_equal(got, expected(np.zeros((3, 4), np.float32)))
