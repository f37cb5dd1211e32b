"""Which stream runs a request: one queue in arrival order for all of a Model's streams.

A stream runs one request at a time, in order. Picking a stream when a request arrives (the least busy one) gives
each stream a queue of its own: a short request can wait behind a long one while another stream goes idle, and
with sizes that vary (images of varying sizes) the slowest requests wait behind each other. Here a request takes the
first stream that comes free, and a stream that comes free goes straight to the request that has waited longest
among those that may run on it (direct hand-off: a thread that arrives later cannot take it first).

Dynamic batching (gert/core/dynamic.py): a request queued with a batch key takes, with the stream that comes free,
every other queued request of the same key that may run there, up to its row limit (and, with ``fit``, only the
first of them that make a good batch: the others wait for the next stream): they run as one batch, led by
the request that waited longest; the others wait for their share of its outputs. A free stream is taken at once, so
a lone request never waits for company unless its leader asks to (``gather``, max_queue_delay_ms).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, Optional, Sequence, TypeVar

from gert.core._free_streams import FreeStreams
from gert.core.wakeup import new_wakeup
from gert.errors import ModelClosed

W = TypeVar("W")
# fit(rows): of queued requests with these rows each (in arrival order, the leader's first), how many the batch takes
Fit = Callable[[list], int]


class _Waiter:
    __slots__ = ("eligible", "wakeup", "worker", "item", "key", "rows", "limit", "fit", "group")

    def __init__(
        self,
        eligible: Sequence,
        item=None,
        key=None,
        rows: int = 1,
        limit: int = 1,
        wakeup=None,
        fit: Optional[Fit] = None,
    ):
        self.eligible = eligible
        # released once: a stream handed over, the queue closed, or (a request taken into another's batch) its result
        self.wakeup = new_wakeup() if wakeup is None else wakeup
        self.worker = None
        self.item, self.key, self.rows, self.limit, self.fit = item, key, rows, limit, fit
        self.group: Optional[list] = None  # the items of the batch this waiter leads (or None: it was taken)


class StreamQueue(Generic[W]):
    """The free streams (workers) of a Model and the requests waiting for one, served first come, first served.

    ``slots`` (gert/core/_free_streams.pyx, compiled) holds the lock, the free workers and the waiting requests,
    and takes (the most recently freed first) and gives back a stream: the same code for this class and the compiled hot
    path (gert/core/_hotpath.pyx). Invariant: a free worker is never one that a waiting request may use (release() hands
    it over instead)."""

    def __init__(self, workers: Sequence[W]):
        self.slots = FreeStreams(workers, self._hand_over)
        self._lock = self.slots.lock
        # a request queued: a gathering leader looks again (a Condition takes any lock with acquire and release)
        self._arrived = threading.Condition(self._lock)  # type: ignore[arg-type]
        self._gathering = 0  # leaders in gather(): only then does a request queued notify _arrived

    def acquire(self, eligible: Sequence[W]) -> W:
        """A worker from ``eligible`` for the caller's exclusive use, once one is free and no request that came
        earlier may take it; ModelClosed if the queue is closed before then."""
        with self._lock:
            w = self.slots.take_free(eligible)
            if w is not None:
                return w
            waiter = _Waiter(eligible)
            self.slots.waiters.append(waiter)
        waiter.wakeup.acquire()
        if waiter.worker is None:
            raise ModelClosed()
        return waiter.worker

    def try_take(self) -> Optional[W]:
        """A free worker now, or None (none free, the queue's lock held by another thread, or the queue closed):
        never waits (the compiled hot path's take; a request that gets None takes the Python path, which queues it).
        Give the worker back with release()."""
        return self.slots.try_take()

    def untake(self, w: W) -> None:
        """Give back ``w`` taken by try_take() and not used: as release(), the most recently freed again, so that
        the request's Python path runs there (the hot path then prepares that stream)."""
        self.slots.untake(w)

    def acquire_batch(
        self, eligible: Sequence[W], item, key: tuple, rows: int, limit: int, fit: Optional[Fit] = None
    ) -> tuple:
        """As acquire(), for a request that may share its run with queued requests of the same ``key``:
        (worker, [item, the items it takes along]) when this request leads a batch (at most ``limit`` rows in
        all, and no more requests than ``fit`` says), or (None, []) once another request's batch took it and
        delivered its result. ``item.wakeup``
        (gert/core/wakeup.py) is what its thread sleeps on: released when a stream is handed to it, when the queue
        closes, or by the leader that took it when it delivers its result (gert.core.dynamic.Pending): one wake per
        request, none while it only changes hands."""
        with self._lock:
            w = self.slots.take_free(eligible)
            if w is not None:
                return w, [item]
            waiter = _Waiter(eligible, item, key, rows, limit, item.wakeup, fit)
            self.slots.waiters.append(waiter)
            if self._gathering:
                self._arrived.notify_all()
        waiter.wakeup.acquire()
        if waiter.worker is not None:
            return waiter.worker, waiter.group
        if waiter.group is not None:  # taken into another request's batch, which delivered its result
            return None, []
        raise ModelClosed()

    def gather(
        self,
        w: W,
        group: list,
        key: tuple,
        rows: int,
        limit: int,
        until: float,
        enough: Callable[[int], bool],
        fit: Optional[Fit] = None,
    ) -> list:
        """The leader of ``group`` (holding ``w``) waits until time.perf_counter() reaches ``until`` for requests of
        ``key`` to join, taking each one that fits within ``limit`` rows (and ``fit``), until ``enough(rows)``; the
        group."""
        with self._lock:
            self._gathering += 1
            try:
                while not self.slots.closed:
                    taken, full = self._take_along(w, group, key, rows, limit, fit)
                    rows += taken
                    left = until - time.perf_counter()
                    if full or enough(rows) or rows >= limit or left <= 0:
                        break
                    self._arrived.wait(left)
            finally:
                self._gathering -= 1
        return group

    def _take_along(self, w: W, group: list, key: tuple, rows: int, limit: int, fit: Optional[Fit] = None) -> tuple:
        """Move the queued requests of ``key`` that may run on ``w`` and fit within ``limit`` rows into ``group``
        (in arrival order), as many as ``fit`` (given the rows of the group and of those requests) takes: the others
        stay queued for the next stream that comes free. Their threads sleep on until the batch delivers their
        results. (the rows taken, whether ``fit`` left some out: the batch is as large as it should be)"""
        taken = 0
        waiters = self.slots.waiters
        chosen = []
        for waiter in waiters:
            if waiter.key != key or w not in waiter.eligible or waiter.key is None:
                continue
            if rows + taken + waiter.rows > limit:
                continue
            chosen.append(waiter)
            taken += waiter.rows
            if rows + taken >= limit:
                break
        full = False
        if fit is not None and chosen:
            try:
                keep = fit([p.rows for p in group] + [c.rows for c in chosen]) - len(group)
            except Exception:  # noqa: BLE001 - a stream is being handed over under the lock: never strand it
                keep = len(chosen)
            if keep < len(chosen):
                full = True
                chosen = chosen[: max(0, keep)]
        taken = 0
        for waiter in chosen:
            waiters.remove(waiter)
            group.append(waiter.item)
            taken += waiter.rows
            waiter.group = []  # taken by another's batch: no worker, no error; woken with its result
        return taken, full

    def release(self, w: W) -> None:
        """Give ``w`` back: to the longest-waiting request that may use it, else to the free list."""
        self.slots.give_back(w)

    def _hand_over(self, w: W) -> None:
        """``w`` to the longest-waiting request that may use it, else to the free list: called by ``slots``
        (give_back) holding the lock, when a request waits."""
        waiters = self.slots.waiters
        for waiter in waiters:
            if w in waiter.eligible:
                waiters.remove(waiter)
                if waiter.key is not None:  # it leads a batch: its queued company comes along
                    waiter.group = [waiter.item]
                    self._take_along(w, waiter.group, waiter.key, waiter.rows, waiter.limit, waiter.fit)
                waiter.worker = w
                waiter.wakeup.release()
                return
        self.slots.free.append(w)

    def idle(self) -> int:
        """How many workers are free now."""
        with self._lock:
            return len(self.slots.free)

    def busy_on(self, device: int) -> int:
        """Streams of ``device`` in use now, read without the lock (a launch's core share: one stream taken or
        given back at that moment moves it by one, which the next launch corrects)."""
        return self.slots.busy_on(device)

    def busy(self) -> list:
        """The workers some request is using now."""
        with self._lock:
            return [w for w in self.slots.workers if w not in self.slots.free]

    def waiting(self) -> int:
        """How many requests wait for a worker."""
        with self._lock:
            return len(self.slots.waiters)

    def close(self) -> None:
        """Refuse new requests; the waiting ones fail with ModelClosed (the busy workers finish what they run)."""
        with self._lock:
            self.slots.closed = True
            waiters = list(self.slots.waiters)
            self.slots.waiters.clear()
            self._arrived.notify_all()  # a leader gathering company stops and runs what it has
        for waiter in waiters:
            waiter.wakeup.release()
