"""GE errors: every misuse is a GeError / AclError with GE's (or ACL's) code and a message naming the problem, and
the session, the stream and the process stay usable: after each error the same session and stream run a graph
correctly (``usable`` fixture).

Covered: unreadable models (truncated / non-ONNX bytes and files, empty, missing, no nodes, unsupported element
type), parser_params and graph / session options GE refuses, the graph life cycle (summary / load before compile,
execute before load, load twice, remove while a run is in flight, execute after remove, a closed session, a destroyed
stream), bad inputs and outputs (count, dtype, rank, shape, host memory, freed memory, too small), a run that fails
inside ONNX Runtime (reported by the stream's next synchronize), and RunGraph's checks. GE finalize runs in a
subprocess (it drops every session of the process).
"""

import threading

import numpy as np
import pytest
from onnx import helper

import gert
from _helpers import RUNTIME, acl_code, assert_runtime_works, run_python_result
from gert import _cann
from models import CLS, add_model, broadcast_model, load, make_model, next_graph_id, ppocr_model, vi

pytestmark = RUNTIME

GE_FAILED = 0xFFFFFFFF
GRAPH_PARAM_INVALID = 50331649
GE_PARAM_INVALID = 145000
GE_EXEC_NOT_INIT = 145001
GE_SHAPE_INVALID = 145021
GE_DATATYPE_INVALID = 145022
AICORE_EXCEPTION = 507015


def check(excinfo, code, *fragments):
    e = excinfo.value
    assert e.code == code, f"expected code {code}, got {e.code}: {e}"
    for f in fragments:
        assert f in e.message, f"{f!r} not in message {e.message!r}"
    assert e.name in str(e)


@pytest.fixture(scope="module")
def static_add(session, stream):
    """y = a + b at [2, 4], static, loaded on ``stream``."""
    return load(session, add_model(name="static_add"), stream, {"input_shape": "a:2,4;b:2,4"})


@pytest.fixture(scope="module")
def dynamic_add(session, stream):
    return load(session, add_model(name="dynamic_add"), stream)


@pytest.fixture
def usable(session, stream, static_add, dynamic_add):
    """Called after an error: the same session and stream still compute right (static and dynamic graph, on the
    stream and through RunGraph), and the ACL runtime still copies right."""
    counter = iter(range(1, 1000))

    def _check():
        k = next(counter)
        rng = np.random.default_rng(k)
        a, b = (rng.standard_normal((2, 4)).astype(np.float32) for _ in range(2))
        ta, tb = gert.DeviceTensor.from_numpy(a, stream), gert.DeviceTensor.from_numpy(b, stream)
        out = gert.DeviceTensor.empty((2, 4), np.float32)
        session.execute_async(static_add, stream, [ta, tb], [out])
        (dyn,) = session.execute_async(dynamic_add, stream, [ta, tb])
        got, got_dyn = out.to_numpy(stream), dyn.to_numpy(stream)
        stream.synchronize()
        np.testing.assert_array_equal(got, a + b)
        np.testing.assert_array_equal(got_dyn, a + b)
        np.testing.assert_array_equal(session.run_graph(static_add, [a, b])[0], a + b)
        assert_runtime_works(nbytes=256)

    _check()  # healthy before the error, too
    return _check


def dt(shape, dtype=np.float32, value=1):
    return gert.DeviceTensor.from_numpy(np.full(shape, value, dtype))


# ---- models that cannot be parsed ---------------------------------------------------------------------------------


def _bad_models(tmp_path):
    good = add_model()
    junk = tmp_path / "notes.onnx"
    junk.write_text("this is a text file, not a protobuf\n" * 4)
    trunc = tmp_path / "cls_truncated.onnx"
    with open(ppocr_model(CLS), "rb") as f:
        trunc.write_bytes(f.read(100_000))
    return {
        "truncated bytes": (good[: len(good) // 2], GE_FAILED, ["aclgrphParseONNXFromMem", "truncated"]),
        "non-ONNX bytes": (b"\x89PNG\r\n\x1a\n" + bytes(range(64)), GE_FAILED, ["not an ONNX model"]),
        "empty bytes": (b"", GRAPH_PARAM_INVALID, ["empty"]),
        "truncated file": (str(trunc), GE_FAILED, ["aclgrphParseONNX", "truncated"]),
        "text file": (str(junk), GE_FAILED, ["aclgrphParseONNX"]),
        "missing file": (str(tmp_path / "nope.onnx"), GE_FAILED, ["cannot open", "nope.onnx"]),
    }


@pytest.mark.parametrize(
    "case", ["truncated bytes", "non-ONNX bytes", "empty bytes", "truncated file", "text file", "missing file"]
)
def test_unparseable_model(tmp_path, usable, case):
    model, code, fragments = _bad_models(tmp_path)[case]
    with pytest.raises(gert.GeError) as ei:
        gert.Graph.from_onnx(model)
    check(ei, code, *fragments)
    usable()


def test_model_without_nodes_or_with_unsupported_type(usable):
    passthrough = make_model([], [vi("a", np.float32, [2])], [vi("a", np.float32, [2])], name="no_nodes")
    with pytest.raises(gert.GeError) as ei:
        gert.Graph.from_onnx(passthrough)
    check(ei, GE_FAILED, "no nodes")
    from onnx import TensorProto, helper

    strings = make_model(
        [helper.make_node("Identity", ["s"], ["t"])],
        [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [2])],
        name="strings",
    )
    with pytest.raises(gert.GeError) as ei:
        gert.Graph.from_onnx(strings)
    check(ei, GE_FAILED, "'s'", "STRING")
    usable()


@pytest.mark.parametrize(
    "params, code, fragments",
    [
        (
            {"precision_mode": "force_fp32"},
            GRAPH_PARAM_INVALID,
            ["'precision_mode' is not supported", "input_shape", "ge.outputNodeName", "input_data_names"],
        ),
        ({"input_shape": "q:1,4"}, GRAPH_PARAM_INVALID, ["'q'", "not a graph input"]),
        ({"input_shape": "a:1,4,5"}, GRAPH_PARAM_INVALID, ["'a'", "rank 3", "[-1,4]"]),
        ({"input_shape": "a:1,5"}, GRAPH_PARAM_INVALID, ["'a'", "axis 1", "5", "4"]),
        ({"input_shape": "a:1,x"}, GRAPH_PARAM_INVALID, ["'a'", "bad dim 'x'"]),
        ({"ge.outputNodeName": "nothing"}, GRAPH_PARAM_INVALID, ["'nothing'", "not a graph output"]),
    ],
    ids=["unknown key", "unknown input", "wrong rank", "fixed dim", "bad dim", "unknown output"],
)
def test_parser_params_refused(usable, params, code, fragments):
    with pytest.raises(gert.GeError) as ei:
        gert.Graph.from_onnx(add_model(), params)
    check(ei, code, *fragments)
    usable()


# ---- options ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, code, fragments",
    [
        ({"ge.exec.precision_mode": "fastest"}, GE_FAILED, ["'fastest'", "force_fp16", "allow_fp32_to_bf16"]),
        ({"ge.exec.precision_mode_v2": "fp8"}, GE_FAILED, ["'fp8'", "mixed_float16"]),
        ({"ge.exec.precision_mode": "force_fp32", "ge.exec.precision_mode_v2": "fp16"}, GE_FAILED, ["cannot both"]),
        ({"ge.inputShape": "q:-1,4"}, GE_PARAM_INVALID, ["'q'", "not an input"]),
        ({"ge.inputShape": "a:-1,4,1"}, GE_PARAM_INVALID, ["'a'", "rank 3"]),
        ({"ge.dynamicDims": "1;2"}, GE_PARAM_INVALID, ["needs ge.inputShape with -1"]),
        ({"ge.inputShape": "a:-1,4;b:-1,4", "ge.dynamicDims": "4,4"}, GE_PARAM_INVALID, ["1 gears", "2 to 100"]),
        (
            {"ge.inputShape": "a:-1,4;b:-1,4", "ge.dynamicDims": ";".join(f"{i},{i}" for i in range(1, 102))},
            GE_PARAM_INVALID,
            ["101 gears", "2 to 100"],
        ),
        (
            {"ge.inputShape": "a:-1,4;b:-1,4", "ge.dynamicDims": "1;2,3"},
            GE_PARAM_INVALID,
            ["'1' has 1 values", "2 -1 dims"],
        ),
        ({"ge.inputShape": "a:-1,4", "ge.dynamicDims": "1;0"}, GE_PARAM_INVALID, ["bad value '0'"]),
    ],
    ids=[
        "precision",
        "precision_v2",
        "both precisions",
        "inputShape name",
        "inputShape rank",
        "gears alone",
        "one gear",
        "101 gears",
        "gear size",
        "gear value",
    ],
)
def test_graph_options_refused(session, usable, options, code, fragments):
    gid = next_graph_id()
    with pytest.raises(gert.GeError) as ei:
        session.add_graph(gid, gert.Graph.from_onnx(add_model()), options)
    check(ei, code, *fragments)
    with pytest.raises(gert.GeError, match="was not added"):  # nothing was half-added
        session.compile_graph(gid)
    usable()


def test_session_and_global_options_refused(usable):
    with pytest.raises(gert.GeError) as ei:
        gert.Session({"ge.aicoreNum": "many"})
    check(ei, GE_FAILED, "ge.aicoreNum 'many'")
    with pytest.raises(gert.GeError) as ei:
        gert.Session({"ge.exec.precision_mode": "force_fp32", "ge.exec.precision_mode_v2": "fp16"})
    check(ei, GE_FAILED, "cannot both")
    with pytest.raises(gert.GeError) as ei:
        gert.ge_initialize({"ge.exec.precision_mode": "nope"})  # refused before it changes anything
    check(ei, GE_FAILED, "GEInitialize", "'nope'")
    with pytest.raises(TypeError, match="must be a dict"):
        gert.Session([("ge.aicoreNum", "1|1")])
    usable()


# ---- graph life cycle ---------------------------------------------------------------------------------------------


def test_life_cycle_order(session, stream, usable):
    gid = next_graph_id()
    session.add_graph(gid, gert.Graph.from_onnx(add_model(name="cycle")))
    with pytest.raises(gert.GeError) as ei:
        session.add_graph(gid, gert.Graph.from_onnx(add_model()))
    check(ei, GE_FAILED, f"graph id {gid} is already in this session")
    with pytest.raises(gert.GeError) as ei:
        session.summary(gid)
    check(ei, GE_FAILED, f"graph {gid} is not compiled")
    with pytest.raises(gert.GeError) as ei:
        session.load_graph(gid, stream)
    check(ei, GE_FAILED, "LoadGraph", "not compiled")
    session.compile_graph(gid)
    a = dt((2, 4))
    with pytest.raises(gert.GeError) as ei:  # execute before load
        session.execute_async(gid, stream, [a, a])
    check(ei, GE_FAILED, f"graph {gid} is not loaded", "LoadGraph")
    session.load_graph(gid, stream)
    with pytest.raises(gert.GeError) as ei:
        session.load_graph(gid, stream)
    check(ei, GE_FAILED, f"graph {gid} is already loaded", "loads once")
    (y,) = session.execute_async(gid, stream, [a, a])
    np.testing.assert_array_equal(y.to_numpy(), np.full((2, 4), 2, np.float32))
    for call in (
        lambda: session.compile_graph(777_777),
        lambda: session.load_graph(777_777, stream),
        lambda: session.execute_async(777_777, stream, [a, a]),
        lambda: session.summary(777_777),
    ):
        with pytest.raises(gert.GeError) as ei:
            call()
        check(ei, GE_FAILED, "graph 777777 was not added")
    usable()


def test_a_ge_allocated_output_collected_in_a_garbage_cycle_is_freed_once(session, stream, dynamic_add):
    """An output GE allocated (execute_async without outputs) belongs to its owner, which frees it. Held by a
    garbage cycle (here a dict holding itself; in the suite, an exception's traceback holding the test's frame), the
    cycle collector used to clear the buffer's owner link before the buffer's __dealloc__, which then freed the
    memory too: a double free, which the host NPU refuses with a recent error message (a device would corrupt its
    allocator)."""
    import gc

    a = dt((2, 4))
    (y,) = session.execute_async(dynamic_add, stream, [a, a])
    stream.synchronize()
    np.testing.assert_array_equal(y.to_numpy(), np.full((2, 4), 2, np.float32))
    cycle = {"y": y, "a": a}
    cycle["self"] = cycle
    del y, a, cycle
    gc.collect()
    _cann.get_recent_err_msg()  # whatever an earlier test left in this thread
    in_use = gert.memory_info(0).total - gert.memory_info(0).free
    for _ in range(3):
        (y,) = session.execute_async(dynamic_add, stream, [dt((2, 4)), dt((2, 4))])
        stream.synchronize()
        cycle = {"y": y}
        cycle["self"] = cycle
        del y, cycle
        gc.collect()
        assert _cann.get_recent_err_msg() == "", "a buffer collected in a cycle was freed twice"
    assert gert.memory_info(0).total - gert.memory_info(0).free == in_use


def test_remove_while_in_flight_then_execute_after_remove(session, stream, usable):
    gid = load(session, add_model(name="removable"), stream, {"input_shape": "a:2,4;b:2,4"})
    a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.full((2, 4), 10, np.float32)
    ta, tb = gert.DeviceTensor.from_numpy(a), gert.DeviceTensor.from_numpy(b)
    out = gert.DeviceTensor.empty((2, 4), np.float32)
    gate, started = threading.Event(), threading.Event()

    def block():
        started.set()
        assert gate.wait(30), "the test never opened the gate"

    try:
        stream.launch_host_func(block)  # the stream is blocked: the run below stays in flight
        session.execute_async(gid, stream, [ta, tb], [out])
        assert started.wait(10)
        with pytest.raises(gert.GeError) as ei:
            session.remove_graph(gid)
        check(ei, GE_FAILED, f"graph {gid} has 1 run(s) in flight", "synchronize the stream first")
    finally:
        gate.set()
    stream.synchronize()
    np.testing.assert_array_equal(out.to_numpy(), a + b)  # the run that was in flight completed, and correctly
    session.remove_graph(gid)
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(gid, stream, [ta, tb], [out])
    check(ei, GE_FAILED, f"graph {gid} was not added to this session (or was removed)")
    with pytest.raises(gert.GeError) as ei:
        session.remove_graph(gid)
    check(ei, GE_FAILED, f"graph {gid} is not in this session")
    # the id is free again: another graph under it loads and runs
    load(session, add_model(name="again"), stream, {"input_shape": "a:2,4;b:2,4"}, graph_id=gid)
    session.execute_async(gid, stream, [ta, ta], [out])
    stream.synchronize()
    np.testing.assert_array_equal(out.to_numpy(), a + a)
    usable()


def test_closed_session_and_destroyed_stream(device, usable):
    s = gert.Session()
    st = gert.Stream(device)
    gid = load(s, add_model(name="closing"), st)
    a = dt((1, 4))
    st.destroy()
    with pytest.raises(gert.AclError) as ei:
        s.execute_async(gid, st, [a, a])
    check(ei, acl_code("ACL_ERROR_RT_PARAM_INVALID"), "the stream was destroyed")
    s.close()
    for call in (
        lambda: s.compile_graph(gid),
        lambda: s.run_graph(gid, [np.ones((1, 4), np.float32)] * 2),
        lambda: s.add_graph(gid + 1, gert.Graph.from_onnx(add_model())),
    ):
        with pytest.raises(gert.GeError) as ei:
            call()
        check(ei, GE_FAILED, "the session was closed")
    s.close()  # idempotent
    usable()


# ---- bad inputs and outputs ---------------------------------------------------------------------------------------


def test_input_count(session, stream, static_add, usable):
    a, out = dt((2, 4)), gert.DeviceTensor.empty((2, 4), np.float32)
    for ins, n in (([a], 1), ([a, a, a], 3), ([], 0)):
        with pytest.raises(gert.GeError) as ei:
            session.execute_async(static_add, stream, ins, [out])
        check(ei, GE_PARAM_INVALID, "takes 2 input(s) (a, b)", f"got {n}")
    usable()


def test_input_dtype_rank_and_shape(session, stream, static_add, dynamic_add, usable):
    a, out = dt((2, 4)), gert.DeviceTensor.empty((2, 4), np.float32)
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(static_add, stream, [a, dt((2, 4), np.int32)], [out])
    check(ei, GE_DATATYPE_INVALID, "input 1 'b'", "DT_INT32", "DT_FLOAT")
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(dynamic_add, stream, [dt((8,)), a])
    check(ei, GE_SHAPE_INVALID, "input 0 'a'", "[8] (rank 1)", "[-1,4] (rank 2)")
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(dynamic_add, stream, [dt((2, 5)), dt((2, 5))])
    check(ei, GE_SHAPE_INVALID, "'a'", "[2,5]", "[-1,4]")
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(static_add, stream, [dt((3, 4)), dt((3, 4))], [out])
    check(ei, GE_SHAPE_INVALID, "'a'", "[3,4]", "the static graph takes [2,4]")
    usable()


def test_outputs(session, stream, static_add, dynamic_add, usable):
    a = dt((2, 4))
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(static_add, stream, [a, a])
    check(ei, GE_PARAM_INVALID, "is static", "allocate its 1 output(s)")
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(static_add, stream, [a, a], [gert.DeviceTensor.empty((1, 4), np.float32)])
    check(ei, GE_PARAM_INVALID, "output 0 'y' holds 16 bytes", "[2,4] needs 32")
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(static_add, stream, [a, a], [gert.DeviceTensor.empty((2, 4), np.float64)])
    check(ei, GE_DATATYPE_INVALID, "output 0 'y'", "DT_DOUBLE", "DT_FLOAT")
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(static_add, stream, [a, a], [gert.DeviceTensor.empty((2, 4), np.float32)] * 2)
    check(ei, GE_PARAM_INVALID, "has 1 output(s), got 2")
    usable()


def test_unknown_shape_output_buffers(session, stream, dynamic_add, usable):
    """An unknown-shape graph's caller-allocated outputs (GE rt2 TensorToOut): GE computes the shape, copies into a
    buffer that is large enough and writes the shape into the tensor; a buffer too small fails the call, naming both
    sizes. The caller's own shape is not what counts."""
    a = dt((2, 4))
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(dynamic_add, stream, [a, a], [gert.DeviceTensor.empty((1, 4), np.float32)])
    check(ei, GE_FAILED, f"graph {dynamic_add} (dynamic_add) failed", "needs 32 bytes", "holds 16")
    big = gert.DeviceTensor.empty((4, 4), np.float32)
    (out,) = session.execute_async(dynamic_add, stream, [a, a], [big])
    assert out is big and out.shape == (2, 4)
    np.testing.assert_array_equal(out.to_numpy(), np.full((2, 4), 2, np.float32))
    usable()


def _mod_model() -> bytes:
    """y = a mod b, int32[3], static: ONNX Runtime fails the run when b holds a zero."""
    return make_model(
        [helper.make_node("Mod", ["a", "b"], ["y"])],
        [vi("a", np.int32, [3]), vi("b", np.int32, [3])],
        [vi("y", np.int32, [3])],
        name="mod",
    )


def test_run_failing_inside_onnx_runtime(session, stream, usable):
    """The parser and GE's checks pass, ONNX Runtime fails. A static graph's run fails on the stream: the next
    synchronize reports it (ACL_ERROR_RT_AICORE_EXCEPTION, naming the graph) once, and work queued after it still
    runs. An unknown-shape graph's call waits for its run (a[3] + b[4] cannot broadcast), so it raises GeError
    itself, with caller outputs or GE-allocated ones."""
    gid = load(session, _mod_model(), stream)
    a = gert.DeviceTensor.from_numpy(np.array([5, 7, 9], np.int32))
    zero = gert.DeviceTensor.from_numpy(np.array([2, 0, 4], np.int32))
    ok = gert.DeviceTensor.from_numpy(np.array([2, 3, 4], np.int32))
    after = gert.DeviceTensor.empty((3,), np.int32)
    session.execute_async(gid, stream, [a, zero], [gert.DeviceTensor.empty((3,), np.int32)])
    session.execute_async(gid, stream, [a, ok], [after])  # queued behind the failing run
    with pytest.raises(gert.AclError) as ei:
        stream.synchronize()
    check(ei, AICORE_EXCEPTION, f"graph {gid} (mod) failed")
    stream.synchronize()  # reported once
    np.testing.assert_array_equal(after.to_numpy(), np.array([1, 1, 1], np.int32))
    bid = load(session, broadcast_model(), stream)
    x3, x4 = dt((3,)), dt((4,))
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(bid, stream, [x3, x4], [gert.DeviceTensor.empty((4,), np.float32)])
    check(ei, GE_FAILED, f"graph {bid} (broadcast) failed", "broadcast")
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(bid, stream, [x3, x4])
    check(ei, GE_FAILED, f"graph {bid} (broadcast) failed")
    with pytest.raises(gert.GeError) as ei:
        session.run_graph(bid, [np.ones(3, np.float32), np.ones(4, np.float32)])
    check(ei, GE_FAILED, "RunGraph", "failed")
    (y,) = session.execute_async(bid, stream, [x4, dt((1,), value=5)])
    np.testing.assert_array_equal(y.to_numpy(), np.full(4, 6, np.float32))
    usable()


def test_host_memory_input(session, stream, static_add, usable):
    """A tensor over host memory (a pinned HostBuffer) is refused before anything is queued."""
    hb = gert.HostBuffer(32)
    hb.numpy("float32")[:] = 1
    host_tensor = gert.DeviceTensor(hb, (2, 4), np.float32)
    a, out = dt((2, 4)), gert.DeviceTensor.empty((2, 4), np.float32)
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(static_add, stream, [a, host_tensor], [out])
    check(ei, GE_PARAM_INVALID, "inputs[1] is backed by a HostBuffer", "device memory")
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(static_add, stream, [a, a], [host_tensor])
    check(ei, GE_PARAM_INVALID, "outputs[0] is backed by a HostBuffer")
    usable()


def test_freed_device_memory(session, stream, static_add, usable):
    a, out = dt((2, 4)), gert.DeviceTensor.empty((2, 4), np.float32)
    freed = dt((2, 4))
    freed.buffer.free()
    with pytest.raises(gert.AclError) as ei:
        session.execute_async(static_add, stream, [a, freed], [out])
    check(ei, acl_code("ACL_ERROR_RT_PARAM_INVALID"), "inputs[1]", "was freed")
    # memory freed behind the DeviceBuffer's back (the 1:1 binding): the address is no device allocation any more,
    # and GE's own check refuses it
    dangling = dt((2, 4))
    _cann.free(dangling.buffer.ptr)
    try:
        with pytest.raises(gert.GeError) as ei:
            session.execute_async(static_add, stream, [dangling, a], [out])
        check(ei, GE_PARAM_INVALID, "input 0 'a'", f"{dangling.buffer.ptr:x}", "is not 32 bytes of device memory")
        with pytest.raises(gert.GeError) as ei:
            session.execute_async(static_add, stream, [a, a], [dangling])
        check(ei, GE_PARAM_INVALID, "output 0 'y'", "is not 32 bytes of device memory")
    finally:
        with pytest.raises(gert.AclError, match="not the start of a live device allocation"):
            dangling.buffer.free()  # the runtime notices the double free; the buffer forgets the address
    usable()


def test_input_buffer_smaller_than_its_shape(session, stream, static_add, usable):
    """A tensor whose shape claims more than its buffer holds (DeviceTensor checks at construction; here the shape
    is changed afterwards): GE refuses it by the allocation's size."""
    a, out = dt((2, 4)), gert.DeviceTensor.empty((2, 4), np.float32)
    short = dt((1, 4))
    short.shape = (2, 4)
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(static_add, stream, [a, short], [out])
    check(ei, GE_PARAM_INVALID, "input 1 'b'", "is not 32 bytes of device memory")
    usable()


def test_run_graph_checks(session, static_add, dynamic_add, usable):
    ok = np.ones((2, 4), np.float32)
    with pytest.raises(gert.GeError) as ei:
        session.run_graph(static_add, [ok])
    check(ei, GE_PARAM_INVALID, "takes 2 input(s), got 1")
    with pytest.raises(gert.GeError) as ei:
        session.run_graph(static_add, [ok, ok.astype(np.int64)])
    check(ei, GE_DATATYPE_INVALID, "input 1 'b'", "DT_INT64")
    with pytest.raises(gert.GeError) as ei:
        session.run_graph(static_add, [np.ones((4, 4), np.float32)] * 2)
    check(ei, GE_SHAPE_INVALID, "[4,4]", "[2,4]")
    for bad in (np.ones((2, 4), np.complex64), np.array([[None] * 4] * 2, dtype=object)):
        with pytest.raises(gert.GertError, match=f"dtype {bad.dtype} has no ge::DataType; supported: float32"):
            session.run_graph(dynamic_add, [bad, bad])
    usable()


# ---- GE finalize (a subprocess: it drops every session of the process) -------------------------------------------


def test_finalize_then_initialize_again(tmp_path):
    path = tmp_path / "add.onnx"
    path.write_bytes(add_model(name="finalize"))
    result = run_python_result(f"""
        path = {str(path)!r}
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        def run(s, st, gid):
            s.add_graph(gid, gert.Graph.from_onnx(path))
            s.compile_graph(gid)
            s.load_graph(gid, st)
            t = gert.DeviceTensor.from_numpy(a)
            (y,) = s.execute_async(gid, st, [t, t])
            return bool((y.to_numpy() == a + a).all())
        out = {{}}
        st = gert.Stream()
        with gert.ge_initialize({{"ge.exec.precision_mode": "force_fp32"}}):
            s = gert.Session()
            out["before"] = run(s, st, 1)
        try:
            s.compile_graph(1)
        except gert.GeError as e:
            out["after"] = [e.code, e.message]
        try:
            s.add_graph(2, gert.Graph.from_onnx(path))
        except gert.GeError as e:
            out["add_after"] = e.code
        gert.ge_finalize()  # finalizing twice is harmless
        s2 = gert.Session()  # initializes GE again
        out["again"] = run(s2, st, 1)
        emit(out)
    """)
    assert result["before"] is True and result["again"] is True
    code, message = result["after"]
    assert code == GE_EXEC_NOT_INIT and "GEInitialize has not been called" in message
    assert result["add_after"] == GE_EXEC_NOT_INIT
