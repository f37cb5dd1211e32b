# cython: language_level=3
"""A batch's outputs split back into its requests' rows, compiled: one implementation for the Python path
(gert.core.batching: Batcher.split, take) and the compiled hot path (HotPath.run_list, gert/core/_hotpath.pyx, which
cimports it: gert/core/_split.pxd).
"""
from gert.core._merge import Rows


cdef inline object _take(object value, Py_ssize_t axis, Py_ssize_t ndim, Py_ssize_t start, Py_ssize_t rows):
    """take() once the axis is known to be one of value's ``ndim`` axes."""
    if type(value) is Rows:
        return value.take(start, rows)
    if axis == 0:
        return value[start:start + rows]
    index = [slice(None)] * ndim
    index[axis] = slice(start, start + rows)
    return value[tuple(index)]


cpdef object take(object value, object axis, Py_ssize_t start, Py_ssize_t rows):
    """Rows start:start+rows of ``value`` along its batch ``axis`` (a view); all of it when it has no batch axis."""
    if axis is None:
        return value
    cdef Py_ssize_t ndim = len(value.shape), ax = axis
    if ndim <= ax:
        return value
    return _take(value, ax, ndim, start, rows)


cpdef list split(object out, object rows, object axes):
    """Each request's rows of the outputs ``out`` (name -> array) of a batch of requests of ``rows`` rows each, in
    order: a dict per request, of views; ``axes``: output name -> its batch axis, or None (an output that does not
    carry the batch: every request gets it as it is)."""
    cdef Py_ssize_t k = len(rows), j, offset, r, ndim = 0, ax = 0
    cdef list results = [{} for _ in range(k)]
    cdef object axis
    for name, value in out.items():
        axis = axes.get(name)
        if axis is not None:
            ax, ndim = axis, len(value.shape)
        if axis is None or ndim <= ax:
            for j in range(k):
                (<dict>results[j])[name] = value
            continue
        offset = 0
        for j in range(k):
            r = rows[j]
            (<dict>results[j])[name] = _take(value, ax, ndim, offset, r)
            offset += r
    return results
