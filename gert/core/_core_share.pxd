# cython: language_level=3
# C declarations of gert/core/_core_share.pyx, for the compiled hot path (gert/core/_hotpath.pyx): it asks whether a
# stream's limits hold for the streams in use before a launch, the same state the Python path sets them by.
cimport cython


@cython.final
cdef class CoreShare:
    cdef readonly object busy
    cdef object stream
    cdef Py_ssize_t n

    cpdef bint holds(self, object stream, Py_ssize_t busy)
    cpdef object apply(self, object stream, tuple device_cores)
