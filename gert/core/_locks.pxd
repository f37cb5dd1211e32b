# cython: language_level=3
# C declarations of gert/core/_locks.pyx, for the compiled hot path (gert/core/_hotpath.pyx) and the queue's core
# (gert/core/_free_streams.pyx): they cimport these classes and call the cdef methods below, the same code as the
# Python methods (acquire, release, ``with``, run_or_hand_over) run.
cimport cython
from cpython.pythread cimport PyThread_type_lock


cdef class Lock:
    cdef PyThread_type_lock _lock
    cdef bint _held  # set once acquired, cleared before the release (an unheld lock's release is an error)

    cdef bint try_acquire(self) noexcept
    cdef int wait_acquire(self) except -1
    cdef bint acquire_within(self, double timeout) except -1
    cdef int release_fast(self) except -1


@cython.final
cdef class HandOffLock(Lock):
    cdef PyThread_type_lock _meta  # guards the list of handed-over actions: appended, or taken off one at a time
    cdef list _handed

    cdef int run_handed(self) except -1
    cdef object _next_action(self)
