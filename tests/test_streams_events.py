"""Streams, events and host functions: ordering across streams (property test), event status and timing,
host-function errors, draining on destroy."""

import gc
import os
import shutil
import subprocess
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gert
from _helpers import REPO, RUNTIME, assert_runtime_works

pytestmark = RUNTIME

# ---- ordering: random programs over several streams vs. their sequential meaning ----------------------

NBYTES = 24
N_BUFS = 3
N_SLOTS = 2


def op_strategy(n_streams):
    s = st.integers(0, n_streams - 1)
    buf = st.integers(0, N_BUFS - 1)
    slot = st.integers(0, N_SLOTS - 1)
    byte = st.integers(0, 255)
    return st.one_of(
        st.tuples(st.just("h2d"), s, buf, byte),  # buf <- constant host array
        st.tuples(st.just("h2d_slot"), s, buf, slot),  # buf <- host slot (read when it runs)
        st.tuples(st.just("d2h"), s, buf, slot),  # slot <- buf
        st.tuples(st.just("d2d"), s, buf, buf).filter(lambda t: t[2] != t[3]),  # buf a <- buf b
        st.tuples(st.just("memset"), s, buf, byte, st.integers(1, NBYTES)),  # first n bytes of buf <- v
        st.tuples(st.just("hf_log"), s, slot),  # host func: log.append(slot contents)
        st.tuples(st.just("hf_write"), s, slot, byte),  # host func: slot[:] = v
        st.tuples(st.just("hf_bump"), s, slot, st.integers(1, 9)),  # host func: slot += k (order-sensitive)
        st.tuples(st.just("sleep"), s, st.sampled_from([0.0005, 0.002])),  # host func: delay this stream
    )


@st.composite
def programs(draw):
    n_streams = draw(st.integers(2, 4))
    ops = draw(st.lists(op_strategy(n_streams), min_size=1, max_size=40))
    return n_streams, ops


def resources(op):
    kind = op[0]
    if kind == "h2d":
        return [("buf", op[2])]
    if kind in ("h2d_slot", "d2h"):
        return [("buf", op[2]), ("slot", op[3])]
    if kind == "d2d":
        return [("buf", op[2]), ("buf", op[3])]
    if kind == "memset":
        return [("buf", op[2])]
    if kind == "hf_log":
        return [("log", 0), ("slot", op[2])]
    if kind in ("hf_write", "hf_bump"):
        return [("slot", op[2])]
    return []  # sleep


def sequential_model(ops):
    """What the program means when its ops run one after another in program order."""
    bufs = [np.zeros(NBYTES, np.uint8) for _ in range(N_BUFS)]
    slots = [np.zeros(NBYTES, np.uint8) for _ in range(N_SLOTS)]
    log = []
    for op in ops:
        kind = op[0]
        if kind == "h2d":
            bufs[op[2]][:] = op[3]
        elif kind == "h2d_slot":
            bufs[op[2]][:] = slots[op[3]]
        elif kind == "d2h":
            slots[op[3]][:] = bufs[op[2]]
        elif kind == "d2d":
            bufs[op[2]][:] = bufs[op[3]]
        elif kind == "memset":
            bufs[op[2]][: op[4]] = op[3]
        elif kind == "hf_log":
            log.append(bytes(slots[op[2]]))
        elif kind == "hf_write":
            slots[op[2]][:] = op[3]
        elif kind == "hf_bump":
            slots[op[2]] += np.uint8(op[3])
    return bufs, slots, log


def pinned(n: int) -> np.ndarray:
    """n zero bytes of page-locked host memory (aclrtMallocHost), as a numpy array that keeps it alive."""
    a = gert.HostBuffer(n).numpy()
    a[:] = 0
    return a


def run_on_streams(device, n_streams, ops, with_waits=True):
    """Issue the program on real streams. Every op first waits for the event recorded after the previous op
    that touched any of its resources (buffers, host slots, the log), so its result is fully determined by
    stream order plus those cross-stream waits. All streams start behind a gate, so nothing runs until the
    whole program is queued: only the waits can order work across streams. Host memory is pinned (HostBuffer):
    CANN 8.5 queues copies only from and to aclrtMallocHost memory (pageable ones synchronize the stream first,
    which here would wait for the gate)."""
    streams = [gert.Stream(device) for _ in range(n_streams)]
    gate = threading.Event()
    bufs = [gert.DeviceBuffer(NBYTES, device) for _ in range(N_BUFS)]
    for b in bufs:
        b.memset(0)
    slots = [pinned(NBYTES) for _ in range(N_SLOTS)]
    log = []
    last = {}
    try:
        for s in streams:
            s.launch_host_func(lambda: gate.wait(30))
        for op in ops:
            s = streams[op[1]]
            res = resources(op)
            if with_waits:
                for ev in {id(last[r]): last[r] for r in res if r in last}.values():
                    s.wait_event(ev)
            kind = op[0]
            if kind == "h2d":
                src = pinned(NBYTES)
                src[:] = op[3]
                bufs[op[2]].copy_from(src, stream=s)
            elif kind == "h2d_slot":
                bufs[op[2]].copy_from(slots[op[3]], stream=s)
            elif kind == "d2h":
                bufs[op[2]].copy_to(slots[op[3]], stream=s)
            elif kind == "d2d":
                bufs[op[2]].copy_from(bufs[op[3]], stream=s)
            elif kind == "memset":
                bufs[op[2]].memset(op[3], nbytes=op[4], stream=s)
            elif kind == "hf_log":
                slot = slots[op[2]]
                s.launch_host_func(lambda slot=slot: log.append(bytes(slot)))
            elif kind == "hf_write":
                slot, v = slots[op[2]], op[3]
                s.launch_host_func(lambda slot=slot, v=v: slot.fill(v))
            elif kind == "hf_bump":
                slot, k = slots[op[2]], np.uint8(op[3])
                s.launch_host_func(lambda slot=slot, k=k: slot.__iadd__(k))
            elif kind == "sleep":
                s.launch_host_func(lambda t=op[2]: time.sleep(t))
            if res:
                ev = gert.Event(device=device)
                ev.record(s)
                for r in res:
                    last[r] = ev
        gate.set()
        for s in streams:
            s.synchronize(timeout=30)
        got_bufs = []
        for b in bufs:
            out = np.empty(NBYTES, np.uint8)
            b.copy_to(out)
            got_bufs.append(out)
        return got_bufs, slots, log
    finally:
        gate.set()
        for s in streams:
            s.destroy()


@settings(max_examples=300)
@given(prog=programs())
def test_random_programs_match_sequential_semantics(device, prog):
    n_streams, ops = prog
    want_bufs, want_slots, want_log = sequential_model(ops)
    got_bufs, got_slots, got_log = run_on_streams(device, n_streams, ops)
    for i in range(N_BUFS):
        np.testing.assert_array_equal(got_bufs[i], want_bufs[i], err_msg=f"device buffer {i}")
    for i in range(N_SLOTS):
        np.testing.assert_array_equal(got_slots[i], want_slots[i], err_msg=f"host slot {i}")
    assert got_log == want_log


def test_the_ordering_check_detects_missing_waits(device):
    """The property above can fail: the same program without its event waits gives a different result."""
    ops = [("sleep", 0, 0.25), ("h2d", 0, 0, 7), ("d2h", 1, 0, 0), ("hf_log", 1, 0)]
    want = sequential_model(ops)
    got = run_on_streams(device, 2, ops, with_waits=False)
    assert got[2] != want[2]  # stream 1 read buffer 0 before stream 0 wrote it
    got = run_on_streams(device, 2, ops, with_waits=True)
    assert got[2] == want[2] == [bytes([7] * NBYTES)]


# ---- events ------------------------------------------------------------------------------------------


def test_event_query_and_synchronize(streams):
    s = streams[0]
    ev = gert.Event()
    assert ev.query() is True  # never recorded: complete
    gate = threading.Event()
    s.launch_host_func(lambda: gate.wait(10))
    ev.record(s)
    assert ev.query() is False
    assert s.query() is False
    with pytest.raises(gert.AclError) as ei:
        ev.synchronize(timeout=0.05)
    assert ei.value.code == 507047 and ei.value.name == "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT"
    assert "did not complete" in ei.value.message
    gate.set()
    ev.synchronize()
    assert ev.query() is True
    s.synchronize()
    assert s.query() is True


def test_cross_stream_wait_blocks_until_the_record_ran(streams):
    a, b = streams[0], streams[1]
    gate = threading.Event()
    log = []
    a.launch_host_func(lambda: gate.wait(10))
    a.launch_host_func(lambda: log.append("a"))
    ev = a.record_event()
    b.wait_event(ev)
    b.launch_host_func(lambda: log.append("b"))
    time.sleep(0.05)
    assert log == [] and b.query() is False
    gate.set()
    b.synchronize()
    assert log == ["a", "b"]
    a.synchronize()


def test_wait_on_a_never_recorded_event_does_not_block(streams):
    ev = gert.Event()
    log = []
    streams[2].wait_event(ev)
    streams[2].launch_host_func(lambda: log.append(1))
    streams[2].synchronize(timeout=5)
    assert log == [1]


def test_wait_captures_the_record_current_at_the_call(streams):
    a, b, c = streams
    gate = threading.Event()
    log = []
    ev = gert.Event()
    a.launch_host_func(lambda: gate.wait(10))
    a.launch_host_func(lambda: log.append("a"))
    ev.record(a)  # record #1: completes after a's work
    c.wait_event(ev)  # waits for record #1
    c.launch_host_func(lambda: log.append("c"))
    ev.record(b)  # record #2 on an idle stream: completes at once
    b.synchronize()
    try:
        with pytest.raises(gert.AclError) as ei:  # c must still be blocked behind a's gated work
            c.synchronize(timeout=1.0)
        assert ei.value.code == 507046
        assert log == []
    finally:
        gate.set()
        a.synchronize()
        c.synchronize()
    assert log == ["a", "c"]


def test_elapsed_ms(streams):
    s = streams[0]
    start, end = gert.Event(timing=True), gert.Event(timing=True)
    start.record(s)
    s.launch_host_func(lambda: time.sleep(0.05))
    end.record(s)
    s.synchronize()
    ms = start.elapsed_ms(end)
    assert 45 <= ms < 5000, ms
    assert end.elapsed_ms(start) == pytest.approx(-ms, abs=1e-3)


def test_elapsed_ms_errors(streams):
    s = streams[0]
    plain_a, plain_b = gert.Event(), gert.Event()
    plain_a.record(s)
    plain_b.record(s)
    s.synchronize()
    with pytest.raises(gert.AclError) as ei:
        plain_a.elapsed_ms(plain_b)
    assert ei.value.code == 107000 and ei.value.name == "ACL_ERROR_RT_PARAM_INVALID"
    assert "ACL_EVENT_TIME_LINE" in ei.value.message
    t1, t2 = gert.Event(timing=True), gert.Event(timing=True)
    with pytest.raises(gert.AclError) as ei:
        t1.elapsed_ms(t2)
    assert ei.value.code == 507006 and ei.value.name == "ACL_ERROR_RT_EVENT_NOT_COMPLETE"
    assert "never been recorded" in ei.value.message
    gate = threading.Event()
    t1.record(s)
    s.launch_host_func(lambda: gate.wait(10))
    t2.record(s)
    with pytest.raises(gert.AclError) as ei:
        t1.elapsed_ms(t2)
    assert ei.value.code == 507006 and "not completed" in ei.value.message
    gate.set()
    s.synchronize()
    assert t1.elapsed_ms(t2) >= 0


def test_destroyed_event_is_refused(streams):
    ev = gert.Event()
    ev.destroy()
    ev.destroy()  # idempotent
    with pytest.raises(gert.AclError) as ei:
        ev.record(streams[0])
    assert ei.value.code == 107000 and "destroyed" in ei.value.message
    with pytest.raises(gert.AclError):
        streams[0].wait_event(ev)


# ---- host functions and stream life ------------------------------------------------------------------


def test_host_functions_run_in_stream_order(streams):
    logs = {i: [] for i in range(3)}
    for k in range(200):
        for i, s in enumerate(streams):
            s.launch_host_func(lambda i=i, k=k: logs[i].append(k))
    for s in streams:
        s.synchronize()
    for i in range(3):
        assert logs[i] == list(range(200))


def test_host_function_exception_is_reported_then_cleared(streams):
    s = streams[1]
    ran = []

    def boom():
        raise KeyError("from a host function")

    s.launch_host_func(boom)
    s.launch_host_func(lambda: ran.append(1))  # later work still runs
    with pytest.raises(gert.HostFunctionError) as ei:
        s.synchronize()
    assert len(ei.value.errors) == 1 and isinstance(ei.value.errors[0], KeyError)
    assert "from a host function" in str(ei.value)
    assert ran == [1]
    s.synchronize()  # reported once
    assert_runtime_works()


def test_launch_host_func_requires_a_callable(streams):
    with pytest.raises(TypeError, match="callable"):
        streams[0].launch_host_func(42)


def test_host_function_objects_are_released_after_running(streams):
    class Probe:
        def __call__(self):
            pass

    p = Probe()
    ref = weakref.ref(p)
    streams[0].launch_host_func(p)
    del p
    streams[0].synchronize()
    gc.collect()
    assert ref() is None


def test_destroy_drains_pending_work(device):
    log = []
    s = gert.Stream(device)
    buf = gert.DeviceBuffer(1 << 20, device)
    src = pinned(1 << 20)  # pinned: the copy is queued behind the sleep
    src[:] = 3
    s.launch_host_func(lambda: time.sleep(0.05))
    buf.copy_from(src, stream=s)
    s.launch_host_func(lambda: log.append("last"))
    s.destroy()
    assert log == ["last"]
    out = np.zeros(1 << 20, np.uint8)
    buf.copy_to(out)
    assert (out == 3).all()
    s.destroy()  # idempotent


def test_stream_context_manager_and_device_synchronize(device):
    log = []
    with gert.Stream(device) as s1, gert.Stream(device) as s2:
        s1.launch_host_func(lambda: (time.sleep(0.02), log.append(1)))
        s2.launch_host_func(lambda: (time.sleep(0.02), log.append(2)))
        device.synchronize()
        assert sorted(log) == [1, 2]
    assert s1.handle == 0 and s2.handle == 0


def test_destroy_stream_from_its_own_host_function_asan(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler to build the AddressSanitizer probe")
    drv = tmp_path / "drv.cpp"
    drv.write_text(r"""
#include "acl/acl.h"
#include <chrono>
#include <cstdio>
#include <thread>
static aclrtStream g_stream;
static void destroy_self(void *) { std::printf("destroy=%d\n", aclrtDestroyStream(g_stream)); }
static void after(void *) { std::printf("after\n"); }
int main() {
  if (aclInit(nullptr) || aclrtSetDevice(0) || aclrtCreateStream(&g_stream)) return 3;
  aclrtLaunchHostFunc(g_stream, destroy_self, nullptr);
  aclrtLaunchHostFunc(g_stream, after, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::printf("done\n");
  return 0;
}
""")
    hostnpu = os.path.join(REPO, "cbindings", "hostnpu")
    sources = sorted(os.path.join(hostnpu, f) for f in os.listdir(hostnpu) if f.endswith(".cpp"))
    exe = tmp_path / "drv"
    flags = ["-std=c++17", "-O0", "-g", "-fsanitize=address", "-fno-omit-frame-pointer"]
    includes = ["-I", os.path.join(REPO, "cbindings", "include"), "-I", hostnpu]

    def compile_one(k_src):  # each source to its object, the CPUs' worth at a time (one g++ did them in turn: 50 s)
        k, src = k_src
        obj = str(tmp_path / f"{k}.o")
        done = subprocess.run(
            [cxx, *flags, *includes, "-c", src, "-o", obj], capture_output=True, text=True, timeout=900
        )
        return obj, done

    with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
        compiled = list(pool.map(compile_one, enumerate([str(drv), *sources])))
    failed = next((done for _, done in compiled if done.returncode != 0), None)
    build = failed or subprocess.run(
        [cxx, *flags, *[obj for obj, _ in compiled], "-pthread", "-o", str(exe)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if build.returncode != 0 and ("sanitize" in build.stderr or "asan" in build.stderr.lower()):
        pytest.skip("the compiler cannot build with -fsanitize=address")
    assert build.returncode == 0, build.stderr
    run = subprocess.run(
        [str(exe)], capture_output=True, text=True, timeout=60, env={**os.environ, "ASAN_OPTIONS": "detect_leaks=0"}
    )
    assert "AddressSanitizer" not in run.stderr, run.stderr[:3000]
    assert run.returncode == 0 and "destroy=0" in run.stdout and "done" in run.stdout, run.stdout + run.stderr
