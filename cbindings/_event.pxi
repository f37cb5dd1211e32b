# Events: mark a point in a stream; other streams and the host wait on it; time between two.

cdef class Event:
    """An ACL event. ``timing=True`` creates it with ACL_EVENT_TIME_LINE so elapsed_ms() works."""
    cdef aclrtEvent _h
    cdef readonly int device_id
    cdef readonly bint timing
    cdef uint64_t _epoch

    def __init__(self, bint timing=False, device=None):
        self.device_id = _device_for(device, &self._epoch)
        cdef unsigned int flag = ACL_EVENT_SYNC | (ACL_EVENT_TIME_LINE if timing else 0)
        self._h = <aclrtEvent>create_event_with_flag(flag)
        self.timing = timing

    cdef int _check(self) except -1:
        if self._h == NULL:
            raise _AclError(ACL_ERROR_RT_PARAM_INVALID, "the event was destroyed")
        _bind(self.device_id, self._epoch)
        return 0

    @property
    def handle(self) -> int:
        return <intptr_t>self._h

    def record(self, Stream stream):
        """aclrtRecordEvent: the event completes when the stream reaches this point."""
        self._check()
        stream._check()
        record_event(<intptr_t>self._h, <intptr_t>stream._h)

    def synchronize(self, timeout=None):
        """Block (without the GIL) until the latest record completed; ``timeout`` in seconds."""
        self._check()
        if timeout is None:
            synchronize_event(<intptr_t>self._h)
        else:
            synchronize_event_with_timeout(<intptr_t>self._h, _timeout_ms(timeout))

    def query(self) -> bool:
        """True when the latest record completed (or the event was never recorded)."""
        self._check()
        return query_event_status(<intptr_t>self._h) == ACL_EVENT_RECORDED_STATUS_COMPLETE

    def elapsed_ms(self, Event end) -> float:
        """Milliseconds from this event to ``end``; both must be timing events whose records completed."""
        self._check()
        end._check()
        return event_elapsed_time(<intptr_t>self._h, <intptr_t>end._h)

    def destroy(self):
        if self._h == NULL:
            return
        cdef aclrtEvent h = self._h
        self._h = NULL
        if _epoch[self.device_id] == self._epoch and _refs[self.device_id] > 0:
            destroy_event(<intptr_t>h)

    close = destroy

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __dealloc__(self):
        if self._h != NULL and _epoch[self.device_id] == self._epoch and _refs[self.device_id] > 0:
            aclrtDestroyEvent(self._h)
        self._h = NULL
