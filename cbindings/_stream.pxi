# Streams: in-order queues of device work; host functions run Python callables on the stream.
import sys
import weakref
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from backend cimport gert_pin_thread_state, gert_launch_host_func, gert_python_finalizing

cdef dict _live_streams = {}  # device id -> WeakSet of Stream


cdef void _host_func_trampoline(void* arg) noexcept nogil:
    if gert_python_finalizing():  # at exit: the function is not run (its holder goes with the process)
        return
    gert_pin_thread_state()
    _run_host_func(arg)


cdef void _run_host_func(void* arg) noexcept with gil:
    cdef tuple holder = <tuple><PyObject*>arg
    fn, errors = holder
    try:
        fn()
    except BaseException as exc:  # reported by the stream's next synchronize()
        errors.append(exc)
    finally:
        Py_DECREF(holder)


cdef void _host_func_drop(void* arg) noexcept nogil:
    if gert_python_finalizing():
        return
    gert_pin_thread_state()
    _drop_host_func(arg)


cdef void _drop_host_func(void* arg) noexcept with gil:
    # The function never runs (an abort dropped it): release the holder, and with it the callable.
    Py_DECREF(<object>arg)


cdef class Stream:
    """An ACL stream (aclrtCreateStreamWithConfig). Work on it runs in order; other streams run concurrently.

    Objects handed to asynchronous copies are kept alive until the next synchronize().
    """
    cdef aclrtStream _h
    cdef readonly int device_id
    cdef uint64_t _epoch
    cdef list _keep
    cdef list _errors
    cdef object __weakref__

    def __init__(self, device=None, int priority=0, unsigned int flags=0):
        self.device_id = _device_for(device, &self._epoch)
        self._h = <aclrtStream>create_stream_with_config(priority, flags)
        self._keep = []
        self._errors = []
        _live_streams.setdefault(self.device_id, weakref.WeakSet()).add(self)

    cdef int _check(self) except -1:
        if self._h == NULL:
            raise _AclError(ACL_ERROR_RT_PARAM_INVALID, "the stream was destroyed")
        _bind(self.device_id, self._epoch)
        return 0

    @property
    def handle(self) -> int:
        """The aclrtStream, as an int (0 once destroyed)."""
        return <intptr_t>self._h

    @property
    def cube_cores(self) -> int:
        """Effective cube-core limit: the stream's, else the device's, else the hardware count."""
        self._check()
        return get_stream_res_limit(<intptr_t>self._h, ACL_RT_DEV_RES_CUBE_CORE)

    @cube_cores.setter
    def cube_cores(self, unsigned int value):
        self._check()
        set_stream_res_limit(<intptr_t>self._h, ACL_RT_DEV_RES_CUBE_CORE, value)

    @property
    def vector_cores(self) -> int:
        self._check()
        return get_stream_res_limit(<intptr_t>self._h, ACL_RT_DEV_RES_VECTOR_CORE)

    @vector_cores.setter
    def vector_cores(self, unsigned int value):
        self._check()
        set_stream_res_limit(<intptr_t>self._h, ACL_RT_DEV_RES_VECTOR_CORE, value)

    def reset_limits(self):
        """aclrtResetStreamResLimit: fall back to the device (then hardware) limits."""
        self._check()
        reset_stream_res_limit(<intptr_t>self._h)

    def use_in_current_thread(self):
        """aclrtUseStreamResInCurrentThread: needed in every thread that launches on a core-limited stream."""
        self._check()
        use_stream_res_in_current_thread(<intptr_t>self._h)

    def unuse_in_current_thread(self):
        self._check()
        unuse_stream_res_in_current_thread(<intptr_t>self._h)

    def synchronize(self, timeout=None):
        """Wait until all work queued so far ran; ``timeout`` in seconds (None: forever).

        Raises the runtime's error of a failed task, or the exception a host function raised.
        """
        self._check()
        try:
            if timeout is None:
                synchronize_stream(<intptr_t>self._h)
            else:
                synchronize_stream_with_timeout(<intptr_t>self._h, _timeout_ms(timeout))
        except _AclError as e:
            if e.code != ACL_ERROR_RT_STREAM_SYNC_TIMEOUT:
                self._keep.clear()
            raise
        self._keep.clear()
        self._raise_host_errors()

    cdef _raise_host_errors(self):
        if self._errors:
            errs, self._errors[:] = list(self._errors), []
            raise _HostFunctionError(errs) from errs[0]

    def abort(self):
        """aclrtStreamAbort: drop the queued work and end the running task; the stream is usable again.

        Objects kept alive for queued copies are released (the copies will not run)."""
        self._check()
        stream_abort(<intptr_t>self._h)
        self._keep.clear()
        self._errors[:] = []

    def set_failure_mode(self, unsigned long long mode):
        """aclrtSetStreamFailureMode (once per stream): CONTINUE_ON_FAILURE (0, the default) reports a task fault
        once; STOP_ON_FAILURE (1) makes every later launch on the device fail until the device is recovered."""
        self._check()
        set_stream_failure_mode(<intptr_t>self._h, mode)

    def query(self) -> bool:
        """True when all queued work has run (aclrtStreamQuery)."""
        self._check()
        done = stream_query(<intptr_t>self._h) == ACL_STREAM_STATUS_COMPLETE
        if done:
            self._keep.clear()
        return done

    def launch_host_func(self, fn):
        """Run ``fn()`` on the stream after the work queued before it (aclrtLaunchHostFunc).

        An exception it raises is reported by the next synchronize().
        """
        if not callable(fn):
            raise TypeError(f"launch_host_func: fn must be callable, got {type(fn).__name__}")
        self._check()
        cdef tuple holder = (fn, self._errors)
        Py_INCREF(holder)
        cdef aclError st = gert_launch_host_func(self._h, _host_func_trampoline, _host_func_drop, <void*>holder)
        if st != ACL_SUCCESS:
            Py_DECREF(holder)
            check_status(st)

    def wait_event(self, Event event):
        """Later work on this stream waits until the event's latest record completed (aclrtStreamWaitEvent)."""
        self._check()
        event._check()
        stream_wait_event(<intptr_t>self._h, <intptr_t>event._h)

    def record_event(self, Event event=None):
        """Record ``event`` (a new one if None) on this stream and return it."""
        if event is None:
            event = Event(device=self.device_id)
        event.record(self)
        return event

    cdef _keep_alive(self, obj):
        self._keep.append(obj)

    def keep_alive(self, obj):
        """Hold a reference to ``obj`` until the next synchronize(): for host memory that queued copies read."""
        self._keep.append(obj)

    def destroy(self):
        """Drain and destroy the stream (blocks without the GIL until queued work ran)."""
        if self._h == NULL:
            return
        cdef aclrtStream h = self._h
        self._h = NULL
        if _epoch[self.device_id] == self._epoch and _refs[self.device_id] > 0:
            _bind(self.device_id, self._epoch)
            destroy_stream(<intptr_t>h)
        self._keep.clear()
        self._raise_host_errors()

    close = destroy

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __dealloc__(self):
        cdef aclrtStream h = self._h
        self._h = NULL
        if h != NULL and _epoch[self.device_id] == self._epoch and _refs[self.device_id] > 0:
            with nogil:
                aclrtDestroyStream(h)

    def __repr__(self):
        return f"<gert.Stream device={self.device_id} handle=0x{<intptr_t>self._h:x}>"
