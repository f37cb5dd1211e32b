# cython: language_level=3
"""The runtime's locks, compiled: Lock (a StreamQueue's) and HandOffLock (a stream's or a sequence's), one
implementation for the Python code (acquire / release / ``with`` / run_or_hand_over) and the compiled hot path
(gert/core/_hotpath.pyx cimports them, gert/core/_locks.pxd, and calls the same cdef methods: no second copy of
their protocol).

HandOffLock: a stream (gert.core.executor.Worker) or a sequence (gert.sequence.Sequence) has one owner at a time:
whoever holds its lock. close() with a timeout must not free what a stuck request or step still uses, nor wait for
it without bound: it runs the release under the lock when it gets the lock in time, and otherwise hands the release
to the holder, which runs it when it lets go (``run_or_hand_over``). Either way the release runs exactly once,
holding the lock.
"""
from cpython.pythread cimport (
    NOWAIT_LOCK, WAIT_LOCK, PY_LOCK_ACQUIRED, PY_LOCK_FAILURE, PyLockStatus, PyThread_acquire_lock,
    PyThread_allocate_lock, PyThread_free_lock, PyThread_release_lock, PyThread_type_lock,
)
from libc.stdint cimport int64_t

from gert.core._clock cimport now_ns

cdef extern from "pythread.h":
    ctypedef long long PY_TIMEOUT_T
    PY_TIMEOUT_T PY_TIMEOUT_MAX
    PyLockStatus PyThread_acquire_lock_timed(PyThread_type_lock lock, PY_TIMEOUT_T microseconds,
                                             int intr_flag) nogil

cdef extern from "Python.h":
    int Py_MakePendingCalls() except -1


cdef class Lock:
    """A non-reentrant lock, as threading.Lock (acquire(blocking, timeout) / release / locked / ``with``; a wait
    releases the GIL and lets signal handlers run), whose C methods the compiled code calls without a Python call:
    ``try_acquire`` (never waits), ``wait_acquire``, ``acquire_within(timeout)``, ``release_fast``."""

    def __cinit__(self):
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError("Lock: no lock could be allocated")

    def __dealloc__(self):
        if self._lock != NULL:
            if self._held:  # some platforms' locks must not be freed locked (as CPython's lock objects do)
                PyThread_release_lock(self._lock)
            PyThread_free_lock(self._lock)

    cdef bint try_acquire(self) noexcept:
        """Take the lock if it is free now (never waits)."""
        if PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            self._held = True
            return True
        return False

    cdef int wait_acquire(self) except -1:
        """Take the lock, waiting as long as it takes (without the GIL)."""
        self.acquire_within(-1.0)
        return 0

    cdef bint acquire_within(self, double timeout) except -1:
        """Take the lock within ``timeout`` seconds (negative: no bound; 0: only if free now); whether it was taken.
        Waits without the GIL; a signal runs its handler meanwhile (its exception, such as KeyboardInterrupt, is
        raised here), and the wait goes on (as threading.Lock's)."""
        if self.try_acquire():
            return True
        if timeout == 0:
            return False
        cdef int64_t end = 0
        cdef PY_TIMEOUT_T us = -1
        cdef PyLockStatus r
        if timeout > 0:
            if timeout * 1e6 > <double>PY_TIMEOUT_MAX:
                raise OverflowError(f"Lock.acquire: timeout {timeout} s is over the most a lock waits "
                                    f"({PY_TIMEOUT_MAX / 1e6:.0f} s)")
            end = now_ns() + <int64_t>(timeout * 1e9)
        while True:
            if timeout > 0:
                us = (end - now_ns() + 999) // 1000
                if us < 0:
                    us = 0
            with nogil:
                r = PyThread_acquire_lock_timed(self._lock, us, 1)
            if r == PY_LOCK_ACQUIRED:
                self._held = True
                return True
            if r == PY_LOCK_FAILURE:
                return False
            Py_MakePendingCalls()  # interrupted by a signal: its handler runs (and may raise), then wait on
            if timeout > 0 and now_ns() >= end:
                return self.try_acquire()

    cdef int release_fast(self) except -1:
        """Let go of the lock (RuntimeError if it is not held)."""
        if not self._held:
            raise RuntimeError("release unlocked lock")
        self._held = False
        PyThread_release_lock(self._lock)
        return 0

    def acquire(self, bint blocking=True, double timeout=-1) -> bool:
        """Take the lock: wait for it (``blocking``; at most ``timeout`` seconds when that is not -1) or only if it
        is free now; whether it was taken (as threading.Lock.acquire)."""
        if not blocking:
            if timeout != -1:
                raise ValueError("can't specify a timeout for a non-blocking call")
            return self.try_acquire()
        if (timeout < 0 and timeout != -1) or timeout != timeout:  # NaN would wait forever
            raise ValueError(f"timeout value must be a non-negative number or -1, not {timeout}")
        return self.acquire_within(timeout)

    def release(self) -> None:
        """Let go of the lock (RuntimeError if it is not held)."""
        self.release_fast()

    def locked(self) -> bool:
        """Whether some thread holds the lock now."""
        return self._held

    def __enter__(self):
        self.wait_acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release_fast()


cdef class HandOffLock(Lock):
    """A non-reentrant Lock with ``run_or_hand_over``: the holder runs, when it lets go, what others handed over to
    it.

    The release path costs one check of an empty list (it is on every request's path): an action handed over is
    appended, then its giver tries to take the lock; a releaser checks for actions after it let go and takes the
    lock to run them. Whichever comes second sees the other's step, so an action is never left behind, and it runs
    exactly once (taken off the list under ``_meta``), holding the lock."""

    def __cinit__(self):
        self._meta = PyThread_allocate_lock()
        if self._meta == NULL:
            raise MemoryError("HandOffLock: no lock could be allocated")
        self._handed = []

    def __dealloc__(self):
        if self._meta != NULL:
            PyThread_free_lock(self._meta)

    cdef int release_fast(self) except -1:
        """Let go of the lock; then, if actions were handed over and the lock is still free, run them holding it."""
        Lock.release_fast(self)
        if self._handed and self.try_acquire():
            self.run_handed()
        return 0

    cdef int run_handed(self) except -1:
        """Run what was handed over, holding the lock (the caller took it), one action at a time (an exception that
        escapes, such as KeyboardInterrupt, leaves the others on the list), then release: which runs, the same way,
        what was handed over meanwhile (and what was left)."""
        cdef object action
        try:
            while True:
                action = self._next_action()
                if action is None:
                    return 0
                try:
                    action()
                except Exception:  # a release's failure must not keep the lock held
                    pass
                action = None
        finally:
            self.release_fast()

    cdef object _next_action(self):
        """The first action handed over, taken off the list, or None."""
        PyThread_acquire_lock(self._meta, WAIT_LOCK)  # held only by C code: never waited for under the GIL
        try:
            return self._handed.pop(0) if self._handed else None
        finally:
            PyThread_release_lock(self._meta)

    def run_or_hand_over(self, action, timeout) -> bool:
        """Run ``action`` holding the lock if it comes free within ``timeout`` seconds (None: wait; True then); else
        hand it over (False): it runs, holding the lock, when the holder releases it."""
        if self.acquire_within(-1.0 if timeout is None else max(0.0, timeout)):
            try:
                action()
            finally:
                self.release_fast()
            return True
        PyThread_acquire_lock(self._meta, WAIT_LOCK)
        try:
            self._handed.append(action)
        finally:
            PyThread_release_lock(self._meta)
        if self.try_acquire():  # released meanwhile, perhaps before the releaser could see it
            self.run_handed()
        return False
