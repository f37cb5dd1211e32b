"""Pinned host memory: numpy views and DLPack without copies, free refused while a view is alive; the host
NPU's counters count bytes per memcpy kind exactly."""

import ctypes
import gc

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from gert import _cann

pytestmark = RUNTIME


def test_numpy_view_is_zero_copy_both_ways():
    hb = gert.HostBuffer(256)
    f = hb.numpy("float32", (8, 8))
    assert f.shape == (8, 8) and f.dtype == np.float32
    assert f.ctypes.data == hb.ptr != 0
    u = hb.numpy()  # default: uint8, as many as fit
    assert u.shape == (256,) and u.dtype == np.uint8
    f[:] = np.arange(64, dtype=np.float32).reshape(8, 8)
    assert u.view(np.float32)[5] == 5.0  # the write through one view shows in the other
    u[:4] = np.frombuffer(np.float32(-2.5).tobytes(), np.uint8)
    assert f[0, 0] == -2.5
    mv = memoryview(hb)
    assert mv.nbytes == 256 and not mv.readonly
    mv[4:8] = np.float32(7).tobytes()
    assert f[0, 1] == 7
    del f, u, mv


def test_numpy_view_bounds():
    hb = gert.HostBuffer(30)
    assert hb.numpy("int32").shape == (7,)
    assert hb.numpy("int16", 3).shape == (3,)
    with pytest.raises(ValueError, match="needs 32 bytes, the buffer holds 30"):
        hb.numpy("int32", (2, 4))


def test_device_copies_through_a_host_buffer(streams):
    hb_in, hb_out = gert.HostBuffer(4096), gert.HostBuffer(4096)
    src = hb_in.numpy("int64")
    src[:] = np.arange(512) * 3
    dev = gert.DeviceBuffer(4096)
    dev.copy_from(hb_in, stream=streams[0])
    dev.copy_to(hb_out, stream=streams[0])
    streams[0].synchronize()
    np.testing.assert_array_equal(hb_out.numpy("int64"), src)


def test_dlpack_export_is_zero_copy():
    hb = gert.HostBuffer(64)
    assert hb.__dlpack_device__() == (1, 0)  # kDLCPU, device 0
    d = np.from_dlpack(hb)
    assert d.dtype == np.uint8 and d.shape == (64,)
    assert d.ctypes.data == hb.ptr
    hb.numpy()[:] = 9  # writes to the buffer show in the imported array
    assert (d == 9).all()
    hb.numpy()[3] = 1
    assert d[3] == 1
    # (numpy < 2.1 asks for the legacy capsule, whose arrays it marks read-only; see the versioned test below)
    with pytest.raises(BufferError, match="copy=True"):
        hb.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="cannot export to device"):
        hb.__dlpack__(dl_device=(2, 0))


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):
    pass


_DLManagedTensorVersioned._fields_ = [
    ("major", ctypes.c_uint32),
    ("minor", ctypes.c_uint32),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensorVersioned))),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", _DLTensor),
]


def test_dlpack_versioned_export_is_writable():
    """A consumer asking for DLPack 1.x (max_version, as numpy >= 2.1 does) gets a "dltensor_versioned" capsule:
    version 1.0, no read-only flag, the buffer's own memory; consuming it (rename, then the deleter) or dropping it
    releases the export."""
    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype = ctypes.c_char_p
    api.PyCapsule_GetName.argtypes = [ctypes.py_object]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    hb = gert.HostBuffer(48)
    assert api.PyCapsule_GetName(hb.__dlpack__()) == b"dltensor"  # legacy consumers
    assert api.PyCapsule_GetName(hb.__dlpack__(max_version=(0, 8))) == b"dltensor"
    cap = hb.__dlpack__(max_version=(1, 2))
    assert api.PyCapsule_GetName(cap) == b"dltensor_versioned"
    mt = _DLManagedTensorVersioned.from_address(api.PyCapsule_GetPointer(cap, b"dltensor_versioned"))
    t = mt.dl_tensor
    assert (mt.major, mt.minor, mt.flags) == (1, 0, 0), "DLPack 1.0, writable (no DLPACK_FLAG_BITMASK_READ_ONLY)"
    assert (t.data, t.device_type, t.device_id, t.ndim, t.shape[0]) == (hb.ptr, 1, 0, 1, 48)
    assert (t.code, t.bits, t.lanes, bool(t.strides), t.byte_offset) == (1, 8, 1, False, 0)
    api.PyCapsule_SetName(cap, b"used_dltensor_versioned")  # consumed, as numpy does
    with pytest.raises(BufferError, match="still alive"):
        hb.free()
    mt.deleter(ctypes.pointer(mt))  # the consumer is done
    del cap
    gc.collect()
    dropped = hb.__dlpack__(max_version=(1, 0))  # never consumed
    del dropped
    gc.collect()
    hb.free()
    if np.lib.NumpyVersion(np.__version__) >= "2.1.0":  # numpy asks for 1.x itself
        hb2 = gert.HostBuffer(8)
        d = np.from_dlpack(hb2)
        d[:] = 5
        assert d.flags.writeable and (hb2.numpy() == 5).all()


def test_free_is_refused_while_a_view_is_alive():
    hb = gert.HostBuffer(128)
    v = hb.numpy("float64")
    with pytest.raises(BufferError, match="1 view"):
        hb.free()
    v2 = v[2:5]  # a view of the view keeps the export alive
    del v
    gc.collect()
    with pytest.raises(BufferError, match="still alive"):
        hb.free()
    del v2
    mv = memoryview(hb)
    with pytest.raises(BufferError):
        hb.free()
    mv.release()
    d = np.from_dlpack(hb)
    with pytest.raises(BufferError, match="still alive"):
        hb.free()
    del d
    gc.collect()
    assert hb.ptr != 0
    hb.free()  # now nothing uses it
    assert hb.ptr == 0
    hb.free()  # idempotent
    with pytest.raises(BufferError, match="freed"):
        hb.numpy()
    with pytest.raises(ValueError, match=r"DeviceBuffer\.copy_from: .*HostBuffer was freed"):
        gert.DeviceBuffer(128).copy_from(hb)


def test_unconsumed_dlpack_capsule_releases_its_export():
    hb = gert.HostBuffer(32)
    cap = hb.__dlpack__()
    with pytest.raises(BufferError):
        hb.free()
    del cap
    gc.collect()
    hb.free()


def test_empty_host_buffer():
    hb = gert.HostBuffer(0)
    assert hb.numpy().shape == (0,)
    assert np.from_dlpack(hb).shape == (0,)
    assert memoryview(hb).nbytes == 0
    gert.DeviceBuffer(0).copy_to(hb)
    gc.collect()
    hb.free()


@pytest.mark.hostnpu_only  # reads gert.host_counters()
def test_host_counters_count_bytes_per_kind_exactly(streams):
    s = streams[0]
    a, b = gert.DeviceBuffer(1000), gert.DeviceBuffer(1000)
    host = np.arange(1000, dtype=np.uint8)
    out = np.zeros(1000, np.uint8)
    hb = gert.HostBuffer(300)
    gc.collect()
    s.synchronize()
    gert.reset_host_counters()
    c0 = gert.host_counters()
    assert {k: c0[k] for k in ("bytes_h2d", "bytes_d2h", "bytes_d2d", "bytes_h2h", "tasks")} == dict.fromkeys(
        ("bytes_h2d", "bytes_d2h", "bytes_d2d", "bytes_h2h", "tasks"), 0
    )
    a.copy_from(host)  # H2D 1000, sync: no task
    a.copy_from(host[:123], stream=s)  # H2D 123, pageable: done when the call returns, task 1
    b.copy_from(a, stream=s)  # D2D 1000, task 2
    b.copy_to(hb, stream=s)  # D2H 300 into pinned memory, task 3
    s.launch_host_func(lambda: None)  # task 4
    s.record_event()  # task 5
    s.synchronize()
    b.copy_to(out[:77])  # D2H 77
    _cann.memcpy(out.ctypes.data, 50, host.ctypes.data, 50, _cann.MEMCPY_HOST_TO_HOST)  # H2H 50
    _cann.memcpy(hb.ptr, 10, a.ptr, 10, _cann.MEMCPY_DEFAULT)  # D2H 10 (inferred)
    _cann.memcpy(b.ptr, 20, a.ptr + 100, 20, _cann.MEMCPY_DEFAULT)  # D2D 20 (inferred)
    c = gert.host_counters()
    assert c["bytes_h2d"] == 1123
    assert c["bytes_d2h"] == 387
    assert c["bytes_d2d"] == 1020
    assert c["bytes_h2h"] == 50
    assert c["tasks"] == 5
    hbv = hb.numpy()
    np.testing.assert_array_equal(hbv[:300], host[:300])  # 10 bytes re-copied from a: same values
    np.testing.assert_array_equal(out[:77], host[:77])
    assert not out[77:].any()
    chk = np.zeros(20, np.uint8)
    _cann.memcpy(chk.ctypes.data, 20, b.ptr, 20, _cann.MEMCPY_DEVICE_TO_HOST)
    np.testing.assert_array_equal(chk, host[100:120])


@pytest.mark.hostnpu_only  # reads gert.host_counters()
def test_device_memory_counters_in_use_and_peak(device):
    gc.collect()
    gert.reset_host_counters()
    c0 = gert.host_counters()
    assert c0["device_memory_peak"] == c0["device_memory_in_use"]
    bufs = [gert.DeviceBuffer(1 << 20) for _ in range(3)]
    c1 = gert.host_counters()
    grew = c1["device_memory_in_use"] - c0["device_memory_in_use"]
    assert 3 << 20 <= grew <= (3 << 20) + 3 * 64  # bytes asked for, plus small per-allocation rounding
    assert c1["device_memory_peak"] == c1["device_memory_in_use"]
    del bufs
    gc.collect()
    c2 = gert.host_counters()
    assert c2["device_memory_in_use"] == c0["device_memory_in_use"]
    assert c2["device_memory_peak"] == c1["device_memory_peak"]  # the peak remembers
    gert.reset_host_counters()
    assert gert.host_counters()["device_memory_peak"] == c0["device_memory_in_use"]
