"""CANN 8.5's ACL rules that the host NPU follows (shared/docs/cann-runtime-rules.md, "What a faithful emulation must
do"), one test per rule, through the raw 1:1 bindings. docs/host-npu.md ("CANN's rules it follows") lists them.

Elsewhere: aclGetRecentErrMsg cleared on read (test_errors.py), aclrtDestroyStream draining
(test_streams_events.py::test_destroy_drains_pending_work), resource-limit values (test_res_limits.py)."""

import threading

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from gert import _cann

pytestmark = RUNTIME

H2H, H2D, D2H, D2D = (
    _cann.MEMCPY_HOST_TO_HOST,
    _cann.MEMCPY_HOST_TO_DEVICE,
    _cann.MEMCPY_DEVICE_TO_HOST,
    _cann.MEMCPY_DEVICE_TO_DEVICE,
)
HUGE1G_ONLY = 6  # ACL_MEM_MALLOC_HUGE1G_ONLY


def code_of(fn, *args) -> int:
    with pytest.raises(gert.AclError) as ei:
        fn(*args)
    return ei.value.code


class Gate:
    """Holds ``stream`` behind a host function until opened (at the latest after 10 s)."""

    def __init__(self, stream):
        self.ev = threading.Event()
        stream.launch_host_func(lambda: self.ev.wait(10))

    def open(self):
        self.ev.set()


@pytest.fixture
def dev():
    p = _cann.malloc(256)
    yield p
    _cann.free(p)


@pytest.fixture
def stream(streams):
    s = streams[0]
    yield s
    s.synchronize()


# ---- aclrtMemcpy(Async): the check order and its codes ----------------------------------------------------------


def test_memcpy_async_checks_in_cann_order(dev, stream):
    host = np.zeros(64, np.uint8)
    h, s = host.ctypes.data, stream.handle
    # 1. a null pointer, or a kind it does not take: 100000, before the count is looked at
    assert code_of(_cann.memcpy_async, 0, 64, h, 0, H2D, s) == 100000
    assert code_of(_cann.memcpy_async, dev, 64, 0, 64, H2D, s) == 100000
    assert code_of(_cann.memcpy_async, dev, 64, h, 0, 77, s) == 100000
    # 2. count 0, or count above destMax: 107000, before the kind's direction is looked at
    assert code_of(_cann.memcpy_async, h, 64, h + 64, 0, H2H, s) == 107000
    assert code_of(_cann.memcpy_async, dev, 8, h, 64, H2D, s) == 107000
    # 3. host to host: 207000 at the call (also when DEFAULT finds two host pointers)
    with pytest.raises(gert.AclError) as ei:
        _cann.memcpy_async(h, 32, h + 32, 32, H2H, s)
    assert ei.value.code == 207000 and ei.value.name == "ACL_ERROR_RT_FEATURE_NOT_SUPPORT"
    assert "ACL_MEMCPY_HOST_TO_HOST" in ei.value.message and "aclrtMemcpy" in ei.value.message
    assert code_of(_cann.memcpy_async, h, 32, h + 32, 32, _cann.MEMCPY_DEFAULT, s) == 207000
    # 4. dst == src: success, nothing copied (not even the host NPU's pointer checks run)
    _cann.memcpy_async(dev, 64, dev, 64, D2D, s)
    _cann.memcpy_async(h, 64, h, 64, D2D, s)
    stream.synchronize()
    assert not host.any()


def test_memcpy_sync_count_rules(dev):
    host = np.zeros(64, np.uint8)
    h = host.ctypes.data
    assert code_of(_cann.memcpy, dev, 0, h, 0, H2D) == 107000  # destMax 0 / count 0
    assert code_of(_cann.memcpy, dev, 64, h, 0, H2D) == 107000  # count 0
    assert code_of(_cann.memcpy, dev, 8, h, 64, H2D) == 107000  # count > destMax
    assert code_of(_cann.memcpy, 0, 64, h, 64, H2D) == 100000  # null
    _cann.memcpy(h, 32, h + 32, 32, H2H)  # synchronous host to host is fine


def test_memset_rules(dev, stream):
    assert code_of(_cann.memset, 0, 64, 1, 64) == 100000
    assert code_of(_cann.memset, dev, 64, 1, 0) == 107000
    assert code_of(_cann.memset_async, dev, 64, 1, 0, stream.handle) == 107000
    assert code_of(_cann.memset_async, dev, 8, 1, 64, stream.handle) == 107000
    _cann.memset(dev, 256, 0x1FF, 4)  # only the low byte of value is written
    out = np.zeros(4, np.uint8)
    _cann.memcpy(out.ctypes.data, 4, dev, 4, D2H)
    assert out.tolist() == [0xFF] * 4


# ---- aclrtMemcpyAsync with pageable vs. pinned host memory -------------------------------------------------------


def _returns_while_gated(call, wait: float = 0.3) -> bool:
    """Whether ``call`` returns while the stream it uses is held behind a gate (waits up to ``wait`` s: short where
    the call must block, since the gate holds it as long as the test wants; long where it must return)."""
    t = threading.Thread(target=call)
    t.start()
    t.join(wait)
    return not t.is_alive(), t


def test_pageable_h2d_synchronizes_the_stream_then_copies_before_returning(dev, stream):
    src = np.full(64, 5, np.uint8)
    gate = Gate(stream)
    returned, t = _returns_while_gated(lambda: _cann.memcpy_async(dev, 64, src.ctypes.data, 64, H2D, stream.handle))
    assert not returned, "a pageable H2D copy waits for the stream's earlier work"
    gate.open()
    t.join(10)
    assert stream.query(), "...and leaves nothing queued"
    src[:] = 9  # the copy happened before the call returned: changing src now changes nothing
    out = np.zeros(64, np.uint8)
    _cann.memcpy(out.ctypes.data, 64, dev, 64, D2H)
    assert (out == 5).all()


def test_pageable_d2h_is_complete_when_the_call_returns(dev, stream):
    _cann.memset(dev, 256, 7, 64)
    gate = Gate(stream)
    out = np.zeros(64, np.uint8)
    threading.Timer(0.1, gate.open).start()
    _cann.memcpy_async(out.ctypes.data, 64, dev, 64, D2H, stream.handle)
    assert (out == 7).all(), "no synchronize needed: the copy ran before the call returned"


def test_pinned_copies_are_really_queued(dev, stream):
    src = gert.HostBuffer(64).numpy()
    src[:] = 3
    out = gert.HostBuffer(64).numpy()
    out[:] = 0
    gate = Gate(stream)
    returned, _ = _returns_while_gated(
        lambda: (
            _cann.memcpy_async(dev, 64, src.ctypes.data, 64, H2D, stream.handle),
            _cann.memcpy_async(out.ctypes.data, 64, dev, 64, D2H, stream.handle),
        ),
        wait=5,
    )  # < the gate's own 10 s
    assert returned, "aclrtMallocHost memory: both copies are enqueued, the calls do not wait"
    assert not stream.query() and not out.any()
    gate.open()
    stream.synchronize()
    assert (out == 3).all()


# ---- aclrtMalloc / aclrtMallocHost / aclrtFree -------------------------------------------------------------------


def _charged(size, policy=_cann.MEM_MALLOC_HUGE_FIRST) -> int:
    free0 = gert.memory_info(0).free
    p = _cann.malloc(size, policy)
    try:
        assert p % 64 == 0, f"aclrtMalloc({size}) returned {p:#x}: not 64-byte aligned"
        return free0 - gert.memory_info(0).free
    finally:
        _cann.free(p)


def test_malloc_rounds_up_to_32_plus_32_aligns_to_64_and_refuses_size_0(device):
    assert [_charged(n) for n in (1, 32, 33, 100, 4096)] == [64, 64, 96, 160, 4128]
    assert _charged(100, HUGE1G_ONLY) == 128  # the HUGE1G policies skip the +32
    assert code_of(_cann.malloc, 0) == 100000
    hp = _cann.malloc_host(100)
    assert hp % 64 == 0
    _cann.free_host(hp)
    assert code_of(_cann.malloc_host, 0) == 100000
    with pytest.raises(gert.AclError) as ei:  # out of memory: 207001, so a caller can free and retry
        _cann.malloc(gert.memory_info(0).total)
    assert ei.value.code == 207001 and ei.value.name == "ACL_ERROR_RT_MEMORY_ALLOCATION"


def test_free_does_not_wait_for_queued_work_that_uses_the_memory(stream):
    free0 = gert.memory_info(0).free
    p = _cann.malloc(4096)
    src = gert.HostBuffer(4096).numpy()
    gate = Gate(stream)
    _cann.memcpy_async(p, 4096, src.ctypes.data, 4096, H2D, stream.handle)  # pinned: queued behind the gate
    freer = threading.Thread(target=_cann.free, args=(p,))
    freer.start()  # returns with the copy still pending (it waits for the gate)
    freer.join(30)
    if freer.is_alive():
        gate.open()
        freer.join(30)
        pytest.fail("aclrtFree waited for the queued copy that uses the memory")
    assert not stream.query()
    assert code_of(_cann.free, p) == 207002  # and the pointer is gone for the caller
    gate.open()
    stream.synchronize()  # the pending copy ran safely (the host NPU deferred the release)
    assert gert.memory_info(0).free == free0


# ---- synchronize timeouts ----------------------------------------------------------------------------------------


def test_sync_timeouts(stream):
    gate = Gate(stream)
    ev = _cann.create_event_with_flag(_cann.EVENT_SYNC)
    try:
        _cann.record_event(ev, stream.handle)
        with pytest.raises(gert.AclError) as ei:
            _cann.synchronize_stream_with_timeout(stream.handle, 20)
        assert ei.value.code == 507046 and ei.value.name == "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"
        assert not stream.query(), "the tasks keep running after a timed-out synchronize"
        with pytest.raises(gert.AclError) as ei:
            _cann.synchronize_event_with_timeout(ev, 20)
        assert ei.value.code == 507047 and ei.value.name == "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT"
        for bad in (0, -2):  # -1 waits forever, > 0 is milliseconds; others: 107000
            assert code_of(_cann.synchronize_stream_with_timeout, stream.handle, bad) == 107000
            assert code_of(_cann.synchronize_event_with_timeout, ev, bad) == 107000
        with pytest.raises(gert.AclError) as ei:  # gert's layer asks CANN for at least 1 ms, not 0
            stream.synchronize(timeout=0)
        assert ei.value.code == 507046
    finally:
        gate.open()
        stream.synchronize()
        _cann.synchronize_event_with_timeout(ev, -1)
        _cann.destroy_event(ev)
