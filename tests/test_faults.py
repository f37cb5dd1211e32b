"""Fault injection in the host NPU (issue 13) at the runtime level: each kind reported with CANN 8.5's codes and in
CANN's way (shared/docs/cann-runtime-rules.md, part 2), and the recovery calls (aclrtStreamAbort,
aclrtDeviceTaskAbort, aclrtResetDeviceForce, aclrtSetStreamFailureMode, aclrtGetLastError/PeekAtLastError)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import gert
from _helpers import RUNTIME, acl_code, assert_runtime_works, run_python_result
from gert import _cann
from models import execute, load, scale_model

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # injects faults into the host NPU

AICORE = 507015  # ACL_ERROR_RT_AICORE_EXCEPTION
SYNC_TIMEOUT = 507046  # ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
OOM = 207001  # ACL_ERROR_RT_MEMORY_ALLOCATION
DMA = 507013  # ACL_ERROR_RT_SYS_DMA
STREAM_ABORT = 107023  # ACL_ERROR_RT_STREAM_ABORT


@pytest.fixture(autouse=True)
def _no_faults_left():
    gert.clear_faults()
    yield
    gert.clear_faults()


@pytest.fixture
def graph(device):
    """A stream with a loaded static graph y = 2x."""
    stream = gert.Stream(device)
    session = gert.Session({})
    gid = load(session, scale_model(2.0), stream, options={"ge.inputShape": "x:2,4"})
    yield session, gid, stream
    session.close()
    stream.destroy()


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 4)).astype(np.float32)


def test_codes_match_cann():
    assert acl_code("ACL_ERROR_RT_AICORE_EXCEPTION") == AICORE
    assert acl_code("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT") == SYNC_TIMEOUT
    assert acl_code("ACL_ERROR_RT_MEMORY_ALLOCATION") == OOM
    assert acl_code("ACL_ERROR_RT_SYS_DMA") == DMA
    assert acl_code("ACL_ERROR_RT_STREAM_ABORT") == STREAM_ABORT
    assert acl_code("ACL_ERROR_RT_DEVICE_TASK_ABORT") == 107022


def test_execute_fault_is_reported_once_by_the_next_sync_then_the_stream_works(graph):
    session, gid, stream = graph
    before = gert.host_counters()["faults"]["execute"]
    gert.inject_fault("execute", after=1)
    x = _x()
    np.testing.assert_array_equal(execute(session, gid, stream, [x])[0], x + x)  # the `after` launch runs
    with pytest.raises(gert.AclError) as e:
        execute(session, gid, stream, [x])  # the launch returned 0; the synchronize reports the fault
    assert e.value.code == AICORE and "injected execute fault 1 of 1" in e.value.message
    assert gert.host_counters()["faults"]["execute"] == before + 1
    stream.synchronize()  # reported once (CONTINUE mode): cleared
    np.testing.assert_array_equal(execute(session, gid, stream, [x])[0], x + x)


def test_sticky_fault_fails_every_launch_on_the_device_until_device_task_abort(graph):
    session, gid, stream = graph
    gert.inject_fault("sticky")
    x = _x(1)
    with pytest.raises(gert.AclError) as e:
        execute(session, gid, stream, [x])
    assert e.value.code == AICORE and "device-wide" in e.value.message
    other = gert.Stream(0)
    buf = gert.DeviceBuffer(64, 0)
    with pytest.raises(gert.AclError) as e:  # a launch on another stream of the device fails at the call
        buf.copy_from(np.zeros(64, np.uint8), stream=other)
    assert e.value.code == AICORE and "aclrtDeviceTaskAbort" in e.value.message
    assert _cann.peek_at_last_error() == AICORE
    with pytest.raises(gert.GertError):  # so does a graph launch
        execute(session, gid, stream, [x])
    with pytest.raises(gert.AclError) as e:  # and a sync of a non-default stream
        other.synchronize()
    assert e.value.code == AICORE
    _cann.device_task_abort(0, 0)
    assert gert.host_counters()["device_task_aborts"] >= 1
    np.testing.assert_array_equal(execute(session, gid, stream, [x])[0], x + x)
    assert_runtime_works(0)
    buf.free()
    other.destroy()


def test_stop_on_failure_mode_makes_a_task_fault_device_wide(graph):
    session, gid, stream = graph
    stream.set_failure_mode(_cann.STOP_ON_FAILURE)
    with pytest.raises(gert.AclError) as e:
        stream.set_failure_mode(_cann.STOP_ON_FAILURE)  # once per stream
    assert e.value.code == acl_code("ACL_ERROR_RT_PARAM_INVALID")
    gert.inject_fault("execute")
    x = _x(2)
    with pytest.raises(gert.AclError):
        execute(session, gid, stream, [x])
    with gert.Stream(0) as s2:
        with pytest.raises(gert.AclError) as e:
            gert.DeviceBuffer(64, 0).copy_from(np.zeros(64, np.uint8), stream=s2)
        assert e.value.code == AICORE
        _cann.device_task_abort(0, 1000)
        s2.synchronize()
    np.testing.assert_array_equal(execute(session, gid, stream, [x])[0], x + x)


def test_hang_times_out_then_stream_abort_ends_it_and_the_stream_is_reused(graph):
    session, gid, stream = graph
    gert.inject_fault("hang", duration_ms=0)  # until aborted
    x = _x(3)
    ins = [gert.DeviceTensor.from_numpy(x, stream)]
    s = session.summary(gid)
    outs = [gert.DeviceTensor.empty(shape, dt) for shape, dt in zip(s.output_shapes, s.output_dtypes)]
    t0 = time.monotonic()
    session.execute_async(gid, stream, ins, outs)  # the launch returns at once: the hang is on the device
    assert time.monotonic() - t0 < 5
    with pytest.raises(gert.AclError) as e:
        stream.synchronize(timeout=0.2)
    assert e.value.code == SYNC_TIMEOUT
    assert not stream.query()  # the task keeps running after a sync timeout
    waiter_codes = []
    waiter = threading.Thread(target=lambda: waiter_codes.append(_sync_code(stream)))
    waiter.start()
    _wait_until_blocked(waiter)  # its synchronize waits for the hung task
    aborts = gert.host_counters()["stream_aborts"]
    stream.abort()
    waiter.join(10)
    assert waiter_codes == [STREAM_ABORT]  # a sync made during the abort
    assert gert.host_counters()["stream_aborts"] == aborts + 1
    assert stream.query()
    np.testing.assert_array_equal(execute(session, gid, stream, [x])[0], x + x)


def _wait_until_blocked(thread: threading.Thread, timeout: float = 30.0, samples: int = 20) -> None:
    """Wait until ``thread`` sleeps in the kernel ``samples`` times in a row, looked at between sleeps of this thread
    (which release the GIL: a thread that only waited for the GIL takes it meanwhile and runs on), i.e. it is blocked
    in a call that released the GIL (here: a synchronize that waits for a hung task)."""
    deadline = time.monotonic() + timeout
    seen = 0
    while seen < samples:
        assert thread.is_alive() and time.monotonic() < deadline, "the thread did not block"
        time.sleep(0.002)
        with open(f"/proc/self/task/{thread.native_id}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        seen = seen + 1 if state == "S" else 0


def _sync_code(stream) -> int:
    try:
        stream.synchronize()
    except gert.AclError as e:
        return e.code
    return 0


def test_hang_with_a_duration_finishes_late_and_correct(graph):
    session, gid, stream = graph
    gert.inject_fault("hang", duration_ms=300)
    x = _x(4)
    t0 = time.monotonic()
    out = execute(session, gid, stream, [x])[0]
    assert time.monotonic() - t0 >= 0.29
    np.testing.assert_array_equal(out, x + x)
    assert gert.host_counters()["faults"]["hang"] >= 1


def test_malloc_fault_returns_207001_then_allocations_work(device):
    gert.inject_fault("malloc", after=1, count=2)
    ok = gert.DeviceBuffer(64, 0)
    for _ in range(2):
        with pytest.raises(gert.AclError) as e:
            gert.DeviceBuffer(64, 0)
        assert e.value.code == OOM and "injected malloc fault" in e.value.message
    assert _cann.get_last_error() == OOM
    assert _cann.get_last_error() == 0  # Get clears it
    gert.DeviceBuffer(64, 0).free()
    ok.free()


def test_memcpy_fault_async_at_the_sync_and_sync_at_the_call(device):
    buf = gert.DeviceBuffer(64, 0)
    src = gert.HostBuffer(64).numpy()  # pinned: the copy is really queued (a pageable one would copy at the call)
    src[:] = np.arange(64, dtype=np.uint8)
    gert.inject_fault("memcpy", count=2)
    with gert.Stream(0) as s:
        buf.copy_from(src, stream=s)  # enqueued without error
        with pytest.raises(gert.AclError) as e:
            s.synchronize()
        assert e.value.code == DMA
        with pytest.raises(gert.AclError) as e:
            buf.copy_from(src)  # a synchronous copy fails at the call
        assert e.value.code == DMA
        buf.copy_from(src, stream=s)
        out = np.zeros(64, np.uint8)
        buf.copy_to(out, stream=s)
        s.synchronize()
    np.testing.assert_array_equal(out, src)
    buf.free()


def test_faults_on_another_device_leave_this_one_alone():
    r = run_python_result(
        """
        import numpy as np, gert
        from gert import _cann
        d0, d1 = gert.Device(0), gert.Device(1)
        gert.inject_fault("sticky", device=1)
        b0, b1 = gert.DeviceBuffer(64, 0), gert.DeviceBuffer(64, 1)
        s0, s1 = gert.Stream(0), gert.Stream(1)
        session = gert.Session({"ge.session_device_id": "1"})
        from models import scale_model, load, execute
        gid = load(session, scale_model(2.0), s1, options={"ge.inputShape": "x:2,4"})
        x = np.ones((2, 4), np.float32)
        codes = []
        try:
            execute(session, gid, s1, [x])
        except gert.AclError as e:
            codes.append(e.code)
        try:
            b1.copy_from(np.zeros(64, np.uint8), stream=s1)
        except gert.AclError as e:
            codes.append(e.code)
        b0.copy_from(np.arange(64, dtype=np.uint8), stream=s0)
        out = np.zeros(64, np.uint8)
        b0.copy_to(out, stream=s0)
        s0.synchronize()
        _cann.reset_device_force(1)
        emit({"codes": codes, "device0": out.tolist() == list(range(64))})
    """,
        env={
            "GERT_HOST_DEVICES": "2",
            "PYTHONPATH": f"{__import__('_helpers').REPO}:{__import__('_helpers').REPO}/tests",
        },
    )
    assert r == {"codes": [AICORE, AICORE], "device0": True}


def test_env_var_arms_faults_and_rejects_a_bad_spec():
    code = """
        import numpy as np, gert
        d = gert.Device(0)
        b = gert.DeviceBuffer(64, 0)
        codes = []
        for _ in range(4):
            try:
                b.copy_from(np.zeros(64, np.uint8))
                codes.append(0)
            except gert.AclError as e:
                codes.append(e.code)
        emit({"codes": codes, "fired": gert.host_counters()["faults"]["memcpy"]})
    """
    r = run_python_result(code, env={"GERT_HOST_FAULTS": "memcpy:after=1:count=2:every=1"})
    assert r == {"codes": [0, DMA, DMA, 0], "fired": 2}
    r = run_python_result(
        """
        import gert
        try:
            gert.Device(0)
            emit("opened")
        except gert.AclError as e:
            emit([e.code, e.message])
    """,
        env={"GERT_HOST_FAULTS": "execute:after=x"},
    )
    assert r[0] == 100000 and "GERT_HOST_FAULTS entry 'execute:after=x'" in r[1]


def test_last_error_level_must_be_thread_level():
    assert _cann.get_last_error(1) == 100000
    assert _cann.peek_at_last_error(1) == 100000


def test_inject_fault_checks_its_arguments():
    with pytest.raises(ValueError, match="kind must be one of"):
        gert.inject_fault("boom")
    with pytest.raises(ValueError, match="after must be >= 0"):
        gert.inject_fault("execute", after=-1)
    with pytest.raises(ValueError, match="device 7 does not exist"):
        gert.inject_fault("execute", device=7)


def test_every_nth_launch(device):
    buf = gert.DeviceBuffer(64, 0)
    gert.inject_fault("memcpy", after=2, every=3, count=3)
    codes = []
    for _ in range(14):
        try:
            buf.copy_from(np.zeros(64, np.uint8))
            codes.append(0)
        except gert.AclError as e:
            codes.append(e.code)
    assert [i for i, c in enumerate(codes) if c] == [2, 5, 8]  # from the 3rd copy on, every 3rd, 3 times
    buf.free()
