# cython: language_level=3
# C declarations of gert/core/_merge.pyx, for the compiled hot path (gert/core/_hotpath.pyx): HotPath.run_list joins
# each input's parts with join(), the code Rows (and so Batcher.merge, gert/core/batching.py) runs.

cdef class Rows:
    cdef readonly list parts
    cdef readonly tuple shape
    cdef readonly object dtype
    cdef readonly Py_ssize_t axis

    cdef bint _fill(self, list parts, Py_ssize_t axis, object what, bint strict, list counts=*) except -1


cdef Rows join(list parts, Py_ssize_t axis, object what, bint strict, list counts=*)
cpdef dict merge(object requests, object axes, object pad_to, object pad_values, Py_ssize_t total)
cpdef lay_out(object arr, object shape, object buf, object pad_value, list uploads, list fills)
