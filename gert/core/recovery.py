"""Keeps a gert.Model serving through device faults, the way CANN 8.5 reports and recovers them
(shared/docs/cann-runtime-rules.md, part 2).

- A failed task (e.g. ACL_ERROR_RT_AICORE_EXCEPTION, reported once by the synchronize) fails only its request, with
  the runtime's code and message; the stream is probed with one more synchronize, which succeeds in CANN's default
  continue-on-failure mode.
- A device-wide failure (the probe fails too: every launch and sync on the device fails until it is recovered): no
  new request goes to that device, the device is recovered as torch_npu's stop_device does (aclrtDeviceTaskAbort),
  its workers get new streams and Sessions (graphs recompile on demand), and it serves again. Workers on other
  devices keep serving meanwhile.
- A request not done within its timeout (aclrtSynchronizeStreamWithTimeout returned 507046): its stream is aborted
  (aclrtStreamAbort) and reused; the request raises RequestTimeout naming the stream and the time.
- Out of device memory (207001) while a worker grows a buffer or compiles a gear: what the worker caches (I/O
  buffers, the other shapes' graphs) is released and the request retried once, as torch_npu's allocator frees its
  cache and retries; a second failure fails that request only.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional

from gert import _cann
from gert.core import trace as _trace
from gert.core.error_kinds import SYNC_TIMEOUT, ErrorKind, kind_of
from gert.core.error_kinds import OOM_CODES, RECOVERING_CODES, error_class, is_runtime_failure  # noqa: F401 - kept names
from gert.errors import AclError, DeviceUnavailable, GeError, GertError, RequestTimeout

DEVICE_ABORT_TIMEOUT_MS = 10_000  # aclrtDeviceTaskAbort's wait for the tasks running on the device


@dataclass
class FaultStats:
    failed_tasks: int = 0  # requests failed by a device or runtime failure
    timeouts: int = 0  # requests past their timeout
    aborted_streams: int = 0  # aclrtStreamAbort calls (after timeouts, and on close)
    recoveries: int = 0  # devices recovered after a device-wide failure
    oom_retries: int = 0  # requests retried after out of device memory released the caches


class Recovery:
    """Per Model: which devices are being recovered, and what to do when a worker's request fails."""

    def __init__(self, workers: Callable[[], list], request_timeout_s: Optional[float] = None):
        self.request_timeout_s = None if request_timeout_s is None else float(request_timeout_s)
        self._workers = workers
        self._lock = threading.Lock()
        self._recovering: set = set()
        self._closing = False
        self.stats = FaultStats()
        # called with True when a device's recovery starts, False when it ends (the compiled hot path stops taking
        # requests meanwhile: gert/core/_hotpath.pyx)
        self.listeners: list = []

    def timeout_for(self, timeout: Optional[float]) -> Optional[float]:
        """The request's timeout: its own, else the model's."""
        if timeout is None:
            return self.request_timeout_s
        if not float(timeout) > 0:
            raise GertError(f"timeout must be > 0 seconds, got {timeout}")
        return float(timeout)

    def usable(self, workers: list) -> list:
        """The workers that may take a request now (not on a device under recovery)."""
        if not self._recovering:
            return workers
        with self._lock:
            ok = [w for w in workers if w.device not in self._recovering]
            if not ok:
                raise DeviceUnavailable(
                    f"device(s) {sorted(self._recovering)} are being recovered after a device "
                    f"failure; no device of this model can take the request now, retry later"
                )
        return ok

    def run(self, w, req) -> dict:
        """w.run(req) (the caller holds w.lock), turning device faults into this request's error and recovering."""
        try:
            try:
                return w.run(req)
            except (AclError, GeError) as e:
                if kind_of(e) is not ErrorKind.OUT_OF_MEMORY:
                    raise
                self.stats.oom_retries += 1
                _traced("oom_retry", w, e)
                w.release(keep=req.key)  # the worker's buffers and other graphs (gert/core/stream_graphs.py)
                return w.run(req)
        except AclError as e:
            if e.code != SYNC_TIMEOUT:
                _traced("fault", w, e)
                self._failed(w, e)
                raise
            self.stats.timeouts += 1
            _traced("timeout", w, e)
            self._abort(w)
            raise RequestTimeout(
                f"request timed out: not done within {req.timeout:g} s on device {w.device} stream "
                f"{w.index} (aclrtSynchronizeStreamWithTimeout returned {SYNC_TIMEOUT}); the stream "
                f"was aborted (aclrtStreamAbort) and serves again",
                w.device,
                w.index,
                req.timeout,
            ) from e
        except GeError as e:
            _traced("fault", w, e)
            self._failed(w, e)
            raise

    def failed(self, w, e: BaseException) -> bool:
        """A run on ``w`` (whose lock the caller holds) raised ``e`` outside Recovery.run (the compiled hot path, which
        runs without a timeout): a device fault is handled as Recovery.run handles it (probe, recover). Whether the
        request runs again (``reruns``): the hot path then hands it to the Python path."""
        if isinstance(e, (AclError, GeError)):
            _traced("fault", w, e)
            self._failed(w, e)
        return self.reruns(e, w.device)

    def reruns(self, e: BaseException, device: int, req=None) -> bool:
        """Whether a request whose run on ``device`` raised ``e`` runs again, once, on the next usable stream: a
        recovery of that device, under way, aborted the run (launched during its aclrtDeviceTaskAbort: 107022; in
        flight, its stream aborted: 107023), which did not fail by itself; the model is not closing; and nothing ties
        the request to that device (its device tensors, a sequence's state copies). The device under recovery is not
        usable meanwhile, so the run goes to another device, or fails as unavailable when there is none."""
        if not isinstance(e, AclError) or e.code not in RECOVERING_CODES or self._closing:
            return False
        with self._lock:
            if device not in self._recovering:
                return False
        return req is None or (req.device is None and not req.before and not req.after and not req.device_out)

    def close(self) -> None:
        """The model is closing: from now on a failed request is the close's doing (its stream aborted, or closed
        under a stuck request), never a device failure: no probe, no aclrtDeviceTaskAbort, which would fail the
        requests of every other model on the device."""
        self._closing = True

    def abort_streams(self, workers: list) -> None:
        """End whatever the workers' streams still run (Model.close() after its timeout)."""
        for w in workers:
            self._abort(w)

    def _abort(self, w) -> None:
        try:
            w.stream.abort()
            self.stats.aborted_streams += 1
        except GertError:
            pass  # the stream is gone, or its device is being recovered: nothing left to abort

    def _failed(self, w, e: BaseException) -> None:
        if not is_runtime_failure(e):
            return  # the request's own fault (e.g. a shape GE rejects): the device is fine
        if self._closing:
            return  # Model.close() aborted this stream: not a device failure, nothing to recover
        self.stats.failed_tasks += 1
        try:
            w.stream.synchronize()  # continue-on-failure: the fault was reported once and the stream works
            return
        except GertError:
            pass
        self._recover(w.device, w)

    def _recover(self, device: int, current) -> None:
        """aclrtDeviceTaskAbort, then new streams and Sessions for the device's workers. ``current`` is the worker
        whose lock the caller holds; the others' locks are taken in turn (their requests fail fast meanwhile)."""
        with self._lock:
            if device in self._recovering:
                return  # another worker leads this device's recovery
            self._recovering.add(device)
        started = time.perf_counter()
        for listener in self.listeners:
            listener(True)
        try:
            _cann.device_task_abort(device, DEVICE_ABORT_TIMEOUT_MS)
            for w in self._workers():
                if w.device != device:
                    continue
                if w is current:
                    w.reopen()
                else:
                    with w.lock:
                        w.reopen()
            self.stats.recoveries += 1
        finally:
            with self._lock:
                self._recovering.discard(device)
            for listener in self.listeners:
                listener(False)
            tr = _trace.active
            if tr is not None:  # aclrtDeviceTaskAbort and the device's streams reopened
                tr.span("recovery", tr.stream_track(current), started, time.perf_counter(), "error", {"device": device})


def _traced(name: str, w, e: BaseException) -> None:
    """A fault, timeout or OOM retry of a request on ``w``'s stream, as an error event (while tracing)."""
    tr = _trace.active
    if tr is not None:
        now = time.perf_counter()
        tr.error(name, tr.stream_track(w), now, now, e, {"code": getattr(e, "code", None)})


@contextmanager
def watchdog(stream, timeout: Optional[float]):
    """For a call that waits for the device without a timeout of its own (GE's run of a dynamic graph waits for it
    to size the outputs): past ``timeout`` seconds the stream is aborted, which ends the wait, and the call raises
    ACL_ERROR_RT_STREAM_SYNC_TIMEOUT as a timed-out synchronize would.

    The abort happens only while the call runs: the timer and the end of the call decide under one lock, so a timer
    that fires as the call returns aborts nothing of what follows (the request's copies and synchronize); a call
    that returned after the abort reached its stream timed out all the same (its stream was aborted)."""
    if timeout is None:
        yield
        return
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def fire() -> None:
        with lock:
            if state["done"]:
                return  # the call ended first: nothing of this request is left to abort
            state["fired"] = True
            try:
                stream.abort()
            except GertError:
                pass

    timer = threading.Timer(timeout, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except (AclError, GeError) as e:
        _end(lock, state, timer)
        if state["fired"]:
            raise AclError(SYNC_TIMEOUT, f"the run was still going after {timeout:g} s; the stream was aborted") from e
        raise
    except BaseException:
        _end(lock, state, timer)
        raise
    _end(lock, state, timer)
    if state["fired"]:
        raise AclError(SYNC_TIMEOUT, f"the run was still going after {timeout:g} s; the stream was aborted")


def _end(lock: threading.Lock, state: dict, timer: threading.Timer) -> None:
    with lock:
        state["done"] = True
    timer.cancel()
