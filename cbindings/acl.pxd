# Declarations of the ACL runtime subset gert uses (cbindings/include/acl/acl.h, or CANN's own headers).
# C functions returning an aclError, never throwing: the host NPU's entry points catch every C++ exception and return
# an error code (cbindings/hostnpu/runtime.h HOSTNPU_GUARD), so none is `except +`.
from libc.stdint cimport int32_t, uint32_t, int64_t, uint64_t


cdef extern from "acl/acl.h" nogil:
    ctypedef int aclError
    ctypedef void* aclrtStream
    ctypedef void* aclrtEvent
    ctypedef void* aclrtContext

    const int ACL_SUCCESS
    const int ACL_ERROR_INVALID_PARAM
    const int ACL_ERROR_UNINITIALIZE
    const int ACL_ERROR_REPEAT_INITIALIZE
    const int ACL_ERROR_REPEAT_FINALIZE
    const int ACL_ERROR_BAD_ALLOC
    const int ACL_ERROR_API_NOT_SUPPORT
    const int ACL_ERROR_INVALID_DEVICE
    const int ACL_ERROR_INVALID_RESOURCE_HANDLE
    const int ACL_ERROR_FEATURE_UNSUPPORTED
    const int ACL_ERROR_INTERNAL_ERROR
    const int ACL_ERROR_FAILURE
    const int ACL_ERROR_GE_FAILURE
    const int ACL_ERROR_RT_FAILURE
    const int ACL_ERROR_DRV_FAILURE
    const int ACL_ERROR_RT_PARAM_INVALID
    const int ACL_ERROR_RT_INVALID_DEVICEID
    const int ACL_ERROR_RT_CONTEXT_NULL
    const int ACL_ERROR_RT_STREAM_CONTEXT
    const int ACL_ERROR_RT_THREAD_SUBSCRIBE
    const int ACL_ERROR_RT_STREAM_NO_CB_REG
    const int ACL_ERROR_RT_WAIT_TIMEOUT
    const int ACL_ERROR_RT_DEVICE_TASK_ABORT
    const int ACL_ERROR_RT_STREAM_ABORT
    const int ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    const int ACL_ERROR_RT_MEMORY_ALLOCATION
    const int ACL_ERROR_RT_MEMORY_FREE
    const int ACL_ERROR_RT_NO_DEVICE
    const int ACL_ERROR_RT_NO_STREAM_RESOURCE
    const int ACL_ERROR_RT_INTERNAL_ERROR
    const int ACL_ERROR_RT_STREAM_NOT_COMPLETE
    const int ACL_ERROR_RT_EVENT_NOT_COMPLETE
    const int ACL_ERROR_RT_REPORT_TIMEOUT
    const int ACL_ERROR_RT_SYS_DMA
    const int ACL_ERROR_RT_AICORE_TIMEOUT
    const int ACL_ERROR_RT_AICORE_EXCEPTION
    const int ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    const int ACL_ERROR_RT_EVENT_SYNC_TIMEOUT
    const int ACL_ERROR_RT_DEVICE_MEM_ERROR

    const unsigned int ACL_EVENT_SYNC
    const unsigned int ACL_EVENT_TIME_LINE
    const unsigned int ACL_STREAM_FAST_LAUNCH
    const unsigned int ACL_STREAM_FAST_SYNC
    const unsigned int ACL_CONTINUE_ON_FAILURE
    const unsigned int ACL_STOP_ON_FAILURE

    ctypedef enum aclrtMemMallocPolicy:
        ACL_MEM_MALLOC_HUGE_FIRST
        ACL_MEM_MALLOC_HUGE_ONLY
        ACL_MEM_MALLOC_NORMAL_ONLY
    ctypedef enum aclrtMemcpyKind:
        ACL_MEMCPY_HOST_TO_HOST
        ACL_MEMCPY_HOST_TO_DEVICE
        ACL_MEMCPY_DEVICE_TO_HOST
        ACL_MEMCPY_DEVICE_TO_DEVICE
        ACL_MEMCPY_DEFAULT
    ctypedef enum aclrtMemAttr:
        ACL_DDR_MEM
        ACL_HBM_MEM
    ctypedef enum aclrtEventRecordedStatus:
        ACL_EVENT_RECORDED_STATUS_NOT_READY
        ACL_EVENT_RECORDED_STATUS_COMPLETE
    ctypedef enum aclrtStreamStatus:
        ACL_STREAM_STATUS_COMPLETE
        ACL_STREAM_STATUS_NOT_READY
    ctypedef enum aclrtDevAttr:
        ACL_DEV_ATTR_AICPU_CORE_NUM
        ACL_DEV_ATTR_AICORE_CORE_NUM
        ACL_DEV_ATTR_CUBE_CORE_NUM
        ACL_DEV_ATTR_VECTOR_CORE_NUM
        ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE
        ACL_DEV_ATTR_L2_CACHE_SIZE
    ctypedef enum aclrtLastErrLevel:
        ACL_RT_THREAD_LEVEL
    ctypedef enum aclrtDevResLimitType:
        ACL_RT_DEV_RES_CUBE_CORE
        ACL_RT_DEV_RES_VECTOR_CORE

    ctypedef void (*aclrtHostFunc)(void* args)

    aclError aclInit(const char* configPath)
    aclError aclFinalize()
    const char* aclGetRecentErrMsg()

    aclError aclrtSetDevice(int32_t deviceId)
    aclError aclrtResetDevice(int32_t deviceId)
    aclError aclrtGetDevice(int32_t* deviceId)
    aclError aclrtResetDeviceForce(int32_t deviceId)
    aclError aclrtDeviceTaskAbort(int32_t deviceId, uint32_t timeout)
    aclError aclrtPeekAtLastError(aclrtLastErrLevel level)
    aclError aclrtGetLastError(aclrtLastErrLevel level)
    aclError aclrtGetDeviceCount(uint32_t* count)
    aclError aclrtGetDeviceInfo(uint32_t deviceId, aclrtDevAttr attr, int64_t* value)

    aclError aclrtCreateContext(aclrtContext* context, int32_t deviceId)
    aclError aclrtDestroyContext(aclrtContext context)
    aclError aclrtSetCurrentContext(aclrtContext context)
    aclError aclrtGetCurrentContext(aclrtContext* context)

    aclError aclrtCreateStream(aclrtStream* stream)
    aclError aclrtCreateStreamWithConfig(aclrtStream* stream, uint32_t priority, uint32_t flag)
    aclError aclrtDestroyStream(aclrtStream stream)
    aclError aclrtSynchronizeStream(aclrtStream stream)
    aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout)
    aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus* status)
    aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event)
    aclError aclrtStreamAbort(aclrtStream stream)
    aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode)

    aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy)
    aclError aclrtMallocHost(void** hostPtr, size_t size)
    aclError aclrtFree(void* devPtr)
    aclError aclrtFreeHost(void* hostPtr)
    aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind)
    aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count,
                              aclrtMemcpyKind kind, aclrtStream stream)
    aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count)
    aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream)
    aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t* free, size_t* total)

    aclError aclrtCreateEvent(aclrtEvent* event)
    aclError aclrtCreateEventWithFlag(aclrtEvent* event, uint32_t flag)
    aclError aclrtDestroyEvent(aclrtEvent event)
    aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)
    aclError aclrtSynchronizeEvent(aclrtEvent event)
    aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout)
    aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus* status)
    aclError aclrtEventElapsedTime(float* ms, aclrtEvent startEvent, aclrtEvent endEvent)

    aclError aclrtLaunchHostFunc(aclrtStream stream, aclrtHostFunc fn, void* args)

    aclError aclrtSetDeviceResLimit(int32_t deviceId, aclrtDevResLimitType type, uint32_t value)
    aclError aclrtGetDeviceResLimit(int32_t deviceId, aclrtDevResLimitType type, uint32_t* value)
    aclError aclrtResetDeviceResLimit(int32_t deviceId)
    aclError aclrtSetStreamResLimit(aclrtStream stream, aclrtDevResLimitType type, uint32_t value)
    aclError aclrtGetStreamResLimit(aclrtStream stream, aclrtDevResLimitType type, uint32_t* value)
    aclError aclrtResetStreamResLimit(aclrtStream stream)
    aclError aclrtUseStreamResInCurrentThread(aclrtStream stream)
    aclError aclrtUnuseStreamResInCurrentThread(aclrtStream stream)
    aclError aclrtGetResInCurrentThread(aclrtDevResLimitType type, uint32_t* value)
