"""Errors: each an AclError with CANN's code, its name, and a message naming the problem; the process keeps
working afterwards. Anything that finalizes the runtime or needs another host NPU configuration runs in a
subprocess."""

import contextlib
import gc
import pickle
import threading
import weakref

import numpy as np
import pytest

import gert
from _helpers import RUNTIME, acl_code, assert_runtime_works, run_python_result
from gert import _cann

pytestmark = RUNTIME

H2D = _cann.MEMCPY_HOST_TO_DEVICE
D2H = _cann.MEMCPY_DEVICE_TO_HOST
D2D = _cann.MEMCPY_DEVICE_TO_DEVICE
H2H = _cann.MEMCPY_HOST_TO_HOST


@contextlib.contextmanager
def raises_acl(code, name, *fragments):
    """The block raises AclError(code) named ``name`` whose message contains every one of ``fragments``."""
    with pytest.raises(gert.AclError) as ei:
        yield ei
    e = ei.value
    assert e.code == code, f"expected code {code}, got {e.code}: {e}"
    assert e.name == name and acl_code(name) == code
    for f in fragments:
        assert f in e.message, f"{f!r} not in message {e.message!r}"
    assert str(code) in str(e) and name in str(e)


@pytest.fixture
def dev_ptr():
    p = _cann.malloc(100)
    yield p
    _cann.free(p)


def test_error_names_match_cann_codes():
    assert acl_code("ACL_ERROR_RT_MEMORY_ALLOCATION") == 207001
    assert acl_code("ACL_ERROR_RT_MEMORY_FREE") == 207002
    assert acl_code("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT") == 507046
    assert acl_code("ACL_ERROR_RT_PARAM_INVALID") == 107000
    assert acl_code("ACL_ERROR_RT_CONTEXT_NULL") == 107002
    assert acl_code("ACL_ERROR_UNINITIALIZE") == 100001
    assert issubclass(gert.AclError, gert.GertError)
    e = gert.AclError(207001, "boom")
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.code, e2.name, e2.message) == (207001, "ACL_ERROR_RT_MEMORY_ALLOCATION", "boom")


def test_wrong_memcpy_kind(dev_ptr):
    host = np.zeros(100, np.uint8)
    hp = host.ctypes.data
    # H2D with a host pointer where the device destination must be
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtMemcpy", "dst", "is not device memory"):
        _cann.memcpy(hp, 100, hp, 100, H2D)
    # D2H into device memory
    with raises_acl(
        107000, "ACL_ERROR_RT_PARAM_INVALID", "is device memory", "ACL_MEMCPY_DEVICE_TO_HOST", "host destination"
    ):
        _cann.memcpy(dev_ptr, 100, dev_ptr, 100, D2H)
    # H2H reading device memory
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "src", "ACL_MEMCPY_HOST_TO_HOST", "host source"):
        _cann.memcpy(hp, 100, dev_ptr, 100, H2H)
    # D2D from a host pointer, async
    with gert.Stream() as s:
        with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtMemcpyAsync", "src", "is not device memory"):
            _cann.memcpy_async(dev_ptr, 100, hp, 100, D2D, s.handle)
        s.synchronize()
    assert not host.any()
    assert_runtime_works()


def test_unknown_memcpy_kind(dev_ptr):
    host = np.zeros(8, np.uint8)
    with raises_acl(100000, "ACL_ERROR_INVALID_PARAM", "not an aclrtMemcpyKind"):
        _cann.memcpy(dev_ptr, 8, host.ctypes.data, 8, 77)


def test_freed_pointer():
    host = np.arange(64, dtype=np.uint8)
    p = _cann.malloc(64)
    _cann.memcpy(p, 64, host.ctypes.data, 64, H2D)
    _cann.free(p)
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtMemcpy", "is not device memory", "freed"):
        _cann.memcpy(p, 64, host.ctypes.data, 64, H2D)
    out = np.zeros(64, np.uint8)
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "src", "freed"):
        _cann.memcpy(out.ctypes.data, 64, p, 64, D2H)
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtMemset", "freed"):
        _cann.memset(p, 64, 0, 64)
    assert not out.any()
    assert_runtime_works()


def test_size_past_the_end_of_an_allocation(dev_ptr):
    host = np.zeros(200, np.uint8)
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "runs 100 bytes past the end", "100-byte device allocation"):
        _cann.memcpy(dev_ptr, 200, host.ctypes.data, 200, H2D)
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "runs 10 bytes past the end"):
        _cann.memcpy(dev_ptr + 50, 60, host.ctypes.data, 60, H2D)
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "src", "runs 1 bytes past the end"):
        _cann.memcpy(host.ctypes.data, 101, dev_ptr, 101, D2H)
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtMemset", "runs 50 bytes past the end"):
        _cann.memset(dev_ptr, 150, 1, 150)
    with gert.Stream() as s:
        with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtMemcpyAsync", "past the end"):
            _cann.memcpy_async(dev_ptr, 101, host.ctypes.data, 101, H2D, s.handle)
        with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtMemsetAsync", "past the end"):
            _cann.memset_async(dev_ptr, 101, 1, 101, s.handle)
        s.synchronize()
    # count larger than destMax is its own error
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "count 60 is larger than destMax 10"):
        _cann.memcpy(dev_ptr, 10, host.ctypes.data, 60, H2D)
    # exactly to the end is fine
    _cann.memcpy(dev_ptr + 50, 50, host.ctypes.data, 50, H2D)
    assert not host.any()
    assert_runtime_works()


@pytest.mark.hostnpu_only  # reads gert.host_counters()
def test_allocation_beyond_capacity():
    """Refused allocations take nothing. The device is the process's: memory an earlier test's objects still hold
    can be freed meanwhile (a collected cycle, a compiler thread closing its Session), so the count is compared over
    a few attempts; a leak would show in every one."""
    total = gert.memory_info().total
    gc.collect()
    changes = []
    for _attempt in range(5):
        in_use = gert.host_counters()["device_memory_in_use"]
        for n in (total + 1, 1 << 62, 2**64 - 1):
            with raises_acl(207001, "ACL_ERROR_RT_MEMORY_ALLOCATION", "aclrtMalloc", "out of memory", str(n)):
                gert.DeviceBuffer(n)
        with raises_acl(207001, "ACL_ERROR_RT_MEMORY_ALLOCATION", "out of memory"):
            _cann.malloc(total)
        changes.append(gert.host_counters()["device_memory_in_use"] - in_use)
        if changes[-1] == 0:
            break
    assert changes[-1] == 0, f"device memory in use changed by {changes} bytes over the refused allocations"
    assert_runtime_works()


def test_malloc_of_zero_bytes_is_invalid():
    with raises_acl(100000, "ACL_ERROR_INVALID_PARAM", "size must be greater than 0"):
        _cann.malloc(0)


def test_capacity_accounting_in_a_small_device():
    res = run_python_result(
        """
        k = 600 * 1024
        a = gert.DeviceBuffer(k)
        err = catch(gert.DeviceBuffer, k)            # 1.2 MB > 1 MiB
        info = gert.memory_info()
        a.free()
        b = gert.DeviceBuffer(k)                     # fits again once a is freed
        emit({"err": err, "total": info.total, "used": info.used, "ok": roundtrip(n=1000)})
    """,
        env={"GERT_HOST_DEVICE_MEMORY": "1M"},
    )
    code, name, msg = res["err"]
    assert (code, name) == (207001, "ACL_ERROR_RT_MEMORY_ALLOCATION")
    assert "out of memory" in msg and "614400 bytes requested" in msg and "of 1048576 bytes" in msg
    assert res["total"] == 1 << 20 and res["used"] >= 600 * 1024 and res["ok"]


def test_destroyed_stream():
    s = gert.Stream()
    h = s.handle
    s.destroy()
    buf = gert.DeviceBuffer(16)
    host = np.zeros(16, np.uint8)
    for call in (
        lambda: s.synchronize(),
        lambda: s.query(),
        lambda: s.launch_host_func(print),
        lambda: buf.copy_from(host, stream=s),
        lambda: buf.memset(0, stream=s),
        lambda: gert.Event().record(s),
        lambda: s.wait_event(gert.Event()),
    ):
        with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "stream was destroyed"):
            call()
    # the 1:1 layer with the stale handle
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtSynchronizeStream", "not a live stream"):
        _cann.synchronize_stream(h)
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtMemcpyAsync", "not a live stream"):
        _cann.memcpy_async(buf.ptr, 16, host.ctypes.data, 16, H2D, h)
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtDestroyStream", "already destroyed"):
        _cann.destroy_stream(h)
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtStreamQuery", "not a live stream"):
        _cann.stream_query(h)
    with raises_acl(107000, "ACL_ERROR_RT_PARAM_INVALID", "aclrtSetStreamResLimit", "not a live stream"):
        _cann.set_stream_res_limit(h, _cann.RES_CUBE_CORE, 1)
    assert_runtime_works()


@pytest.mark.hostnpu_only  # reads gert.host_counters()
def test_double_free():
    p = _cann.malloc(256)
    in_use = gert.host_counters()["device_memory_in_use"]
    _cann.free(p)
    assert gert.host_counters()["device_memory_in_use"] < in_use
    with raises_acl(207002, "ACL_ERROR_RT_MEMORY_FREE", "aclrtFree", "double free"):
        _cann.free(p)
    # an interior pointer of a live allocation is not freeable either
    q = _cann.malloc(256)
    with raises_acl(207002, "ACL_ERROR_RT_MEMORY_FREE", "not the start of a live device allocation"):
        _cann.free(q + 8)
    _cann.free(q)
    hp = _cann.malloc_host(64)
    _cann.free_host(hp)
    with raises_acl(207002, "ACL_ERROR_RT_MEMORY_FREE", "aclrtFreeHost", "double free"):
        _cann.free_host(hp)
    assert_runtime_works()


def test_sync_timeout():
    """The task is held by a gate until the timed-out synchronize has returned, so the timeout is what ended the
    wait (a synchronize that waited for the task instead would come back only once the gate gives up, with success)."""
    with gert.Stream() as s:
        log = []
        gate = threading.Event()
        s.launch_host_func(lambda: (gate.wait(60), log.append("ran")))
        with raises_acl(507046, "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", "timed out after 50 ms", "still pending"):
            s.synchronize(timeout=0.05)
        assert log == []
        gate.set()
        s.synchronize(timeout=30)  # the stream is fine afterwards
        assert log == ["ran"]
        assert s.query()
    assert_runtime_works()


def test_sync_timeout_keeps_async_sources_alive():
    """A timed-out synchronize must not drop the objects a queued copy still reads."""
    with gert.Stream() as s:
        gate = threading.Event()
        buf = gert.DeviceBuffer(1 << 16)
        s.launch_host_func(lambda: gate.wait(10))
        src = gert.HostBuffer(1 << 16).numpy()  # pinned: the copy is queued (pageable memory would sync first)
        src[:] = 42
        ref = weakref.ref(src)
        buf.copy_from(src, stream=s)
        del src
        with pytest.raises(gert.AclError):
            s.synchronize(timeout=0.02)
        gc.collect()
        assert ref() is not None
        gate.set()
        s.synchronize()
    out = np.zeros(1 << 16, np.uint8)
    buf.copy_to(out)
    assert (out == 42).all()


def test_invalid_device_id():
    n = gert.device_count()
    with raises_acl(107001, "ACL_ERROR_RT_INVALID_DEVICEID", f"device {n} does not exist"):
        gert.Device(n)
    with raises_acl(107001, "ACL_ERROR_RT_INVALID_DEVICEID"):
        gert.Stream(device=n)
    assert_runtime_works()


@pytest.mark.hostnpu_only  # reads gert.host_counters()
def test_use_after_the_device_closed():
    res = run_python_result("""
        d = gert.Device(0)
        s = gert.Stream(d)
        ev = gert.Event(device=d)
        buf = gert.DeviceBuffer(64, d)
        host = np.zeros(64, np.uint8)
        buf.copy_from(np.ones(64, np.uint8))
        d.close()                                   # the last reference: aclrtResetDevice + aclFinalize
        out = {
            "copy": catch(buf.copy_from, host),
            "copy_to": catch(buf.copy_to, host),
            "memset": catch(buf.memset, 0),
            "sync": catch(s.synchronize),
            "query": catch(s.query),
            "event": catch(ev.query),
            "stream_on_closed": catch(gert.Stream, d),
            "buffer_on_closed": catch(gert.DeviceBuffer, 8, d),
            "raw_malloc": catch(_cann.malloc, 64),
            "raw_count": catch(_cann.get_device_count),
            "in_use": gert.host_counters()["device_memory_in_use"],
            "streams_alive": gert.host_counters()["streams_alive"],
        }
        # freeing handles of a closed device is a no-op, not a crash
        buf.free(); s.destroy(); ev.destroy()
        del buf, s, ev
        gc.collect()
        with gert.Device(0) as d2:                  # a new Device brings the runtime back
            out["works_again"] = roundtrip(d2)
        out["implicit_again"] = roundtrip()         # and so does implicit use of device 0
        emit(out)
    """)
    for key in ("copy", "copy_to", "memset", "sync", "query", "event"):
        code, name, msg = res[key]
        assert (code, name) == (107002, "ACL_ERROR_RT_CONTEXT_NULL"), key
        assert "device 0 was closed" in msg, (key, msg)
    for key in ("stream_on_closed", "buffer_on_closed"):
        code, name, msg = res[key]
        assert (code, name) == (107002, "ACL_ERROR_RT_CONTEXT_NULL") and "is closed" in msg, key
    for key in ("raw_malloc", "raw_count"):
        code, name, msg = res[key]
        assert (code, name) == (100001, "ACL_ERROR_UNINITIALIZE") and "aclInit has not been called" in msg, key
    assert res["in_use"] == 0 and res["streams_alive"] == 0
    assert res["works_again"] and res["implicit_again"]


def test_device_reference_counting_and_second_device():
    res = run_python_result(
        """
        a = gert.Device(0)
        b = gert.Device(0)
        d1 = gert.Device(1)
        buf = gert.DeviceBuffer(64, a)
        a.close()                                     # b still holds device 0
        out = {"after_one_close": catch(buf.copy_from, np.ones(64, np.uint8)),
               "count": gert.device_count(),
               "bad_id": catch(gert.Device, 2)}
        buf1 = gert.DeviceBuffer(64, d1)
        b.close()                                     # device 0 released; device 1 still open, no finalize
        out["dev0_closed"] = catch(buf.copy_from, np.ones(64, np.uint8))
        out["dev1_ok"] = roundtrip(d1)
        out["dev1_buf_ok"] = catch(buf1.copy_from, np.ones(64, np.uint8))
        d1.close()
        emit(out)
    """,
        env={"GERT_HOST_DEVICES": "2"},
    )
    assert res["after_one_close"] is None
    assert res["count"] == 2
    assert res["bad_id"][:2] == [107001, "ACL_ERROR_RT_INVALID_DEVICEID"]
    assert res["dev0_closed"][:2] == [107002, "ACL_ERROR_RT_CONTEXT_NULL"]
    assert res["dev1_ok"] and res["dev1_buf_ok"] is None


def test_recent_error_message_is_per_thread_and_cleared_on_read():
    """aclGetRecentErrMsg (CANN 8.5): the calling thread's message, cleared by reading it (None, read as '', once
    there is none); an error in another thread does not touch this thread's."""
    assert _cann.get_recent_err_msg() == ""
    with pytest.raises(gert.AclError) as ei:
        _cann.free(8)  # a bogus pointer in this thread
    assert "aclrtFree" in ei.value.message  # the AclError read it...
    assert _cann.get_recent_err_msg() == ""  # ...so it is gone: a later error cannot show a stale message
    other = []

    def worker():
        try:
            _cann.malloc(0)
        except gert.AclError as e:
            other.append(e.message)
        other.append(_cann.get_recent_err_msg())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert "aclrtMalloc" in other[0] and other[1] == ""
    assert _cann.get_recent_err_msg() == ""
    with pytest.raises(gert.AclError) as ei:  # the next error carries its own message only
        _cann.malloc(0)
    assert "aclrtMalloc" in ei.value.message and "aclrtFree" not in ei.value.message
