# cython: language_level=3
"""The core limits of a stream whose device's cores its model's streams share by load, compiled: the Python path
(gert.core.executor.Worker.use_limits) and the compiled hot path (gert/core/_hotpath.pyx, which cimports it,
gert/core/_core_share.pxd) keep one state per stream, so that neither sets a limit the other already set.

Why: with several streams per device and no core limits given, fixed limits would either leave a lone request on a
part of the cores or let every stream claim all of them (on an NPU: kernels of all streams contending for every
core). CANN applies a stream's limit to the tasks launched after it is set (``aclrtSetStreamResLimit``; GE's rt2
executor sets it on every ExecuteGraphWithStreamAsync), so each launch sets it: the device's cores over the model's
streams in use on it then, this one included. A lone request runs with every core, two at once with half each.
Compiled because it runs before every launch: a lone caller's tiny model paid ~1 us per run for it in Python.
"""


cdef class CoreShare:
    """One stream's share: ``busy()`` counts its device's streams in use now (the pool's queue, read per launch)."""

    def __init__(self, busy):
        self.busy = busy
        self.stream = None  # the stream its limits were last set on (a stream reopened after a fault: set again)
        self.n = 0  # and for how many streams in use

    cpdef bint holds(self, object stream, Py_ssize_t busy):
        """Whether ``stream``'s limits were last set for ``busy`` streams in use: nothing to set for this launch."""
        return stream is self.stream and (busy if busy > 1 else 1) == self.n

    cpdef object apply(self, object stream, tuple device_cores):
        """Set ``stream``'s limits for the streams in use now, where they changed since its last launch: the new
        (cube, vector) limits, or None when nothing changed (no runtime call: one per change of the load)."""
        cdef Py_ssize_t n = self.busy()
        if n < 1:  # a launch read between a take and its count: as one
            n = 1
        if stream is self.stream and n == self.n:
            return None
        cube, vector = device_cores
        stream.cube_cores = max(1, cube // n)
        if vector:
            stream.vector_cores = max(1, vector // n)
        self.stream, self.n = stream, n
        return stream.cube_cores, stream.vector_cores
