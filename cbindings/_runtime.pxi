# 1:1 wrappers over the ACL C API. Handles and pointers are Python ints; out-params are returned.
from libc.stdint cimport intptr_t, int32_t, uint32_t, int64_t, uint64_t


cpdef init(config_path=None):
    """aclInit."""
    cdef bytes b
    cdef aclError st
    if config_path is None:
        with nogil:
            st = aclInit(NULL)
    else:
        b = str(config_path).encode()
        st = aclInit(b)
    check_status(st)


cpdef finalize():
    """aclFinalize: releases every device, stream, event and allocation."""
    cdef aclError st
    with nogil:
        st = aclFinalize()
    check_status(st)


cpdef set_device(int32_t device_id):
    cdef aclError st
    with nogil:
        st = aclrtSetDevice(device_id)
    check_status(st)


cpdef reset_device(int32_t device_id):
    cdef aclError st
    with nogil:
        st = aclrtResetDevice(device_id)
    check_status(st)


cpdef reset_device_force(int32_t device_id):
    """aclrtResetDeviceForce: releases the device whatever its reference count (clears a device-wide failure)."""
    cdef aclError st
    with nogil:
        st = aclrtResetDeviceForce(device_id)
    check_status(st)


cpdef device_task_abort(int32_t device_id, uint32_t timeout_ms=0):
    """aclrtDeviceTaskAbort: stop every task on the device and clear its errors (0 waits forever)."""
    cdef aclError st
    with nogil:
        st = aclrtDeviceTaskAbort(device_id, timeout_ms)
    check_status(st)


cpdef int get_last_error(int level=ACL_RT_THREAD_LEVEL):
    """aclrtGetLastError: the calling thread's last runtime error code, cleared by the call."""
    return aclrtGetLastError(<aclrtLastErrLevel>level)


cpdef int peek_at_last_error(int level=ACL_RT_THREAD_LEVEL):
    """aclrtPeekAtLastError: the calling thread's last runtime error code, left as it is."""
    return aclrtPeekAtLastError(<aclrtLastErrLevel>level)


cpdef int get_device() except? -1:
    cdef int32_t d = 0
    check_status(aclrtGetDevice(&d))
    return d


cpdef unsigned int get_device_count() except? 0:
    cdef uint32_t n = 0
    check_status(aclrtGetDeviceCount(&n))
    return n


cpdef int64_t get_device_info(uint32_t device_id, int attr) except? -1:
    cdef int64_t v = 0
    check_status(aclrtGetDeviceInfo(device_id, <aclrtDevAttr>attr, &v))
    return v


cpdef intptr_t create_context(int32_t device_id) except? 0:
    cdef aclrtContext c = NULL
    check_status(aclrtCreateContext(&c, device_id))
    return <intptr_t>c


cpdef destroy_context(intptr_t context):
    cdef aclError st
    with nogil:
        st = aclrtDestroyContext(<aclrtContext>context)
    check_status(st)


cpdef set_current_context(intptr_t context):
    check_status(aclrtSetCurrentContext(<aclrtContext>context))


cpdef intptr_t get_current_context() except? 0:
    cdef aclrtContext c = NULL
    check_status(aclrtGetCurrentContext(&c))
    return <intptr_t>c


cpdef intptr_t create_stream_with_config(uint32_t priority=0, uint32_t flag=0) except? 0:
    cdef aclrtStream s = NULL
    cdef aclError st
    with nogil:
        st = aclrtCreateStreamWithConfig(&s, priority, flag)
    check_status(st)
    return <intptr_t>s


cpdef destroy_stream(intptr_t stream):
    """aclrtDestroyStream: pending work runs first, so this blocks (without the GIL)."""
    cdef aclError st
    with nogil:
        st = aclrtDestroyStream(<aclrtStream>stream)
    check_status(st)


cpdef synchronize_stream(intptr_t stream):
    cdef aclError st
    with nogil:
        st = aclrtSynchronizeStream(<aclrtStream>stream)
    check_status(st)


cdef int32_t _timeout_ms(timeout) except? -2:
    """A timeout in seconds as the milliseconds CANN takes: at least 1 (0 is refused there, with 107000)."""
    return max(1, int(round(float(timeout) * 1000)))


cpdef synchronize_stream_with_timeout(intptr_t stream, int32_t timeout_ms):
    cdef aclError st
    with nogil:
        st = aclrtSynchronizeStreamWithTimeout(<aclrtStream>stream, timeout_ms)
    check_status(st)


cpdef int stream_query(intptr_t stream) except? -1:
    cdef aclrtStreamStatus s
    check_status(aclrtStreamQuery(<aclrtStream>stream, &s))
    return <int>s


cpdef stream_abort(intptr_t stream):
    """aclrtStreamAbort: drop the queued tasks, end the running one; the stream can be used again."""
    cdef aclError st
    with nogil:
        st = aclrtStreamAbort(<aclrtStream>stream)
    check_status(st)


cpdef set_stream_failure_mode(intptr_t stream, uint64_t mode):
    check_status(aclrtSetStreamFailureMode(<aclrtStream>stream, mode))


cpdef stream_wait_event(intptr_t stream, intptr_t event):
    check_status(aclrtStreamWaitEvent(<aclrtStream>stream, <aclrtEvent>event))


cpdef intptr_t malloc(size_t size, int policy=ACL_MEM_MALLOC_HUGE_FIRST) except? 0:
    cdef void* p = NULL
    cdef aclError st
    with nogil:
        st = aclrtMalloc(&p, size, <aclrtMemMallocPolicy>policy)
    check_status(st)
    return <intptr_t>p


cpdef intptr_t malloc_host(size_t size) except? 0:
    cdef void* p = NULL
    cdef aclError st
    with nogil:
        st = aclrtMallocHost(&p, size)
    check_status(st)
    return <intptr_t>p


cpdef free(intptr_t ptr):
    cdef aclError st
    with nogil:
        st = aclrtFree(<void*>ptr)
    check_status(st)


cpdef free_host(intptr_t ptr):
    cdef aclError st
    with nogil:
        st = aclrtFreeHost(<void*>ptr)
    check_status(st)


cpdef memcpy(intptr_t dst, size_t dest_max, intptr_t src, size_t count, int kind):
    cdef aclError st
    with nogil:
        st = aclrtMemcpy(<void*>dst, dest_max, <const void*>src, count, <aclrtMemcpyKind>kind)
    check_status(st)


cpdef memcpy_async(intptr_t dst, size_t dest_max, intptr_t src, size_t count, int kind, intptr_t stream):
    cdef aclError st
    with nogil:
        st = aclrtMemcpyAsync(<void*>dst, dest_max, <const void*>src, count, <aclrtMemcpyKind>kind,
                              <aclrtStream>stream)
    check_status(st)


cpdef memset(intptr_t ptr, size_t max_count, int32_t value, size_t count):
    cdef aclError st
    with nogil:
        st = aclrtMemset(<void*>ptr, max_count, value, count)
    check_status(st)


cpdef memset_async(intptr_t ptr, size_t max_count, int32_t value, size_t count, intptr_t stream):
    cdef aclError st
    with nogil:
        st = aclrtMemsetAsync(<void*>ptr, max_count, value, count, <aclrtStream>stream)
    check_status(st)


cpdef tuple get_mem_info(int attr=ACL_HBM_MEM):
    """aclrtGetMemInfo -> (free, total) in bytes, for the calling thread's current device."""
    cdef size_t f = 0, t = 0
    check_status(aclrtGetMemInfo(<aclrtMemAttr>attr, &f, &t))
    return f, t


cpdef intptr_t create_event_with_flag(uint32_t flag) except? 0:
    cdef aclrtEvent e = NULL
    check_status(aclrtCreateEventWithFlag(&e, flag))
    return <intptr_t>e


cpdef destroy_event(intptr_t event):
    check_status(aclrtDestroyEvent(<aclrtEvent>event))


cpdef record_event(intptr_t event, intptr_t stream):
    check_status(aclrtRecordEvent(<aclrtEvent>event, <aclrtStream>stream))


cpdef synchronize_event(intptr_t event):
    cdef aclError st
    with nogil:
        st = aclrtSynchronizeEvent(<aclrtEvent>event)
    check_status(st)


cpdef synchronize_event_with_timeout(intptr_t event, int32_t timeout_ms):
    cdef aclError st
    with nogil:
        st = aclrtSynchronizeEventWithTimeout(<aclrtEvent>event, timeout_ms)
    check_status(st)


cpdef int query_event_status(intptr_t event) except? -1:
    cdef aclrtEventRecordedStatus s
    check_status(aclrtQueryEventStatus(<aclrtEvent>event, &s))
    return <int>s


cpdef float event_elapsed_time(intptr_t start, intptr_t end) except? -1:
    cdef float ms = 0
    check_status(aclrtEventElapsedTime(&ms, <aclrtEvent>start, <aclrtEvent>end))
    return ms


cpdef set_device_res_limit(int32_t device_id, int kind, uint32_t value):
    check_status(aclrtSetDeviceResLimit(device_id, <aclrtDevResLimitType>kind, value))


cpdef unsigned int get_device_res_limit(int32_t device_id, int kind) except? 0:
    cdef uint32_t v = 0
    check_status(aclrtGetDeviceResLimit(device_id, <aclrtDevResLimitType>kind, &v))
    return v


cpdef reset_device_res_limit(int32_t device_id):
    check_status(aclrtResetDeviceResLimit(device_id))


cpdef set_stream_res_limit(intptr_t stream, int kind, uint32_t value):
    check_status(aclrtSetStreamResLimit(<aclrtStream>stream, <aclrtDevResLimitType>kind, value))


cpdef unsigned int get_stream_res_limit(intptr_t stream, int kind) except? 0:
    cdef uint32_t v = 0
    check_status(aclrtGetStreamResLimit(<aclrtStream>stream, <aclrtDevResLimitType>kind, &v))
    return v


cpdef reset_stream_res_limit(intptr_t stream):
    check_status(aclrtResetStreamResLimit(<aclrtStream>stream))


cpdef use_stream_res_in_current_thread(intptr_t stream):
    check_status(aclrtUseStreamResInCurrentThread(<aclrtStream>stream))


cpdef unuse_stream_res_in_current_thread(intptr_t stream):
    check_status(aclrtUnuseStreamResInCurrentThread(<aclrtStream>stream))


cpdef unsigned int get_res_in_current_thread(int kind) except? 0:
    cdef uint32_t v = 0
    check_status(aclrtGetResInCurrentThread(<aclrtDevResLimitType>kind, &v))
    return v


# Enum values, for callers of the 1:1 layer.
MEMCPY_HOST_TO_HOST = ACL_MEMCPY_HOST_TO_HOST
MEMCPY_HOST_TO_DEVICE = ACL_MEMCPY_HOST_TO_DEVICE
MEMCPY_DEVICE_TO_HOST = ACL_MEMCPY_DEVICE_TO_HOST
MEMCPY_DEVICE_TO_DEVICE = ACL_MEMCPY_DEVICE_TO_DEVICE
MEMCPY_DEFAULT = ACL_MEMCPY_DEFAULT
MEM_MALLOC_HUGE_FIRST = ACL_MEM_MALLOC_HUGE_FIRST
MEM_MALLOC_NORMAL_ONLY = ACL_MEM_MALLOC_NORMAL_ONLY
HBM_MEM = ACL_HBM_MEM
DDR_MEM = ACL_DDR_MEM
RES_CUBE_CORE = ACL_RT_DEV_RES_CUBE_CORE
RES_VECTOR_CORE = ACL_RT_DEV_RES_VECTOR_CORE
DEV_ATTR_AICORE_CORE_NUM = ACL_DEV_ATTR_AICORE_CORE_NUM
DEV_ATTR_CUBE_CORE_NUM = ACL_DEV_ATTR_CUBE_CORE_NUM
DEV_ATTR_VECTOR_CORE_NUM = ACL_DEV_ATTR_VECTOR_CORE_NUM
DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE = ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE
EVENT_SYNC = ACL_EVENT_SYNC
EVENT_TIME_LINE = ACL_EVENT_TIME_LINE
STREAM_STATUS_COMPLETE = ACL_STREAM_STATUS_COMPLETE
CONTINUE_ON_FAILURE = ACL_CONTINUE_ON_FAILURE
STOP_ON_FAILURE = ACL_STOP_ON_FAILURE
EVENT_RECORDED_STATUS_COMPLETE = ACL_EVENT_RECORDED_STATUS_COMPLETE
