# cython: language_level=3
# The monotonic clock in nanoseconds without the GIL, for the compiled modules that time waits and runs
# (gert/core/_locks.pyx: a lock's timeout; gert/core/_hotpath.pyx: a stream's busy time). Declarations only: an
# inline function, compiled into each module that cimports it (no extension of its own).
from libc.stdint cimport int64_t

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec* tp)
    int CLOCK_MONOTONIC


cdef inline int64_t now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec
