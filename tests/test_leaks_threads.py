"""No leaks (device memory, streams, threads) over many create/destroy cycles; 16 Python threads sharing one
Device, each with its own streams."""
import gc
import threading

import numpy as np
import pytest

import gert
from gert import _cann
from _helpers import RUNTIME, quiet_thread_count, settled_thread_count

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # reads gert.host_counters()


def baseline(expect_threads=None):
    """(device memory in use, streams alive, threads); with ``expect_threads``, allow the count to settle."""
    gc.collect()
    c = gert.host_counters()
    n = quiet_thread_count() if expect_threads is None else settled_thread_count(expect_threads)
    return c["device_memory_in_use"], c["streams_alive"], n


def test_10k_allocate_free_cycles_return_memory_to_baseline(device):
    mem0, _, threads0 = baseline()
    peak_seen = 0
    for i in range(10_000):
        n = 1 + (i * 7919) % 65536
        b = gert.DeviceBuffer(n, device)
        if i % 1000 == 0:
            peak_seen = max(peak_seen, gert.host_counters()["device_memory_in_use"] - mem0)
            assert peak_seen >= n
        if i % 3 == 0:
            b.free()
        else:
            del b                                   # freed by the destructor
    for i in range(10_000):
        p = _cann.malloc(1 + i % 4099)
        _cann.free(p)
    mem1, _, threads1 = baseline(threads0)
    assert mem1 == mem0
    assert threads1 == threads0


def test_1k_stream_create_destroy_cycles_return_threads_to_baseline(device):
    mem0, streams0, threads0 = baseline()
    src = np.arange(256, dtype=np.uint8)
    out = np.zeros(256, np.uint8)
    ran = []
    for i in range(1000):
        s = gert.Stream(device)
        if i % 100 == 0:                            # one worker thread per stream, nothing else
            assert settled_thread_count(threads0 + 1) == threads0 + 1, i
        if i % 4 == 0:
            b = gert.DeviceBuffer(256, device)
            b.copy_from(src, stream=s)
            b.copy_to(out, stream=s)
        if i % 10 == 0:
            s.launch_host_func(lambda i=i: ran.append(i))   # the worker thread runs Python too
        if i % 2:
            s.destroy()
        else:
            del s                                    # destroyed by the destructor
    del b
    mem1, streams1, threads1 = baseline(threads0)
    assert ran == list(range(0, 1000, 10))
    assert (out == src).all()
    assert streams1 == streams0
    assert threads1 == threads0
    assert mem1 == mem0


def test_events_and_host_buffers_do_not_leak(device):
    mem0, streams0, threads0 = baseline()
    with gert.Stream(device) as s:
        for _ in range(2000):
            ev = gert.Event(device=device)
            ev.record(s)
            s.wait_event(ev)
            hb = gert.HostBuffer(128)
            hb.numpy()[:] = 1
            ev.destroy()
            hb.free()
        s.synchronize()
    assert baseline(threads0) == (mem0, streams0, threads0)


def test_16_threads_share_one_device(device):
    n_threads, iters = 16, 12
    barrier = threading.Barrier(n_threads)
    errors, done = [], []

    def worker(tid):
        try:
            rng = np.random.default_rng(tid)
            s1, s2 = gert.Stream(device), gert.Stream(device)
            log = []
            barrier.wait(30)
            for it in range(iters):
                n = int(rng.integers(1, 50_000))
                data = rng.integers(0, 2**31, n, dtype=np.int32) * (tid + 1)
                a, b = gert.DeviceBuffer(data.nbytes, device), gert.DeviceBuffer(data.nbytes, device)
                out, out_sync = np.zeros_like(data), np.zeros_like(data)
                a.copy_from(data, stream=s1)                     # H2D on s1
                ev = s1.record_event()
                s2.wait_event(ev)                                # s2 waits for s1's copy
                b.copy_from(a, stream=s2)                        # D2D on s2
                b.memset(0xFF, nbytes=4, stream=s2)              # first element -> -1
                b.copy_to(out, stream=s2)                        # D2H on s2
                s2.launch_host_func(lambda it=it: log.append((tid, it)))
                s2.synchronize()
                s1.synchronize()
                a.copy_to(out_sync)                              # synchronous D2H
                want = data.copy()
                want[0] = -1
                np.testing.assert_array_equal(out, want)
                np.testing.assert_array_equal(out_sync, data)
                a.free()
                b.free()
            assert log == [(tid, it) for it in range(iters)]
            s1.destroy()
            s2.destroy()
            done.append(tid)
        except BaseException as e:  # reported by the main thread
            errors.append((tid, e))
            barrier.abort()

    mem0, streams0, threads0 = baseline()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts), "a worker thread hung"
    assert not errors, errors[:3]
    assert sorted(done) == list(range(n_threads))
    assert baseline(threads0) == (mem0, streams0, threads0)


def test_threads_without_an_explicit_device_use_the_open_one(device):
    """Threads that never saw a Device object still work on device 0 (context bound on first use)."""
    results = []

    def worker(k):
        x = np.full(1000, k, np.int16)
        buf = gert.DeviceBuffer(x.nbytes)
        with gert.Stream() as s:
            buf.copy_from(x, stream=s)
            y = np.zeros_like(x)
            buf.copy_to(y, stream=s)
            s.synchronize()
        results.append(bool((y == x).all()))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert results == [True] * 8
