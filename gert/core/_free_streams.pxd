# cython: language_level=3
# C declarations of gert/core/_free_streams.pyx, for the compiled hot path (gert/core/_hotpath.pyx): it takes a free
# stream and gives it back with these methods, the same code as gert.core.dispatch.StreamQueue runs.
cimport cython

from gert.core._locks cimport Lock


@cython.final
cdef class FreeStreams:
    cdef readonly Lock lock
    cdef readonly list workers
    cdef readonly list free
    cdef readonly object waiters
    cdef public bint closed
    cdef object hand_over
    cdef bint round_robin  # the workers span several devices: they take turns (else the most recently freed first)
    cdef Py_ssize_t next  # the round robin: where the next look starts
    cdef object device  # the workers' one device (None: several)

    cpdef object take_free(self, object eligible)
    cpdef Py_ssize_t busy_on(self, object device)
    cpdef object try_take(self)
    cpdef object give_back(self, object w)
    cpdef object untake(self, object w)
