"""Which stream runs a request: one queue in arrival order for all of a Model's streams.

A stream runs one request at a time, in order. Picking a stream when a request arrives (the least busy one) gives
each stream a queue of its own: a short request can wait behind a long one while another stream goes idle, and
with sizes that vary (images of varying sizes) the slowest requests wait behind each other. Here a request takes the
first stream that comes free, and a stream that comes free goes straight to the request that has waited longest
among those that may run on it (direct hand-off: a thread that arrives later cannot take it first).
"""
from __future__ import annotations

import collections
import threading
from typing import Generic, Sequence, TypeVar

from gert.errors import GertError

W = TypeVar("W")


class _Waiter:
    __slots__ = ("eligible", "event", "worker")

    def __init__(self, eligible: Sequence):
        self.eligible = eligible
        self.event = threading.Event()
        self.worker = None


class StreamQueue(Generic[W]):
    """The free streams (workers) of a Model and the requests waiting for one, served first come, first served.

    Invariant: a free worker is never one that a waiting request may use (release() hands it over instead)."""

    def __init__(self, workers: Sequence[W]):
        self._lock = threading.Lock()
        self._workers = list(workers)
        self._free: list = list(workers)
        self._waiters: "collections.deque[_Waiter]" = collections.deque()
        self._next = 0  # round robin among free workers, so that idle streams take turns
        self._closed = False

    def acquire(self, eligible: Sequence[W]) -> W:
        """A worker from ``eligible`` for the caller's exclusive use, once one is free and no request that came
        earlier may take it; GertError if the queue is closed before then."""
        with self._lock:
            if self._closed:
                raise GertError("the model was closed before this request started")
            if self._free:
                n = len(self._workers)
                for i in range(n):
                    w = self._workers[(self._next + i) % n]
                    if w in self._free and w in eligible:
                        self._free.remove(w)
                        self._next = (self._workers.index(w) + 1) % n
                        return w
            waiter = _Waiter(eligible)
            self._waiters.append(waiter)
        waiter.event.wait()
        if waiter.worker is None:
            raise GertError("the model was closed before this request started")
        return waiter.worker

    def release(self, w: W) -> None:
        """Give ``w`` back: to the longest-waiting request that may use it, else to the free list."""
        with self._lock:
            for waiter in self._waiters:
                if w in waiter.eligible:
                    self._waiters.remove(waiter)
                    waiter.worker = w
                    waiter.event.set()
                    return
            self._free.append(w)

    def idle(self) -> int:
        """How many workers are free now."""
        with self._lock:
            return len(self._free)

    def busy(self) -> list:
        """The workers some request is using now."""
        with self._lock:
            return [w for w in self._workers if w not in self._free]

    def waiting(self) -> int:
        """How many requests wait for a worker."""
        with self._lock:
            return len(self._waiters)

    def close(self) -> None:
        """Refuse new requests; the waiting ones fail with GertError (the busy workers finish what they run)."""
        with self._lock:
            self._closed = True
            waiters, self._waiters = list(self._waiters), collections.deque()
        for waiter in waiters:
            waiter.event.set()
