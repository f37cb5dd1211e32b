"""No leaks (device memory, streams, threads) over many create/destroy cycles; 16 Python threads sharing one
Device, each with its own streams.

Threads are compared by identity (their ids in /proc/self/task), not by count: a thread an earlier test left on its
way out can be in the baseline and end during the test (on a loaded machine it did: ``(0, 0, 7) == (0, 0, 8)``), so
a test may end with fewer threads than it started with, never with one it started. The baseline is read once it
stopped changing, and the end state is waited for up to a deadline (a joined thread can stay listed in /proc for a
moment), then checked."""

from __future__ import annotations

import gc
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from gert import _cann

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # reads gert.host_counters()

SETTLE_S = 5.0  # deadline for the baseline to stop changing
STILL_S = 0.05  # how long it must stay unchanged to count as settled
RETURN_S = 10.0  # deadline for the resources to return to the baseline


@dataclass(frozen=True)
class Resources:
    """Device memory in use, streams alive, and the ids of this process's threads."""

    memory: int
    streams: int
    threads: frozenset

    def started_since(self, base: Resources) -> frozenset:
        """Threads alive now that were not in ``base``."""
        return self.threads - base.threads


def thread_ids() -> frozenset:
    return frozenset(int(t) for t in os.listdir("/proc/self/task"))


def thread_names(ids) -> list:
    """'name (id)' of each thread, '?' for one that ended meanwhile (for messages)."""
    out = []
    for tid in sorted(ids):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                out.append(f"{f.read().strip()} ({tid})")
        except OSError:
            out.append(f"? ({tid})")
    return out


def resources() -> Resources:
    c = gert.host_counters()
    return Resources(c["device_memory_in_use"], c["streams_alive"], thread_ids())


def wait_until(done: Callable[[], bool], timeout: float) -> bool:
    """Poll ``done`` until it holds or ``timeout`` seconds passed; whether it held."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
    return True


def baseline(timeout: float = SETTLE_S) -> Resources:
    """The resources once they stayed unchanged for STILL_S (threads of earlier tests may still be starting or
    ending), or as they are at the deadline."""
    gc.collect()
    seen = [resources(), time.monotonic()]

    def still() -> bool:
        now = resources()
        if now != seen[0]:
            seen[:] = [now, time.monotonic()]
            return False
        return time.monotonic() - seen[1] >= STILL_S

    wait_until(still, timeout)
    return seen[0]


def back_to(base: Resources, timeout: float = RETURN_S) -> Resources:
    """The resources once memory and streams are at ``base`` again and no thread started since is listed, or as
    they are at the deadline."""
    gc.collect()
    last = [resources()]

    def returned() -> bool:
        last[0] = now = resources()
        return (now.memory, now.streams) == (base.memory, base.streams) and not now.started_since(base)

    wait_until(returned, timeout)
    return last[0]


def assert_no_leak(base: Resources, timeout: float = RETURN_S) -> None:
    """Memory and streams back at ``base``; fewer threads allowed (a baseline thread that ended), never a new one."""
    now = back_to(base, timeout)
    assert (now.memory, now.streams) == (base.memory, base.streams), (
        f"device memory in use {now.memory} (baseline {base.memory}), streams alive {now.streams} "
        f"(baseline {base.streams})"
    )
    new = now.started_since(base)
    assert not new, (
        f"threads started during the test still alive after {timeout} s: {thread_names(new)} "
        f"({len(now.threads)} threads, baseline {len(base.threads)})"
    )


def test_a_baseline_thread_that_ends_is_not_a_leak():
    """The check itself: a thread alive at the baseline that ends before the check (as an earlier test's thread on
    its way out does) passes; a thread started after the baseline and still alive fails, named."""
    release, keep = threading.Event(), threading.Event()
    leaving = threading.Thread(target=release.wait, name="leaving", daemon=True)
    leaving.start()
    base = baseline()
    release.set()
    leaving.join(10)
    assert_no_leak(base)
    assert len(resources().threads) < len(base.threads)  # fewer than the baseline
    kept = threading.Thread(target=keep.wait, name="kept", daemon=True)
    kept.start()
    try:
        with pytest.raises(AssertionError, match=r"still alive after 0.2 s: \[.python"):
            assert_no_leak(base, timeout=0.2)
    finally:
        keep.set()
        kept.join(10)
    assert_no_leak(base)


def test_10k_allocate_free_cycles_return_memory_to_baseline(device):
    base = baseline()
    mem0 = base.memory
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
            del b  # freed by the destructor
    for i in range(10_000):
        p = _cann.malloc(1 + i % 4099)
        _cann.free(p)
    assert_no_leak(base)


def test_1k_stream_create_destroy_cycles_return_threads_to_baseline(device):
    base = baseline()
    src = np.arange(256, dtype=np.uint8)
    out = np.zeros(256, np.uint8)
    ran = []
    for i in range(1000):
        s = gert.Stream(device)
        if i % 100 == 0:  # one worker thread per stream, nothing else
            # (the previous stream's worker, joined, can stay listed for a moment)
            wait_until(lambda: len(thread_ids() - base.threads) == 1, RETURN_S)
            assert len(thread_ids() - base.threads) == 1, (i, thread_names(thread_ids() - base.threads))
        if i % 4 == 0:
            b = gert.DeviceBuffer(256, device)
            b.copy_from(src, stream=s)
            b.copy_to(out, stream=s)
        if i % 10 == 0:
            s.launch_host_func(lambda i=i: ran.append(i))  # the worker thread runs Python too
        if i % 2:
            s.destroy()
        else:
            del s  # destroyed by the destructor
    del b
    assert ran == list(range(0, 1000, 10))
    assert (out == src).all()
    assert_no_leak(base)


def test_events_and_host_buffers_do_not_leak(device):
    base = baseline()
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
    assert_no_leak(base)


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
                a.copy_from(data, stream=s1)  # H2D on s1
                ev = s1.record_event()
                s2.wait_event(ev)  # s2 waits for s1's copy
                b.copy_from(a, stream=s2)  # D2D on s2
                b.memset(0xFF, nbytes=4, stream=s2)  # first element -> -1
                b.copy_to(out, stream=s2)  # D2H on s2
                s2.launch_host_func(lambda it=it: log.append((tid, it)))
                s2.synchronize()
                s1.synchronize()
                a.copy_to(out_sync)  # synchronous D2H
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
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append((tid, e))
            barrier.abort()

    base = baseline()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts), "a worker thread hung"
    assert not errors, errors[:3]
    assert sorted(done) == list(range(n_threads))
    assert_no_leak(base)


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
