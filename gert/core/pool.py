"""The streams of one model: its workers, the queue that hands them out, recovery, the auto policy's tiers, the
requests in flight, the compiled hot path's wiring, and close.

The Engine (gert/core/engine.py) runs a request down to here and no further up: ``dispatch`` runs a Request on the
first free stream under recovery; ``dispatch_batch`` queues a request that may share a run with its batch key, and
the one that gets a stream leads the batch (dynamic batching, gert/core/dynamic.py). Front doors construct a pool
and an Engine over it; they call only the two (docs/architecture.md).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

from gert.core import trace as _trace
from gert.core._hotpath import HotPath
from gert.core.dispatch import Fit, StreamQueue
from gert.core.dynamic import Pending, RunTimes
from gert.core.executor import Request, Worker
from gert.core.recovery import Recovery
from gert.core.shapes import ShapePlan
from gert.core.tiers import COMPILE_SHARE, HOT_AFTER, HOT_WINDOW, Tiers
from gert.errors import AclError, GertError, ModelClosed


@dataclass(frozen=True)
class PoolConfig:
    """How a model's streams are laid out and run: ``streams`` per device, core limits, the graph table's bound,
    the model-wide device timeout, the auto policy's settings (gert/core/tiers.py)."""

    devices: tuple = (0,)
    streams: int = 1
    cube_cores: Optional[int] = None
    vector_cores: Optional[int] = None
    max_exact_graphs: int = 16
    request_timeout_s: Optional[float] = None
    hot_after: int = HOT_AFTER
    hot_window: int = HOT_WINDOW
    compile_share: float = COMPILE_SHARE
    host_memory: object = None


class StreamPool:
    """A model's streams (Workers) over its devices, and every request's way onto one of them."""

    def __init__(
        self, plan: ShapePlan, graph, config: PoolConfig, session_options: dict, graph_options: dict, cache=None
    ):
        self.plan = plan
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._closed = False
        self._in_flight = 0
        self._parts: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self.hot: Optional[HotPath] = None
        self.workers: list = []
        self.recovery = Recovery(lambda: self.workers, config.request_timeout_s)  # gert/core/recovery.py
        self.timeout_for = self.recovery.timeout_for  # a request's device timeout: its own, else the model's
        # policy auto: requests route through the tiers (dynamic graph now, static graphs once hot)
        self.tiers = (
            Tiers(
                lambda: self.workers,
                sorted(plan.dims),
                config.max_exact_graphs,
                config.hot_after,
                config.hot_window,
                config.compile_share,
                config.host_memory,
            )
            if plan.tiered
            else None
        )
        self.run_times = RunTimes()  # per batch size, as the streams run it: what batching decides by
        self.workers = _open_workers(
            config,
            graph,
            plan,
            session_options,
            graph_options,
            cache,
            self.tiers,
            lambda: self.hot,
            self.run_times,
            lambda device: self.queue.busy_on(device),  # (read at each launch, once the queue below exists)
        )
        self.queue: StreamQueue = StreamQueue(self.workers)  # first free stream, arrival order (gert/core/dispatch.py)

    # ---- state ----------------------------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def count(self) -> int:
        """Streams over all devices (0 once closed)."""
        return len(self.workers)

    def idle(self) -> int:
        """How many streams are free now."""
        return self.queue.idle()

    def check_open(self) -> None:
        if self._closed:
            raise ModelClosed()

    def parts_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """Threads for the parts of split batches: apart from a front door's pools, whose threads may be the ones
        waiting for the parts."""
        with self._lock:
            if self._parts is None:
                self._parts = concurrent.futures.ThreadPoolExecutor(
                    max_workers=max(1, len(self.workers)), thread_name_prefix="gert-model-part"
                )
            return self._parts

    @contextlib.contextmanager
    def counted(self) -> Iterator[None]:
        """A request, batch or warmup in flight: close() waits for it."""
        with self._lock:
            self.check_open()
            self._in_flight += 1
        try:
            yield
        finally:
            self._uncount()

    # ---- dispatch -------------------------------------------------------------------------------------------------
    def _usable(self, device: Optional[int]) -> list:
        usable = self.recovery.usable(self.workers)  # not the workers of a device under recovery
        if device is not None:  # the request's device tensors (or a sequence's state) live there
            usable = [w for w in usable if w.device == device]
            if not usable:
                raise GertError(f"device {device} has no usable stream (under recovery)")
        return usable

    def _run_on(self, w: Worker, req: Request) -> dict:
        """``req`` on ``w`` (whose lock the caller holds) under recovery, unless the model closed meanwhile."""
        if self._closed:
            raise ModelClosed()
        return self.recovery.run(w, req)

    def dispatch(self, req: Request, on_stream: Optional[Callable[[], None]] = None) -> dict:
        """Run ``req`` on the first stream to come free (arrival order), under recovery; ``on_stream()`` once it has
        one (the batching stats' wait: gert.core.batch_queue.BatchQueue.run_alone). (Counted inline, not by
        counted(): every request on the Python path comes here.)"""
        with self._lock:
            self.check_open()
            self._in_flight += 1
        try:
            ran_on: list = []
            try:
                return self._run_on_next(req, on_stream, ran_on)
            except AclError as e:
                if not self.recovery.reruns(e, ran_on[-1], req):
                    raise
            return self._run_on_next(req, None, ran_on)  # once more: a recovery of its device aborted its run
        finally:
            self._uncount()

    def _run_on_next(self, req: Request, on_stream: Optional[Callable[[], None]], ran_on: list) -> dict:
        """dispatch's run of ``req`` on the next usable stream free (its device appended to ``ran_on``)."""
        usable = self._usable(req.device) if req.device is not None else self.recovery.usable(self.workers)
        tr = _trace.active  # tracing: the wait for a stream wrapped in a "queue" span; off: this check
        if tr is None:
            w = self.queue.acquire(usable)
        else:
            w = tr.timed("queue", tr.thread_track(), lambda: self.queue.acquire(usable), args_of=_stream_args)
        ran_on.append(w.device)
        if on_stream is not None:
            on_stream()
        try:
            with w.lock:
                if self._closed:
                    raise ModelClosed()
                return self.recovery.run(w, req)
        finally:
            self.queue.release(w)

    def dispatch_batch(
        self, pending: Pending, lead: Callable, gather_rule: Callable[[list], tuple], fit: Optional[Fit] = None
    ) -> dict:
        """Dynamic batching (gert/core/dynamic.py): ``pending`` queues with its batch key; the one that gets a stream
        runs ``lead(group, run)`` on it for the queued requests of its key (``gather_rule(group)``: how long it may
        wait for more, gert.core.engine.Engine.gather_rule; ``fit``: how many of the queued requests it takes,
        gert.core.dispatch.Fit); the others wait for their results. ``lead`` returns
        what delivers the results, called once the stream is given back, so that the next batch runs while this
        one's callers are woken. (Counted inline, as dispatch() is.)"""
        with self._lock:
            self.check_open()
            self._in_flight += 1
        try:
            usable = self._usable(pending.device) if pending.device is not None else self.recovery.usable(self.workers)
            tr = _trace.active  # tracing: the wait and the batch's formation wrapped in spans; off: this check
            if tr is None:
                w, group = self.queue.acquire_batch(usable, pending, pending.key, pending.rows, pending.limit, fit)
            else:
                w, group = tr.timed(
                    "queue",
                    tr.thread_track(),
                    lambda: self.queue.acquire_batch(usable, pending, pending.key, pending.rows, pending.limit, fit),
                    args_of=_taker_args,
                )
            if w is None:
                return pending.result()  # another request's batch ran it
            deliver = None
            try:
                if tr is None:
                    self._form(w, group, pending, gather_rule, fit)
                else:  # batch formation: which requests ride together, their rows
                    tr.timed(
                        "batch",
                        tr.stream_track(w),
                        lambda: self._form(w, group, pending, gather_rule, fit),
                        args_of=_batch_args,
                    )
                with w.lock:
                    deliver = lead(group, lambda req: self._run_on(w, req))
            except BaseException as e:  # noqa: BLE001 - each member's error (this request's too, raised below)
                for p in group:  # nobody the batch took is left waiting
                    if not p.done:
                        p.set_error(e)
            finally:
                self.queue.release(w)
            if deliver is not None:
                deliver()
            return pending.result()
        finally:
            self._uncount()

    def _uncount(self) -> None:
        """A request or batch left: close() is told once none is in flight."""
        with self._lock:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.notify_all()

    def _form(
        self, w: Worker, group: list, pending: Pending, gather_rule: Callable[[list], tuple], fit: Optional[Fit]
    ) -> list:
        """The leader's batch: ``group`` with the requests of its key that join while gather_rule lets it wait."""
        until, enough = gather_rule(group)  # max_queue_delay_ms / latency_slo_ms
        if until is not None:
            self.queue.gather(w, group, pending.key, sum(p.rows for p in group), pending.limit, until, enough, fit)
        return group

    # ---- the compiled hot path ------------------------------------------------------------------------------------
    def open_hot_path(
        self,
        names: Sequence[str],
        count: Callable,
        enabled: bool,
        batch_limit: int,
        lists: bool,
        out_axes: Optional[dict] = None,
        alone: Optional[Callable[[int], bool]] = None,
    ) -> HotPath:
        """The compiled hot path (gert/core/_hotpath.pyx) over these streams: its queue (a request that finds no
        stream free waits in it; ``alone(rows)``: whether one dynamic batching would queue may, running alone), its
        recovery (off while a device recovers), close()'s wait, and its workers (which offer it what they ran). Off
        with a model-wide timeout, or GERT_HOT_PATH=0 in the environment."""
        if self.hot is not None:
            raise GertError("this stream pool has its hot path already")

        def idle() -> None:
            with self._lock:
                self._idle.notify_all()

        on = enabled and self.recovery.request_timeout_s is None and os.environ.get("GERT_HOT_PATH", "1") != "0"
        self.hot = HotPath(
            names,
            self.queue.slots,
            self.recovery.failed,
            idle,
            _trace,
            count,
            on,
            batch_limit,
            lists,
            out_axes,
            self.queue.acquire,
            alone,
        )
        self.recovery.listeners.append(lambda started: self.hot.suspend() if started else self.hot.resume())
        return self.hot

    # ---- close ----------------------------------------------------------------------------------------------------
    def close(
        self, timeout: float, stop: Sequence[Callable[[], None]] = (), drained: Optional[Callable[[float], None]] = None
    ) -> bool:
        """Stop taking requests (False when closed already). ``stop``: the front door's own pools, shut once no
        request may start; then the requests in flight complete within ``timeout`` seconds, after which their
        streams are aborted; ``drained(seconds left)``: what the front door frees once no request runs (sequences);
        then every stream is released by its owner: here, or by the request still holding it when it lets go."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
        if self.hot is not None:
            self.hot.close()  # no request starts on the compiled path; those running are waited for below
        self.queue.close()  # requests waiting for a stream fail; running ones complete
        for s in stop:
            s()
        if self._parts is not None:
            self._parts.shutdown(wait=False, cancel_futures=True)
        if self.tiers is not None:
            self.tiers.close()  # a compile in flight finishes in its retired Session, which it then closes
        deadline = time.monotonic() + timeout
        hot_in_flight = (lambda: self.hot.in_flight) if self.hot is not None else (lambda: 0)
        with self._lock:
            while self._in_flight or hot_in_flight():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
            stuck = self._in_flight > 0 or hot_in_flight() > 0
            busy = self.queue.busy()
        self.recovery.close()  # from here a failed request is this close's doing, never a device failure
        if stuck:
            self.recovery.abort_streams(busy)  # a stuck stream must not keep close() past its timeout
        if drained is not None:  # after the requests: a stuck one does not hold what it frees
            drained(max(0.0, deadline - time.monotonic()))
        for w in self.workers:
            w.lock.run_or_hand_over(lambda w=w: _close_worker(w), max(0.0, deadline - time.monotonic()))
        self.workers = []
        return True


def _open_workers(
    config: PoolConfig,
    graph,
    plan: ShapePlan,
    sess: dict,
    graph_opts: dict,
    cache,
    tiers,
    hot: Callable[[], Optional[HotPath]],
    run_times: RunTimes,
    busy_on: Callable[[int], int],
) -> list:
    """``config.streams`` Workers (a stream with its Session and graphs) per device; with several per device and no
    core limits they share its cores by load (``busy_on(device)``: its streams in use). All or none: the ones opened
    are closed when one fails."""
    workers: list = []
    try:
        for d in config.devices:
            for _ in range(int(config.streams)):
                workers.append(
                    Worker(
                        len(workers),
                        d,
                        graph,
                        plan,
                        sess,
                        graph_opts,
                        config.cube_cores,
                        config.vector_cores,
                        config.max_exact_graphs,
                        cache=cache,
                        tiers=tiers,
                        hot=hot,
                        run_times=run_times,
                        busy_on=busy_on if int(config.streams) > 1 else None,
                    )
                )
    except BaseException:
        for w in workers:
            w.close()
        raise
    return workers


def _close_worker(w: Worker) -> None:
    try:
        w.close()
    except GertError:
        pass  # a failed device's last error: the worker released its resources all the same


def _stream_args(w) -> dict:
    """The "queue" span's args: the stream the request got."""
    return {"stream": w.index}


def _taker_args(taken: tuple) -> dict:
    """The batched "queue" span's args: the stream, or that another request's batch took it along."""
    w = taken[0]
    return {"stream": w.index} if w is not None else {"batched_by": "another request"}


def _batch_args(group: list) -> dict:
    """The "batch" span's args: which requests ride together, their rows."""
    return {"requests": len(group), "rows": [p.rows for p in group]}
