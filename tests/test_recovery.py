"""gert.Model through device faults (issue 13): a failed task fails only its request; a device-wide failure is
recovered (aclrtDeviceTaskAbort, new streams and Sessions) while the other device serves; request timeouts abort
and reuse the stuck stream; close() returns in time with a hung stream; out of device memory releases caches and
retries once. Faults come from the host NPU's injection (gert.inject_fault)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import gert
from _helpers import REPO, RUNTIME, run_python_result
from gert.errors import DeviceUnavailable, RequestTimeout
from gert.recovery import error_class
from models import scale_model

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # injects faults into the host NPU

AICORE = 507015


@pytest.fixture(autouse=True)
def _no_faults_left():
    gert.clear_faults()
    yield
    gert.clear_faults()


def _x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 4)).astype(np.float32)


@pytest.fixture
def model(device):
    m = gert.load(scale_model(2.0, shape=("batch", 4)), gears={"batch": [1, 4, 8, 16]})
    m.warmup()
    yield m
    m.close()


def test_a_failed_task_fails_only_its_request(model):
    gert.inject_fault("execute", after=2)
    results = []
    for i in range(5):
        x = _x(3, i)
        try:
            np.testing.assert_array_equal(model.run({"x": x})["y"], x * 2)
            results.append("ok")
        except gert.AclError as e:
            results.append((e.code, "injected execute fault" in e.message))
    assert results == ["ok", "ok", (AICORE, True), "ok", "ok"]
    st = model.stats()
    assert (st["failed_tasks"], st["recoveries"], st["timeouts"]) == (1, 0, 0)
    assert error_class(gert.AclError(AICORE, "x")) == "internal"


def test_request_timeout_aborts_and_reuses_the_stream(device):
    m = gert.load(scale_model(2.0, shape=("batch", 4)), gears={"batch": [4]}, request_timeout_s=0.3)
    try:
        m.warmup()
        gert.inject_fault("hang", duration_ms=0)  # until aborted
        t0 = time.monotonic()
        with pytest.raises(RequestTimeout) as e:
            m.run({"x": _x(2, 0)})
        assert time.monotonic() - t0 < 30  # a deadline: the hang lasts until aborted
        assert "0.3 s on device 0 stream 0" in str(e.value) and "507046" in str(e.value)
        assert error_class(e.value) == "unavailable"
        x = _x(4, 1)
        np.testing.assert_array_equal(m.run({"x": x})["y"], x * 2)  # the same stream, aborted and reused
        gert.inject_fault("hang", duration_ms=0)
        with pytest.raises(RequestTimeout, match="0.1 s"):
            m.submit({"x": x}, timeout=0.1).result(10)  # per request
        st = m.stats()
        assert st["timeouts"] == 2 and st["aborted_streams"] >= 2 and st["failed_tasks"] == 0
        with pytest.raises(gert.GertError, match="timeout must be > 0"):
            m.run({"x": x}, timeout=0)
    finally:
        m.close()


def test_request_timeout_on_a_dynamic_graph(device):
    """GE's run of a dynamic graph waits inside ExecuteGraphWithStreamAsync (it sizes the outputs): the timeout
    aborts the stream there too."""
    m = gert.load(scale_model(2.0, shape=("batch", 4)), shape_policy={"batch": "dynamic"}, request_timeout_s=0.3)
    try:
        x = _x(3, 6)
        np.testing.assert_array_equal(m.run({"x": x})["y"], x * 2)
        gert.inject_fault("hang", duration_ms=120_000)  # without the abort the run would succeed, 2 minutes late
        t0 = time.monotonic()
        with pytest.raises(RequestTimeout, match="0.3 s on device 0"):
            m.run({"x": x})
        assert time.monotonic() - t0 < 60  # a deadline: the abort ended the hang, not its 120 s
        np.testing.assert_array_equal(m.run({"x": x})["y"], x * 2)
        assert m.stats()["timeouts"] == 1
    finally:
        m.close()


def test_close_returns_within_its_timeout_with_a_hung_stream(device):
    m = gert.load(scale_model(2.0, shape=("batch", 4)), gears={"batch": [4]})
    m.warmup()
    hangs = gert.host_counters()["faults"]["hang"]
    gert.inject_fault("hang", duration_ms=0)
    fut = m.submit({"x": _x(4, 2)})
    deadline = time.monotonic() + 5
    while gert.host_counters()["faults"]["hang"] == hangs and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    m.close(timeout=0.5)
    assert time.monotonic() - t0 < 30  # a deadline: the hang lasts until aborted, so a close that waited never returns
    with pytest.raises(gert.GertError):
        fut.result(5)


def test_out_of_memory_on_a_buffer_grow_releases_caches_and_retries_once(model):
    x = _x(1, 3)
    np.testing.assert_array_equal(model.run({"x": x})["y"], x * 2)
    gert.inject_fault("malloc", count=1)
    x8 = _x(8, 4)
    np.testing.assert_array_equal(model.run({"x": x8})["y"], x8 * 2)  # grows its buffers: the retry succeeds
    assert model.stats()["oom_retries"] == 1
    gert.inject_fault("malloc", count=2)  # the retry fails too: the request fails, the model keeps serving
    x16 = _x(16, 5)
    with pytest.raises(gert.AclError) as e:
        model.run({"x": x16})
    assert e.value.code == 207001 and error_class(e.value) == "internal"
    assert model.stats()["oom_retries"] == 2
    np.testing.assert_array_equal(model.run({"x": x16})["y"], x16 * 2)
    np.testing.assert_array_equal(model.run({"x": x8})["y"], x8 * 2)
    np.testing.assert_array_equal(model.run({"x": x})["y"], x * 2)


def test_device_failure_is_recovered_while_the_other_device_serves():
    r = run_python_result(
        """
        import threading, time
        import numpy as np, gert
        from gert.errors import DeviceUnavailable
        from models import scale_model
        m = gert.load(scale_model(2.0, shape=("batch", 4)), devices=(0, 1), gears={"batch": [4]})
        m.warmup()
        gert.inject_fault("sticky", device=1, after=3)
        outcomes, lock = [], threading.Lock()
        def client(seed):
            rng = np.random.default_rng(seed)
            for _ in range(30):
                x = rng.standard_normal((4, 4)).astype(np.float32)
                try:
                    ok = bool((m.run({"x": x})["y"] == x * 2).all())
                    with lock: outcomes.append("ok" if ok else "wrong")
                except gert.AclError as e:
                    with lock: outcomes.append(("acl", e.code))
                except DeviceUnavailable:
                    with lock: outcomes.append("unavailable")
        ts = [threading.Thread(target=client, args=(s,)) for s in range(4)]
        [t.start() for t in ts]; [t.join() for t in ts]
        before = [s["requests"] for s in m.stats()["streams"]]
        after_ok = all((m.run({"x": np.ones((4, 4), np.float32)})["y"] == 2).all() for _ in range(10))
        st = m.stats()
        served = [s["requests"] - b for s, b in zip(st["streams"], before)]
        m.close()
        emit({"wrong": outcomes.count("wrong"), "ok": outcomes.count("ok"),
              "failed": sorted({str(o) for o in outcomes if o not in ("ok", "wrong")}),
              "recoveries": st["recoveries"], "failed_tasks": st["failed_tasks"], "after_ok": after_ok,
              "both_serve_after": all(n > 0 for n in served)})
    """,
        env={"GERT_HOST_DEVICES": "2", "PYTHONPATH": f"{REPO}:{REPO}/tests"},
        timeout=120,
    )
    assert r["wrong"] == 0
    assert r["recoveries"] == 1, r
    assert r["failed_tasks"] >= 1 and r["ok"] >= 120 - 8, r
    assert set(r["failed"]) <= {str(("acl", AICORE)), "unavailable"}, r
    assert r["after_ok"] and r["both_serve_after"], r


def test_a_run_a_recovery_aborts_runs_again_on_the_other_device():
    """A request hung on device 1 when another request's device-wide fault there sets off its recovery: the
    recovery's aclrtDeviceTaskAbort ends the hung run (ACL_ERROR_RT_DEVICE_TASK_ABORT), which was not that request's
    fault, so it runs again on device 0 and returns its own rows; only the request whose launch failed fails."""
    r = run_python_result(
        """
        import threading, time
        import numpy as np, gert
        from models import scale_model
        m = gert.load(scale_model(2.0, shape=("batch", 4)), devices=(0, 1), streams=2, gears={"batch": [4]})
        m.warmup()
        q = m.pool.queue
        zero = [w for w in m.pool.workers if w.device == 0]
        held = [q.acquire(zero) for _ in zero]  # device 0 busy: the requests below go to device 1
        def hangs():
            return gert.host_counters()["faults"]["hang"]
        h0 = hangs()
        gert.inject_fault("hang", device=1, count=1, duration_ms=30000)
        x = np.arange(16, dtype=np.float32).reshape(4, 4)
        out = {}
        def call(name, v):
            try:
                out[name] = bool((m.run({"x": v})["y"] == v * 2).all())
            except gert.AclError as e:
                out[name] = ("acl", e.code)
        a = threading.Thread(target=call, args=("hung", x)); a.start()
        t = time.time()
        while hangs() == h0 and time.time() - t < 30: time.sleep(0.01)
        gert.inject_fault("sticky", device=1)
        call("faulted", x + 1)  # on device 1's other stream: its launch fails, the device is recovered
        for w in held: q.release(w)
        a.join(60)
        st = m.stats()
        m.close()
        emit({"out": out, "alive": a.is_alive(), "recoveries": st["recoveries"],
              "served_by_0": sum(s["requests"] for s in st["streams"] if s["device"] == 0)})
    """,
        env={"GERT_HOST_DEVICES": "2", "PYTHONPATH": f"{REPO}:{REPO}/tests"},
        timeout=120,
    )
    assert not r["alive"] and r["recoveries"] == 1, r
    assert r["out"] == {"hung": True, "faulted": ["acl", AICORE]}, r
    assert r["served_by_0"] >= 1, r


def test_no_device_to_take_the_request_is_unavailable(model):
    """While every device of the model is being recovered, a request fails at once with DeviceUnavailable (a server
    answers UNAVAILABLE: retry later) instead of waiting; once the device is back it serves."""
    model.pool.recovery._recovering.add(0)  # as _recover() marks it while aclrtDeviceTaskAbort and the rebuild run
    try:
        with pytest.raises(DeviceUnavailable, match=r"device\(s\) \[0\] are being recovered") as e:
            model.run({"x": _x(1, 7)})
        assert error_class(e.value) == "unavailable"
    finally:
        model.pool.recovery._recovering.discard(0)
    x = _x(2, 8)
    np.testing.assert_array_equal(model.run({"x": x})["y"], x * 2)
