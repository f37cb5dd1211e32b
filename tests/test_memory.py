"""Device memory: H2D/D2H round trips (sync and async, several streams), D2D copies, memset, contiguity checks."""

import gc

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import gert
from _helpers import RUNTIME
from gert import _cann

pytestmark = RUNTIME

DTYPES = st.one_of(
    hnp.scalar_dtypes(),  # bool, ints, uints, floats, complex, datetime, timedelta
    hnp.integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?", sizes=(16, 32, 64)),
    hnp.byte_string_dtypes(max_len=5),
    hnp.unicode_string_dtypes(max_len=3),
)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=7)


def scrambled_like(a: np.ndarray) -> np.ndarray:
    """A writable C-contiguous array like ``a`` whose every byte differs from ``a``'s."""
    raw = np.frombuffer(a.tobytes(), dtype=np.uint8) ^ 0xFF
    return raw.view(a.dtype).reshape(a.shape)


def counters_delta(before: dict) -> dict:
    now = gert.host_counters()
    return {k: now[k] - before[k] for k in ("bytes_h2d", "bytes_d2h", "bytes_d2d", "bytes_h2h")}


def read_device(buf: gert.DeviceBuffer) -> np.ndarray:
    out = np.empty(buf.nbytes, np.uint8)
    buf.copy_to(out)
    return out


# ---- round trips --------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(
    a=hnp.arrays(DTYPES, SHAPES),
    mode=st.sampled_from(["sync", "async"]),
    si=st.integers(0, 2),
    offset=st.integers(0, 3),
)
@pytest.mark.hostnpu_only  # reads gert.host_counters()
def test_h2d_d2h_round_trip(streams, a, mode, si, offset):
    if offset and a.ndim >= 1 and a.shape[0] > offset:
        a = a[offset:]  # contiguous, but not at the start of its allocation
        assert a.flags.c_contiguous
    s = streams[si] if mode == "async" else None
    before = gert.host_counters()
    buf = gert.DeviceBuffer(a.nbytes)
    assert buf.nbytes == a.nbytes
    assert (buf.ptr != 0) == (a.nbytes != 0)
    buf.copy_from(a, stream=s)
    out = scrambled_like(a)
    buf.copy_to(out, stream=s)
    if s is not None:
        s.synchronize()
    assert out.dtype == a.dtype and out.shape == a.shape
    assert out.tobytes() == a.tobytes()
    # every byte went through the device once each way, nothing else was copied
    assert counters_delta(before) == {"bytes_h2d": a.nbytes, "bytes_d2h": a.nbytes, "bytes_d2d": 0, "bytes_h2h": 0}
    buf.free()


def test_size_zero_buffers(streams):
    buf = gert.DeviceBuffer(0)
    assert buf.ptr == 0 and buf.nbytes == 0
    for a in (np.zeros(0, np.float32), np.zeros((3, 0, 2), np.int64), b""):
        buf.copy_from(a)
        buf.copy_from(a, stream=streams[0])
        out = np.zeros(0, np.uint8)
        buf.copy_to(out, stream=streams[1])
    buf.memset(7)
    for s in streams:
        s.synchronize()
    # a zero-byte copy into a real buffer changes nothing
    real = gert.DeviceBuffer(16)
    real.memset(0x5A)
    real.copy_from(np.zeros(0, np.uint8))
    assert (read_device(real) == 0x5A).all()


@settings(max_examples=100)
@given(arrays=st.lists(st.tuples(hnp.arrays(DTYPES, SHAPES), st.integers(0, 2)), min_size=1, max_size=8))
def test_async_round_trips_on_several_streams(streams, arrays):
    """Many copies in flight on three streams at once; each stream's work stays in its order."""
    jobs = []
    for a, si in arrays:
        s = streams[si]
        b1, b2 = gert.DeviceBuffer(a.nbytes), gert.DeviceBuffer(a.nbytes)
        out = scrambled_like(a)
        b1.copy_from(a, stream=s)  # H2D
        b2.copy_from(b1, stream=s)  # D2D, after the H2D on the same stream
        b1.memset(0, stream=s)  # must not reach b2 or out
        b2.copy_to(out, stream=s)  # D2H
        jobs.append((a, out, b1, b2))
    for s in streams:
        s.synchronize()
    for a, out, b1, _ in jobs:
        assert out.tobytes() == a.tobytes()
        assert not read_device(b1).any()


def test_large_async_copies_overlap_on_streams(streams):
    rng = np.random.default_rng(1)
    srcs = [rng.standard_normal(1 << 20).astype(np.float32) for _ in streams]  # 4 MiB each
    bufs = [gert.DeviceBuffer(x.nbytes) for x in srcs]
    outs = [np.zeros_like(x) for x in srcs]
    for s, x, b, o in zip(streams, srcs, bufs, outs):
        b.copy_from(x, stream=s)
        b.copy_to(o, stream=s)
    for s in streams:
        s.synchronize()
    for x, o in zip(srcs, outs):
        np.testing.assert_array_equal(o, x)


# ---- contiguity and other rejected arguments ---------------------------------------------------------


@st.composite
def non_contiguous(draw):
    base = draw(
        hnp.arrays(
            st.sampled_from([np.uint8, np.int16, np.float32, np.complex128]),
            hnp.array_shapes(min_dims=2, max_dims=3, min_side=2, max_side=6),
        )
    )
    how = draw(st.sampled_from(["step", "reverse", "transpose", "inner_step"]))
    v = {
        "step": lambda x: x[::2],
        "reverse": lambda x: x[::-1],
        "transpose": lambda x: x.T,
        "inner_step": lambda x: x[..., ::2],
    }[how](base)
    assume(not v.flags.c_contiguous)
    return v


@pytest.mark.hostnpu_only  # reads gert.host_counters()
@settings(max_examples=60)
@given(v=non_contiguous(), use_stream=st.booleans())
def test_non_contiguous_source_is_rejected_not_copied_wrong(streams, v, use_stream):
    s = streams[0] if use_stream else None
    buf = gert.DeviceBuffer(v.nbytes)
    buf.memset(0xAB)
    before = gert.host_counters()
    with pytest.raises(ValueError) as ei:
        buf.copy_from(v, stream=s)
    msg = str(ei.value)
    assert "DeviceBuffer.copy_from" in msg and "C-contiguous" in msg and "ascontiguousarray" in msg, msg
    assert str(v.shape) in msg
    if s is not None:
        s.synchronize()
    assert counters_delta(before)["bytes_h2d"] == 0
    assert (read_device(buf) == 0xAB).all(), "a rejected copy changed the device buffer"
    # made contiguous explicitly, the same data round-trips exactly
    c = np.ascontiguousarray(v)
    buf.copy_from(c, stream=s)
    out = np.zeros_like(c)
    buf.copy_to(out, stream=s)
    if s is not None:
        s.synchronize()
    np.testing.assert_array_equal(out, v)


@pytest.mark.hostnpu_only  # reads gert.host_counters()
@settings(max_examples=30)
@given(v=non_contiguous(), use_stream=st.booleans())
def test_non_contiguous_destination_is_rejected(streams, v, use_stream):
    s = streams[1] if use_stream else None
    buf = gert.DeviceBuffer(v.nbytes)
    buf.memset(0x11)
    dst = v  # a view into base; base must stay untouched
    base_before = dst.base.copy() if dst.base is not None else None
    before = gert.host_counters()
    with pytest.raises(ValueError, match=r"DeviceBuffer\.copy_to: expected a C-contiguous buffer"):
        buf.copy_to(dst, stream=s)
    if s is not None:
        s.synchronize()
    assert counters_delta(before)["bytes_d2h"] == 0
    if base_before is not None:
        np.testing.assert_array_equal(dst.base, base_before)


def test_non_contiguous_memoryview_is_rejected():
    a = np.arange(32, dtype=np.uint8)
    buf = gert.DeviceBuffer(32)
    with pytest.raises(ValueError, match="C-contiguous"):
        buf.copy_from(memoryview(a)[::2])


def test_read_only_destination_is_rejected():
    buf = gert.DeviceBuffer(8)
    buf.memset(1)
    ro = np.zeros(8, np.uint8)
    ro.flags.writeable = False
    for dst in (ro, bytes(8)):
        with pytest.raises(ValueError, match=r"DeviceBuffer\.copy_to: the destination .* is read-only"):
            buf.copy_to(dst)
    assert not ro.any()


def test_object_arrays_are_rejected():
    buf = gert.DeviceBuffer(64)
    objs = np.array([object() for _ in range(4)], dtype=object)
    with pytest.raises(TypeError, match="Python objects"):
        buf.copy_from(objs)
    with pytest.raises(TypeError, match="Python objects"):
        buf.copy_to(np.empty(4, dtype=object))


def test_not_a_buffer_is_rejected():
    buf = gert.DeviceBuffer(8)
    with pytest.raises(TypeError, match="buffer protocol"):
        buf.copy_from(12345)
    with pytest.raises(TypeError, match="buffer protocol"):
        buf.copy_to([0] * 8)


@pytest.mark.hostnpu_only  # reads gert.host_counters()
def test_copy_larger_than_the_buffer_is_rejected(streams):
    buf = gert.DeviceBuffer(80)
    buf.memset(0x22)
    before = gert.host_counters()
    with pytest.raises(ValueError, match="source has 800 bytes, the buffer holds 80"):
        buf.copy_from(np.zeros(100, np.float64), stream=streams[0])
    with pytest.raises(ValueError, match="destination has 81 bytes, the buffer holds 80"):
        buf.copy_to(np.zeros(81, np.uint8))
    with pytest.raises(ValueError, match="source has 96 bytes, the buffer holds 80"):
        buf.copy_from(gert.DeviceBuffer(96))
    with pytest.raises(ValueError, match="nbytes 81 is larger than the buffer"):
        buf.memset(0, nbytes=81)
    streams[0].synchronize()
    assert counters_delta(before) == {"bytes_h2d": 0, "bytes_d2h": 0, "bytes_d2d": 0, "bytes_h2h": 0}
    assert (read_device(buf) == 0x22).all()


# ---- D2D and memset ------------------------------------------------------------------------------------


@settings(max_examples=60)
@given(
    src_n=st.integers(1, 5000),
    extra=st.integers(0, 300),
    mode=st.sampled_from(["sync", "async"]),
    direction=st.sampled_from(["copy_from", "copy_to"]),
    seed=st.integers(0, 2**32 - 1),
)
@pytest.mark.hostnpu_only  # reads gert.host_counters()
def test_d2d_copies(streams, src_n, extra, mode, direction, seed):
    rng = np.random.default_rng(seed)
    s = streams[2] if mode == "async" else None
    data = rng.integers(0, 256, src_n, dtype=np.uint8)
    old = rng.integers(0, 256, src_n + extra, dtype=np.uint8)
    src, dst = gert.DeviceBuffer(src_n), gert.DeviceBuffer(src_n + extra)
    src.copy_from(data)
    dst.copy_from(old)
    before = gert.host_counters()
    if direction == "copy_from":
        dst.copy_from(src, stream=s)  # whole src into the start of dst
        n = src_n
    else:
        small = gert.DeviceBuffer(src_n)  # copy_to(DeviceBuffer) fills the whole destination
        src.copy_to(small, stream=s)
        dst.copy_from(small, stream=s)  # ordered after the copy into small on the same stream
        n = src_n
    if s is not None:
        s.synchronize()
    d = counters_delta(before)
    assert d["bytes_d2d"] == (n if direction == "copy_from" else 2 * n)
    assert d["bytes_h2d"] == d["bytes_d2h"] == 0
    got = read_device(dst)
    np.testing.assert_array_equal(got[:n], data)
    np.testing.assert_array_equal(got[n:], old[n:])
    np.testing.assert_array_equal(read_device(src), data)  # the source is untouched


@settings(max_examples=60)
@given(n=st.integers(1, 4096), data=st.data(), mode=st.sampled_from(["sync", "async"]))
def test_memset(streams, n, data, mode):
    value = data.draw(st.integers(0, 255))
    count = data.draw(st.one_of(st.none(), st.integers(0, n)))
    s = streams[0] if mode == "async" else None
    init = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    buf = gert.DeviceBuffer(n)
    buf.copy_from(init)
    buf.memset(value, nbytes=count, stream=s)
    if s is not None:
        s.synchronize()
    expect = init.copy()
    expect[: n if count is None else count] = value
    np.testing.assert_array_equal(read_device(buf), expect)


def test_memset_is_ordered_with_copies_on_a_stream(streams):
    s = streams[1]
    n = 1 << 16
    buf = gert.DeviceBuffer(n)
    ones = np.ones(n, np.uint8)
    out1, out2 = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    buf.copy_from(ones, stream=s)
    buf.copy_to(out1, stream=s)
    buf.memset(9, nbytes=n // 2, stream=s)
    buf.copy_to(out2, stream=s)
    s.synchronize()
    assert (out1 == 1).all()
    assert (out2[: n // 2] == 9).all() and (out2[n // 2 :] == 1).all()


@pytest.mark.hostnpu_only  # reads gert.host_counters()
def test_memory_info_tracks_allocations(device):
    total = _cann.get_device_info(0, _cann.DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE)
    gc.collect()  # buffers an earlier test left to the garbage collector: freed now, not in the middle of this test
    gc.disable()
    try:
        _memory_info_tracks_allocations(device, total)
    finally:
        gc.enable()


def _memory_info_tracks_allocations(device, total):
    gc.collect()  # an earlier test's garbage freed now, not between the two counts compared below
    info0 = gert.memory_info(device)
    assert info0.total == total
    in_use0 = gert.host_counters()["device_memory_in_use"]
    bufs = [gert.DeviceBuffer(n) for n in (1, 31, 32, 33, 4096, 100000)]
    info1 = gert.memory_info()
    used = info1.used - info0.used
    assert used == gert.host_counters()["device_memory_in_use"] - in_use0
    assert used >= sum(b.nbytes for b in bufs)
    for b in bufs:
        b.free()
    assert gert.memory_info().used == info0.used
    assert gert.host_counters()["device_memory_in_use"] == in_use0


def test_device_buffer_free_is_idempotent_and_checked():
    buf = gert.DeviceBuffer(64)
    buf.free()
    buf.free()
    assert buf.ptr == 0
    with pytest.raises(gert.AclError) as ei:
        buf.copy_from(np.zeros(8, np.uint8))
    assert ei.value.name == "ACL_ERROR_RT_PARAM_INVALID" and "freed" in ei.value.message
