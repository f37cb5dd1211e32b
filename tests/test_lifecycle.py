"""Who owns a stream's and a sequence's life (issue 31, R1-R3, R5-R7, R10): close() racing sequence creation,
stuck steps and requests, warmup and background compiles; device recoveries and OOM retries racing the graph table;
the dynamic-graph timeout watchdog.

Every race is forced deterministically: a hook holds one side (a build, a compile, a write of a state, a failed
request) at the point where the other side must act, and the test releases it once that side has acted. A hang
fails at a deadline: the scenario runs in daemon threads joined with a timeout.
"""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest
from onnx import helper

import gert
from _helpers import RUNTIME
from gert import recovery
from gert._ort_provider import OrtGraphProvider
from gert.errors import AclError, GertError
from gert.sequence import Sequences
from models import make_model, scale_model, vi
from recurrent_models import gru_model

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # faults and counters of the host NPU

WAIT = 20.0  # seconds: the deadline of every scenario here (never reached when things work)


def device_used() -> int:
    """Device 0's used bytes, after the garbage collector ran: buffers an earlier test in this process left to it are
    freed first, so they are not counted for or against the test."""
    gc.collect()
    return gert.memory_info(0).used


@pytest.fixture(autouse=True)
def _no_faults_left():
    gert.clear_faults()
    yield
    gert.clear_faults()


def _thread(target, *args) -> threading.Thread:
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


def _call(result: dict, name: str, fn, *args, **kwargs) -> None:
    """fn(*args) into result[name]: its return value, or the exception it raised."""
    try:
        result[name] = fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - examined by the test
        result[name] = e


def _wait_for(cond, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _hang_started(before: int) -> bool:
    return gert.host_counters()["faults"]["hang"] > before


def _session_closed(w) -> bool:
    try:
        _ = w.session.session_id  # raises once the session is closed
    except gert.GeError:
        return True
    return False


def _length_model() -> bytes:
    """y = x + 1 with x [1, L]: one dynamic dim that is not a batch."""
    return make_model(
        [helper.make_node("Add", ["x", "one"], ["y"])],
        [vi("x", np.float32, [1, "L"])],
        [vi("y", np.float32, [1, "L"])],
        [helper.make_tensor("one", 1, [], [1.0])],
        name="addone_l",
    )


def _l(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.float32)[None]


# ---- R1: Sequences.create racing close() ---------------------------------------------------------------------------


def test_a_sequence_created_while_the_model_closes_fails_cleanly_and_frees_its_state(monkeypatch):
    """create() writes the state outside its lock; a close() that ran meanwhile is seen when the sequence would join
    the live set: create raises 'closed' and frees the state (it used to close the sequence under the lock that
    close -> forget takes again, a deadlock)."""
    used = device_used()
    m = gert.load(gru_model(), state={"h": "h_out"}, batch_dim="N")
    writing, closed = threading.Event(), threading.Event()
    orig = Sequences.write_state

    def write_state(self, seq, state):
        orig(self, seq, state)
        writing.set()
        assert closed.wait(WAIT)

    monkeypatch.setattr(Sequences, "write_state", write_state)
    res: dict = {}
    creator = _thread(_call, res, "create", m.sequence)
    assert writing.wait(WAIT)
    closer = _thread(_call, res, "close", m.close)
    closer.join(WAIT)
    assert not closer.is_alive(), "close() waited for a sequence being created"
    closed.set()
    creator.join(WAIT)
    assert not creator.is_alive(), "model.sequence() deadlocked against close()"
    assert isinstance(res["create"], GertError) and "closed" in str(res["create"])
    assert device_used() == used


# ---- R5: close(timeout) with a stuck stateful step ----------------------------------------------------------------


def test_close_with_a_stuck_step_returns_within_its_timeout_and_frees_the_states():
    used = device_used()
    m = gert.load(gru_model(), state={"h": "h_out"}, batch_dim="N")
    s = m.sequence()
    x = np.ones((1, 1, 4), np.float32)
    s.run({"x": x})
    hangs = gert.host_counters()["faults"]["hang"]
    gert.inject_fault("hang", count=1)  # the next kernel runs only once its stream is aborted
    res: dict = {}
    stepper = _thread(_call, res, "step", s.run, {"x": x})
    _wait_for(lambda: _hang_started(hangs), "the step to hang")
    closer = _thread(_call, res, "close", m.close, 0.5)
    closer.join(WAIT)
    assert not closer.is_alive(), "close(timeout=0.5) did not return with a stuck step"
    stepper.join(WAIT)
    assert not stepper.is_alive()
    assert isinstance(res["step"], gert.GertError)  # its stream was aborted by close
    assert s.closed and device_used() == used


# ---- R6: close(timeout) with a stuck request never escalates to the device ------------------------------------------


def test_close_aborting_a_stuck_request_never_recovers_the_device_under_another_model():
    """close() aborts the stuck request's stream; the request fails after close() returned (forced by a hook that
    holds the failed request until then). Its stream is not destroyed under it, and its failure is the close's
    doing, not a device failure: no aclrtDeviceTaskAbort, which would fail every other model's requests."""
    x = np.ones((2, 4), np.float32)
    other = gert.load(scale_model(3.0, name="other"), streams=1)
    m = gert.load(scale_model(2.0), streams=1)
    other.run({"x": x})
    m.run({"x": x})
    w = m.pool.workers[0]
    m._hot.enabled = False  # the hook below wraps Worker.run: the Python path (the compiled one: tests/test_hotpath.py)
    real_run, failed, closed = w.run, threading.Event(), threading.Event()

    def run(req):  # Worker.run, holding the failure until close() returned
        try:
            return real_run(req)
        except BaseException:
            failed.set()
            closed.wait(WAIT)
            raise

    w.run = run
    before = gert.host_counters()
    hangs = before["faults"]["hang"]
    gert.inject_fault("hang", count=1)
    res: dict = {}
    runner = _thread(_call, res, "run", m.run, {"x": x})
    _wait_for(lambda: _hang_started(hangs), "the request to hang")
    closer = _thread(_call, res, "close", m.close, 0.3)
    closer.join(WAIT)
    assert not closer.is_alive(), "close(timeout=0.3) waited for the stuck request"
    _wait_for(failed.is_set, "the aborted request to fail")
    assert not w.closed, "the stream was closed under the request still using it"
    closed.set()
    runner.join(WAIT)
    assert not runner.is_alive()
    assert isinstance(res["run"], AclError) and res["run"].code in recovery.RECOVERING_CODES
    assert w.closed  # closed by the request when it let go
    after = gert.host_counters()
    assert after["device_task_aborts"] == before["device_task_aborts"]
    assert m.pool.recovery.stats.recoveries == 0
    np.testing.assert_array_equal(other.run({"x": x})["y"], x * 3)
    other.close()
    assert gert.host_counters()["streams_alive"] == before["streams_alive"] - 2


class _DestroyedStream:
    def synchronize(self, timeout=None) -> None:
        raise GertError("the stream was destroyed")

    def abort(self) -> None:
        pass


class _FailingWorker:
    """A worker whose request fails on the device and whose stream then fails every call (as a stream destroyed
    by a close): the pattern that reads as a device-wide failure."""

    device, index = 0, 0
    stream = _DestroyedStream()

    def run(self, req):
        raise AclError(507015, "the task failed")

    def reopen(self) -> None:
        raise AssertionError("a closing model's worker was reopened")


def test_a_closing_models_failed_request_is_never_taken_for_a_device_failure():
    w = _FailingWorker()
    rec = recovery.Recovery(lambda: [w])
    rec.close()
    aborts = gert.host_counters()["device_task_aborts"]
    with pytest.raises(AclError):
        rec.run(w, object())
    assert gert.host_counters()["device_task_aborts"] == aborts and rec.stats.recoveries == 0


def test_close_while_threads_step_and_create_sequences_ends_every_thread_and_frees_every_state():
    """The stress scenario of the review (many threads stepping, creating and closing sequences as the model
    closes), bounded: every thread ends, with a result or a GertError, and the device memory comes back."""
    used = device_used()
    x = np.ones((1, 1, 4), np.float32)
    for wait_s in (0.0, 0.002):
        m = gert.load(gru_model(), state={"h": "h_out"}, batch_dim="N", streams=2, sequence_wait_s=wait_s)
        stop, stepped, errors = threading.Event(), threading.Semaphore(0), []

        def worker(m=m, stop=stop, stepped=stepped, errors=errors):  # this round's, bound
            try:
                seqs = [m.sequence() for _ in range(3)]
                while not stop.is_set():
                    m.step([(s, {"x": x}) for s in seqs])
                    seqs[0].run({"x": x})
                    seqs.append(m.sequence())
                    seqs.pop(0).close()
                    stepped.release()
            except GertError:
                pass
            except BaseException as e:  # noqa: BLE001 - anything else fails the test
                errors.append(e)

        threads = [_thread(worker) for _ in range(4)]
        for _ in range(20):  # close while all of them are busy
            assert stepped.acquire(timeout=WAIT)
        closer = _thread(m.close)
        closer.join(WAIT)
        stop.set()
        for t in threads:
            t.join(WAIT)
        assert not closer.is_alive() and not any(t.is_alive() for t in threads) and errors == []
        assert device_used() == used


# ---- R7: close() waits for warmup ------------------------------------------------------------------------------------


def test_close_waits_for_the_graph_warmup_compiles_then_warmup_stops(monkeypatch):
    """warmup is counted in flight: close() lets the compile in progress finish in an open Session, then warmup
    stops with 'closed during warmup' (it used to go on in a Session close() had deleted)."""
    m = gert.load(_length_model(), streams=2, shape_policy={"L": "exact"}, max_exact_graphs=64)
    workers = list(m.pool.workers)
    started, release, seen = threading.Event(), threading.Event(), []
    orig = OrtGraphProvider.compile

    def compile(self, model, inputs, outputs, group=0):
        if len(seen) == 2:  # the third graph: held until close() has been called
            started.set()
            assert release.wait(WAIT)
        out = orig(self, model, inputs, outputs, group)
        seen.append(any(_session_closed(w) for w in workers))
        return out

    monkeypatch.setattr(OrtGraphProvider, "compile", compile)
    res: dict = {}
    warm = _thread(_call, res, "warmup", m.warmup, {"L": list(range(1, 20))})
    assert started.wait(WAIT)
    closer = _thread(_call, res, "close", m.close)
    _wait_for(lambda: m.closed, "close() to start")
    closer.join(1.0)  # the old close() did not wait: it closed the Sessions under the held compile here
    release.set()
    warm.join(WAIT)
    closer.join(WAIT)
    assert not warm.is_alive() and not closer.is_alive()
    assert isinstance(res["warmup"], GertError) and "closed during warmup" in str(res["warmup"]), res["warmup"]
    assert seen == [False, False, False], "a compile ran in a Session close() had closed"
    assert all(w.closed and _session_closed(w) for w in workers)


# ---- R2: a background compile racing a device recovery ---------------------------------------------------------------


def test_a_graph_built_in_a_session_replaced_by_recovery_is_not_installed():
    """Worker's graph table: build() in one Session, reopen() (a device recovery), install() refuses the graph;
    the shape runs on the new Session."""
    m = gert.load(_length_model(), shape_policy={"L": "exact"})
    try:
        w = m.pool.workers[0]
        key = (("L", 5),)
        entry = w.build(key)  # no lock: the way the tiers' thread builds
        with w.lock:
            w.reopen()
            assert not w.install(entry) and not w.has(key)
        np.testing.assert_array_equal(m.run({"x": _l(5)})["y"], _l(5) + 1)
        assert w.has(key) and w.entry(key).generation == 1
    finally:
        m.close()


def test_a_background_compile_finishing_during_a_device_recovery_is_rebuilt_in_the_new_session():
    m = gert.load(_length_model(), hot_after=1, compile_share=1.0)
    m.warmup()
    w = m.pool.workers[0]
    key = (("L", 5),)
    real_build, built, recovered = w.build, threading.Event(), threading.Event()
    builds: list = []

    def build(k):  # the tiers' build, held after it compiled until the device was recovered
        entry = real_build(k)
        builds.append(entry.generation)
        if len(builds) == 1:
            built.set()
            assert recovered.wait(WAIT)
        return entry

    w.build = build
    try:
        np.testing.assert_array_equal(m.run({"x": _l(5)})["y"], _l(5) + 1)  # hot: the background compile starts
        assert built.wait(WAIT)
        gert.inject_fault("sticky", count=1)  # a device-wide failure on the next request: recovery
        with pytest.raises(gert.GertError):
            m.run({"x": _l(3)})
        assert m.stats()["recoveries"] == 1
        recovered.set()
        _wait_for(lambda: m.stats()["tiers"]["pending"] == 0, "the held compile to end")
        assert not w.has(key)  # built in the Session the recovery replaced: not installed
        for _ in range(3):  # the shape serves (dynamic graph), and is queued for the new Session
            np.testing.assert_array_equal(m.run({"x": _l(5)})["y"], _l(5) + 1)
        _wait_for(lambda: w.has(key), "the rebuild in the new Session")
        assert builds[-1] == 1 and w.entry(key).generation == 1
        for _ in range(3):
            np.testing.assert_array_equal(m.run({"x": _l(5)})["y"], _l(5) + 1)
        st = m.stats()
        assert st["static_hits"] >= 3 and st["tiers"]["failed_background_compiles"] == {}
    finally:
        recovered.set()
        m.close()


# ---- R3: the exact set after a recovery and after an OOM retry -------------------------------------------------------


def _compiles_per_cycles(m, sizes, cycles: int) -> int:
    c0 = m.stats()["compiles"]
    for _ in range(cycles):
        for n in sizes:
            np.testing.assert_array_equal(m.run({"x": _l(n)})["y"], _l(n) + 1)
    return m.stats()["compiles"] - c0


@pytest.mark.parametrize("trigger", ["recovery", "oom"])
def test_exact_keeps_its_hot_set_after_a_recovery_or_an_oom_retry(trigger):
    sizes = [2, 3, 4, 5]
    with gert.load(_length_model(), streams=1, shape_policy={"L": "exact"}, max_exact_graphs=4) as m:
        w = m.pool.workers[0]
        _compiles_per_cycles(m, sizes, 3)
        assert _compiles_per_cycles(m, sizes, 5) == 0
        if trigger == "recovery":
            gert.inject_fault("sticky", count=1)
            with pytest.raises(gert.GertError):
                m.run({"x": _l(2)})
            assert m.stats()["recoveries"] == 1
        else:
            m.run({"x": _l(6)})  # a fifth size: one graph evicted, as the bound says
            gert.inject_fault("malloc", count=1)
            m.run({"x": _l(300)})  # grows the input buffer: out of memory, caches released, retried
            assert m.stats()["oom_retries"] == 1
        _compiles_per_cycles(m, sizes, 3)
        assert _compiles_per_cycles(m, sizes, 5) == 0
        assert set(w.exact._probation) | set(w.exact._protected) == set(w.graphs)
        assert len(w.exact) == len(w.graphs) == 4


# ---- R10: the timeout watchdog of dynamic-graph runs -----------------------------------------------------------------


class _Stream:
    def __init__(self):
        self.aborts = 0

    def abort(self) -> None:
        self.aborts += 1


class _Timer:
    """threading.Timer that fires only when the test says (fire()), even after cancel(): a timer thread that had
    already woken when the call ended."""

    made: list = []

    def __init__(self, interval, function):
        self.function = function
        self.daemon = False
        _Timer.made.append(self)

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        pass

    def fire(self) -> None:
        self.function()


def test_a_watchdog_firing_after_the_run_ended_aborts_nothing(monkeypatch):
    monkeypatch.setattr(recovery.threading, "Timer", _Timer)
    stream = _Stream()
    with recovery.watchdog(stream, 0.03):
        pass
    _Timer.made[-1].fire()  # late: the request's copies and synchronize follow on this stream now
    assert stream.aborts == 0


def test_a_run_that_returns_after_the_watchdog_aborted_it_times_out(monkeypatch):
    monkeypatch.setattr(recovery.threading, "Timer", _Timer)
    stream = _Stream()
    with pytest.raises(AclError) as e:
        with recovery.watchdog(stream, 0.03):
            _Timer.made[-1].fire()  # the abort reached the stream as the run returned
    assert e.value.code == recovery.SYNC_TIMEOUT and stream.aborts == 1


def test_late_timeouts_on_a_dynamic_graph_raise_request_timeout_and_the_next_requests_succeed():
    """The repro's scenario, bounded: hangs of about the timeout; each request succeeds or raises RequestTimeout,
    and no failure is counted as a failed task."""
    with gert.load(_length_model(), hot_after=200) as m:
        m.warmup()
        x = _l(3)
        rng = np.random.default_rng(0)
        outcomes = set()
        for _ in range(40):
            gert.inject_fault("hang", count=1, duration_ms=20 + int(rng.integers(-2, 3)))
            try:
                m.run({"x": x}, timeout=0.02)
                outcomes.add("ok")
            except gert.RequestTimeout:
                outcomes.add("timeout")
            gert.clear_faults()
            np.testing.assert_array_equal(m.run({"x": x}, timeout=10)["y"], x + 1)
        assert m.stats()["failed_tasks"] == 0 and "timeout" in outcomes


# ---- the hand-over lock that carries these ownership rules -----------------------------------------------------------


def test_hand_off_lock_runs_the_action_here_when_free_and_at_the_holders_release_when_held():
    from gert.handoff import HandOffLock

    lock, ran = HandOffLock(), []
    assert lock.run_or_hand_over(lambda: ran.append(("here", lock.locked())), timeout=0)
    assert ran == [("here", True)] and not lock.locked()
    lock.acquire()
    assert not lock.run_or_hand_over(lambda: ran.append(("holder", lock.locked())), timeout=0)
    assert ran == [("here", True)]  # not run while held: handed to the holder
    lock.release()
    assert ran == [("here", True), ("holder", True)] and not lock.locked()  # run once, by the holder, still locked
    with lock:
        pass
    assert len(ran) == 2  # handed over once, run once


def test_hand_off_lock_loses_no_action_when_the_holder_releases_as_it_is_handed_over():
    """The holder releases only under the hand-over guard with nothing pending, so an action handed over at the
    moment of the release either is seen by the holder or finds the lock free and runs in its caller."""
    from gert.handoff import HandOffLock

    for _ in range(200):
        lock, ran = HandOffLock(), []
        lock.acquire()
        releaser = _thread(lock.release)
        lock.run_or_hand_over(lambda ran=ran: ran.append(1), timeout=0)
        releaser.join(WAIT)
        assert not releaser.is_alive() and ran == [1] and not lock.locked()
