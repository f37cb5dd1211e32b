# The host NPU's own features: counters, hand-off spin time and fault injection (gert_host/host_npu.h). Host NPU
# only: compiled into gert._cann when the host NPU is built in, into gert._hostnpu against the host NPU packaged as
# a toolkit. Python reaches these through gert.hostnpu, which says clearly when a build has none.
from libc.stdint cimport uint32_t, intptr_t
from backend cimport (gertHostCounters, gertHostGetCounters, gertHostResetCounters, gertHostSetSpinMicros,
                      gertHostGetSpinMicros, gertHostInjectFault, gertHostClearFaults,
                      gertHostLastCompileCache, gertHostStreamBeginInline, gertHostStreamEndInline,
                      gertHostCompileOption, gertHostSetInlineLaunch, gertHostGetInlineLaunch,
                      gertHostModelBytesHeld)

FAULT_KINDS = ("execute", "sticky", "hang", "malloc", "memcpy")


def host_counters() -> dict:
    """Host NPU counters: bytes copied per memcpy kind, stream tasks run, device memory in use and peak."""
    cdef gertHostCounters c
    gertHostGetCounters(&c)
    return {
        "bytes_h2d": c.bytes_h2d, "bytes_d2h": c.bytes_d2h, "bytes_d2d": c.bytes_d2d, "bytes_h2h": c.bytes_h2h,
        "tasks": c.tasks, "device_memory_in_use": c.device_memory_in_use,
        "device_memory_peak": c.device_memory_peak, "streams_alive": c.streams_alive,
        "faults": {"execute": c.faults_execute, "sticky": c.faults_sticky, "hang": c.faults_hang,
                   "malloc": c.faults_malloc, "memcpy": c.faults_memcpy},
        "stream_aborts": c.stream_aborts, "device_task_aborts": c.device_task_aborts,
        "inline_tasks": c.inline_tasks,
    }


def inject_fault(str kind, *, int device=0, after=0, count=1, every=0, duration_ms=0) -> None:
    """Arm a fault in the host NPU: it hits the ``count`` launches (allocations for "malloc", copies for "memcpy")
    on ``device`` that follow the next ``after`` (with ``every`` > 0: every ``every``-th one from there on, ``count``
    times). Kinds, as CANN 8.5 reports them:

    - "execute": the kernel task fails with ACL_ERROR_RT_AICORE_EXCEPTION (507015), returned once by the next
      synchronize; the stream works again afterwards.
    - "sticky": the same, device-wide: every later launch on the device fails at the call until
      ``device_task_abort`` (aclrtDeviceTaskAbort) or ``reset_device_force``.
    - "hang": the kernel task runs only after ``duration_ms`` (0: until aborted); ``Stream.abort()`` ends it.
    - "malloc": the device allocation fails with ACL_ERROR_RT_MEMORY_ALLOCATION (207001).
    - "memcpy": the copy fails with ACL_ERROR_RT_SYS_DMA (507013) (at execution for an asynchronous copy).

    GERT_HOST_FAULTS (e.g. ``execute:after=100:count=3,hang:after=50:duration_ms=5000``) arms the same at aclInit.
    ``device`` is taken as it is (a fault armed for a device that does not exist never fires): gert.inject_fault
    checks it against the devices the runtime has (this module may be built without the runtime's API).
    """
    if kind not in FAULT_KINDS:
        raise ValueError(f"inject_fault: kind must be one of {FAULT_KINDS}, got {kind!r}")
    for name, value in (("after", after), ("count", count), ("every", every), ("duration_ms", duration_ms)):
        if int(value) < 0:
            raise ValueError(f"inject_fault: {name} must be >= 0, got {value}")
    if gertHostInjectFault(kind.encode(), device, int(after), int(count), int(every), int(duration_ms)) != 0:
        raise ValueError(f"inject_fault: the host NPU does not know fault kind {kind!r}")


def clear_faults() -> None:
    """Disarm every injected fault (faults already fired stay as they are: recover the device for a sticky one)."""
    gertHostClearFaults()


def host_inline_launch(value=None) -> bool:
    """Get (and with ``value``, set) whether a graph run launched on an idle stream runs on the launching thread
    before the launch returns (True, the default; GERT_HOST_INLINE_LAUNCH=0 starts with False) instead of on the
    stream's worker thread. Either way the stream's order, events and fault reports are CANN's."""
    if value is not None:
        gertHostSetInlineLaunch(1 if value else 0)
    return gertHostGetInlineLaunch() != 0


def reset_host_counters() -> None:
    """Zero the byte and task counters; the memory peak restarts from what is in use now."""
    gertHostResetCounters()


def host_spin_micros(value=None) -> int:
    """Get (and with ``value``, set) how long host NPU hand-offs spin before blocking, in microseconds."""
    if value is not None:
        if int(value) < 0:
            raise ValueError(f"host_spin_micros: value must be >= 0, got {value}")
        gertHostSetSpinMicros(int(value))
    return gertHostGetSpinMicros()


def last_compile_cache():
    """Host NPU: how this thread's last CompileGraph used GE's compile cache: "hit" (loaded), "miss" (compiled and
    saved), or None (no cache, or a failed compile). Real GE only logs it: gert.hostnpu has none on real CANN."""
    return {1: "hit", 2: "miss"}.get(gertHostLastCompileCache())


def compile_option(str key):
    """Host NPU, inside the compute provider's compile: the GE option ``key`` as that compile sees it (graph, else
    session, else global; "" when unset); None outside a compile. How the provider learns the precision mode."""
    cdef bytes k = key.encode()
    cdef const char* v = gertHostCompileOption(k)
    return None if v == NULL else v.decode()


def model_bytes_held() -> int:
    """Bytes of serialized ONNX models the host NPU holds now: those of graphs parsed from memory, and a model
    file's while a compile reads them again; a graph parsed from a file holds none between compiles (issue 41)."""
    return gertHostModelBytesHeld()


def stream_begin_inline(handle) -> None:
    """Once the stream (an aclrtStream handle) is idle, run the work this thread enqueues on it here, in order, until
    stream_end_inline: for a caller that would only wait for that work (no hand-offs to the stream's worker)."""
    cdef void* h = <void*><intptr_t>handle
    cdef int rc
    with nogil:
        rc = gertHostStreamBeginInline(h)
    if rc != 0:
        raise ValueError(f"stream_begin_inline: {handle:#x} is not a live stream")


def stream_end_inline(handle) -> None:
    """End stream_begin_inline: the stream's worker takes the work other threads queued meanwhile."""
    cdef void* h = <void*><intptr_t>handle
    with nogil:
        gertHostStreamEndInline(h)
