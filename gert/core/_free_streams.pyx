# cython: language_level=3
"""The free streams of a StreamQueue (gert/core/dispatch.py), compiled: its lock, its free workers, its waiting
requests, with how a stream is taken and given back (the most recently freed first). One implementation for the Python
path (StreamQueue calls these methods) and the compiled hot path (gert/core/_hotpath.pyx cimports this class,
gert/core/_free_streams.pxd, and calls the same methods in C).

Handing a stream over to a waiting request (dynamic batching's groups included) stays in StreamQueue
(``hand_over``): it runs only when a request waits, never on the hot path.
"""
import collections
import sys

from gert.errors import ModelClosed

# The GIL serializes C-level steps between Python calls (not a free-threaded build): try_take (one stream) and
# give_back (no request waiting) then skip the lock when nobody holds it.
cdef bint _GIL = bool(getattr(sys, "_is_gil_enabled", lambda: True)())


cdef class FreeStreams:
    """``workers``: every stream (worker) of the queue; ``hand_over(w)``: StreamQueue's, called holding ``lock``
    when a request waits, gives ``w`` to the one that waited longest and may use it (else to ``free``).

    ``lock`` (gert.core._locks.Lock) guards ``free``, ``waiters`` (requests waiting, in arrival order: a deque the
    StreamQueue fills) and ``closed``. Invariant: a free worker is never one a waiting request may
    use (give_back hands it over instead)."""

    def __init__(self, workers, hand_over):
        self.lock = Lock()
        self.workers = list(workers)
        self.free = self.workers[::-1]  # the last is taken first: the first stream serves a lone caller
        self.waiters = collections.deque()
        self.closed = False
        self.hand_over = hand_over
        # several devices: round robin over the workers (each device's streams take turns, a lone caller's requests
        # alternate devices); ``next``: where the next look starts. One device: the most recently freed.
        devices = {getattr(w, "device", None) for w in self.workers}
        self.round_robin = len(devices) > 1
        self.device = next(iter(devices)) if len(devices) == 1 else None  # one device: it (else None)
        self.next = 0

    cpdef object take_free(self, object eligible):
        """A free worker from ``eligible``, taken, or None; ModelClosed once closed. The caller holds ``lock``.
        On one device the most recently freed: a lone caller stays on one warm stream (its prepared runs, its buffers
        per size: PP-OCR det over 90 sizes on 4 streams in turn peaked at 1.13x ONNX Runtime's memory), and the
        others serve as soon as callers overlap. Over several devices, round robin, so that the devices take turns."""
        if self.closed:
            raise ModelClosed()
        cdef Py_ssize_t n = len(self.workers), i, at
        cdef object w
        if not self.round_robin:
            for i in range(len(self.free) - 1, -1, -1):
                w = self.free[i]
                if w in eligible:
                    del self.free[i]
                    return w
            return None
        if self.free:
            for i in range(n):
                at = (self.next + i) % n
                w = self.workers[at]
                if w in self.free and w in eligible:
                    self.free.remove(w)
                    self.next = (at + 1) % n
                    return w
        return None

    cpdef Py_ssize_t busy_on(self, object device):
        """Workers of ``device`` taken now, read without ``lock`` (a launch's core share, gert/core/_core_share.pyx: a
        stream taken or given back at that moment moves it by one, which the next launch corrects)."""
        cdef Py_ssize_t n = 0
        cdef object w
        if not self.round_robin:  # one device: every worker is on it
            return len(self.workers) - len(self.free) if self.workers and device == self.device else 0
        for w in self.workers:
            if w.device == device and w not in self.free:
                n += 1
        return n

    cpdef object try_take(self):
        """A free worker now, or None (none free, ``lock`` held by another thread, or closed): never waits. The hot
        path's take; a request that gets None takes the Python path, which queues it. Give it back with give_back()
        (or untake())."""
        if not self.free:
            return None
        if _GIL and len(self.workers) == 1 and not self.lock._held and not self.closed:
            # Nobody is inside the lock, and nobody can enter before this pop returns: this thread holds the GIL from
            # the check to the end of the pop (no Python code runs in between; a thread that got the lock without the
            # GIL waits for it before its first step).
            return self.free.pop()
        if not self.lock.try_acquire():
            return None
        try:
            if self.closed or not self.free:
                return None
            if len(self.workers) == 1:  # one stream: it is the free one
                return self.free.pop()
            return self.take_free(self.workers)
        finally:
            self.lock.release_fast()

    cpdef object give_back(self, object w):
        """Give ``w`` back: to the free list when no request waits, else through ``hand_over`` (to the request
        that waited longest and may use it)."""
        if _GIL and not self.waiters and not self.lock._held:  # as in try_take: the GIL covers these steps
            self.free.append(w)
            return
        self.lock.wait_acquire()
        try:
            if self.waiters:
                self.hand_over(w)
            else:
                self.free.append(w)
        finally:
            self.lock.release_fast()

    cpdef object untake(self, object w):
        """Give back ``w`` taken by try_take() and not used: as give_back(), so that it is taken next (the most
        recently freed; over several devices the round robin turns back to it) and the request's Python path runs
        there (the hot path then prepares that stream)."""
        self.give_back(w)
        if not self.round_robin:
            return
        self.lock.wait_acquire()
        try:
            if w in self.free:
                self.next = self.workers.index(w)
        finally:
            self.lock.release_fast()
