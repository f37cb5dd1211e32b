"""The host NPU's checked launch (cbindings/hostnpu/ge_session.cpp, CheckedLaunch): ExecuteGraphWithStreamAsync keeps
the last launch's tensors that passed its checks and takes their refs again for a launch of the same tensors while no
device memory was freed since. It must never serve a stale entry: a freed buffer (also one a queued run still holds),
a tensor of another shape at the same address, a device fault - each is checked again, as GE and the host NPU's
checks require of every launch."""

from __future__ import annotations

import numpy as np
import pytest

import gert
from _helpers import RUNTIME, acl_code
from gert import _cann
from models import next_graph_id, scale_model

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # the host NPU's device-memory checks, fault injection

X = np.arange(8, dtype=np.float32).reshape(2, 4)


@pytest.fixture
def loaded(device):
    """A static y = 3x graph on [2, 4] loaded on a stream of its own: (session, graph id, stream)."""
    stream = gert.Stream(device)
    session = gert.Session()
    gid = next_graph_id()
    session.add_graph(gid, gert.Graph.from_onnx(scale_model(3.0, (2, 4))))
    session.compile_graph(gid)
    session.load_graph(gid, stream)
    try:
        yield session, gid, stream
    finally:
        gert.clear_faults()
        stream.abort()
        stream.synchronize()
        session.close()
        stream.destroy()


def _run(session, gid, stream, ins, outs) -> np.ndarray:
    session.execute_async(gid, stream, ins, outs)
    stream.synchronize()
    return outs[0].to_numpy(stream)


def _fused(session, gid, stream, x_ptr: int, y_ptr: int, dt: int):
    """A FusedCall launching the graph on raw device addresses (what the executor's prepared runs hold)."""
    return _cann.FusedCall(
        session, gid, stream, [], [], [(x_ptr, X.nbytes, dt, (2, 4))], [(y_ptr, X.nbytes, dt, (2, 4))], []
    )


def test_a_freed_input_is_refused_after_the_same_tensors_ran(loaded):
    session, gid, stream = loaded
    x = gert.DeviceTensor.from_numpy(X, stream)
    y = gert.DeviceTensor.empty((2, 4), np.float32)
    call = _fused(session, gid, stream, x.ptr, y.ptr, x.ge_dtype)
    call([], [])
    call([], [])  # the same tensors: checked once, taken again
    np.testing.assert_array_equal(y.to_numpy(stream), X * 3)
    x.buffer.free()
    with pytest.raises(gert.GertError, match=r"input 0 'x' at 0x[0-9a-f]+ is not 32 bytes of device memory"):
        call([], [])
    y.buffer.free()


def test_a_buffer_freed_while_a_queued_run_still_holds_it_is_refused(loaded, device):
    """The freed allocation stays alive while a hanging run queued on the stream holds it: the entry's allocation is
    still there, but device memory was freed since the check (Runtime::device_frees), so the launch is checked
    again and refused, on another stream of the device (the first one is stuck behind the hang)."""
    session, gid, stream = loaded
    x = gert.DeviceTensor.from_numpy(X, stream)
    y = gert.DeviceTensor.empty((2, 4), np.float32)
    np.testing.assert_array_equal(_run(session, gid, stream, [x], [y]), X * 3)
    x_ptr, y_ptr, dt = x.ptr, y.ptr, x.ge_dtype
    gert.inject_fault("hang", duration_ms=0)  # the next run waits on the stream's worker until aborted
    session.execute_async(gid, stream, [x], [y])  # the same tensors: taken from the entry, queued, holding x
    x.buffer.free()  # aclrtFree: the memory leaves the runtime; the hanging run keeps it alive
    other = gert.Stream(device)
    try:
        call = _fused(session, gid, other, x_ptr, y_ptr, dt)
        with pytest.raises(gert.GertError, match="is not 32 bytes of device memory"):
            call([], [])
    finally:
        stream.abort()
        other.destroy()


def test_a_tensor_of_another_shape_at_the_same_address_is_checked_again(loaded):
    session, gid, stream = loaded
    x = gert.DeviceTensor.from_numpy(X, stream)
    y = gert.DeviceTensor.empty((2, 4), np.float32)
    np.testing.assert_array_equal(_run(session, gid, stream, [x], [y]), X * 3)
    reshaped = gert.DeviceTensor(x.buffer, (4, 2), np.float32)  # same address, size and dtype; another shape
    with pytest.raises(gert.GertError, match=r"input 0 'x' has shape \[4,2\], the static graph takes \[2,4\]"):
        session.execute_async(gid, stream, [reshaped], [y])
    np.testing.assert_array_equal(_run(session, gid, stream, [x], [y]), X * 3)  # the original still runs


def test_the_same_tensors_after_a_device_fault_are_refused_until_the_device_is_recovered(loaded):
    """The device's state is not part of the entry: a sticky fault fails the launch of tensors that passed the checks
    before, and once the device's tasks are aborted (aclrtDeviceTaskAbort) they run again."""
    session, gid, stream = loaded
    x = gert.DeviceTensor.from_numpy(X, stream)
    y = gert.DeviceTensor.empty((2, 4), np.float32)
    np.testing.assert_array_equal(_run(session, gid, stream, [x], [y]), X * 3)
    gert.inject_fault("sticky")
    with pytest.raises(gert.AclError) as e:
        _run(session, gid, stream, [x], [y])
    assert e.value.code == acl_code("ACL_ERROR_RT_AICORE_EXCEPTION")
    with pytest.raises(gert.GertError, match="aclrtDeviceTaskAbort"):
        session.execute_async(gid, stream, [x], [y])  # the same tensors again: refused at the call
    _cann.device_task_abort(stream.device_id, 0)
    x.buffer.copy_from(X + 1, stream)
    np.testing.assert_array_equal(_run(session, gid, stream, [x], [y]), (X + 1) * 3)
