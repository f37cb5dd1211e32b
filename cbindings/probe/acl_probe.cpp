/* gert ACL API fidelity probe (compile-only; tests/test_api_fidelity.py).
 *
 *   g++ -std=c++17 -fsyntax-only -I <include dir> cbindings/probe/acl_probe.cpp
 *
 * <include dir> is either gert's own headers (cbindings/include) or the include/ directory of a real CANN
 * toolkit (CI takes it from the torch-npu wheel). The file compiles only if the headers declare every
 * expectation below exactly:
 *   - every function gert uses has exactly the stated prototype (return type and parameter types),
 *   - every typedef names exactly the stated type,
 *   - every constant has the stated type and value (flag macros are `unsigned int`, error codes `int`),
 *   - every enumerator belongs to the stated enum and has the stated value.
 *
 * Section 1 is what cbindings/acl.pxd declares; section 2 is what else gert's own headers declare.
 * tests/test_api_fidelity.py checks that both sections cover their sources, and that the pxd's own
 * signatures are the ones written here.
 *
 * -DGERT_PROBE_SELFTEST adds one deliberately wrong expectation, so the build must fail (the probe is
 * not vacuous).
 */
#include "acl/acl.h"

#include <cstddef>
#include <cstdint>
#include <type_traits>

/* A function: decltype(&name) must be exactly `ret (*) params`. (An overloaded name fails too.) */
#define GERT_EXPECT_FN(name, R, P)                                                \
  static_assert(std::is_same<decltype(&name), R(*) P>::value,                    \
                "gert probe: prototype of " #name " is not " #R " " #name #P)

/* A typedef: `name` must be exactly the type given. */
#define GERT_EXPECT_TYPE(name, ...)                                             \
  static_assert(std::is_same<name, __VA_ARGS__>::value,                         \
                "gert probe: typedef " #name " is not " #__VA_ARGS__)

/* A macro or `static const` constant: its type (cv dropped) and value. */
#define GERT_EXPECT_CONST(name, T, V)                                                          \
  static_assert(std::is_same<typename std::remove_cv<decltype(name)>::type, T>::value,        \
                "gert probe: constant " #name " is not of type " #T);                         \
  static_assert((name) == (V), "gert probe: constant " #name " != " #V)

/* An enum typedef: an enum type with the size of an int (ABI of every parameter passing it). */
#define GERT_EXPECT_ENUM_TYPE(E)                                                     \
  static_assert(std::is_enum<E>::value, "gert probe: " #E " is not an enum");       \
  static_assert(sizeof(E) == sizeof(int), "gert probe: sizeof(" #E ") != sizeof(int)")

/* An enumerator: belongs to `type` and has `value`. */
#define GERT_EXPECT_ENUM(E, name, V)                                                   \
  static_assert(std::is_same<decltype(name), E>::value,                               \
                "gert probe: enumerator " #name " is not of enum " #E);                \
  static_assert(static_cast<long long>(name) == (V), "gert probe: " #name " != " #V)

/* ======================================================================================
 * Section 1: everything cbindings/acl.pxd declares.
 * ====================================================================================== */

/* ---- typedefs ---- */
GERT_EXPECT_TYPE(aclError, int);
GERT_EXPECT_TYPE(aclrtStream, void *);
GERT_EXPECT_TYPE(aclrtEvent, void *);
GERT_EXPECT_TYPE(aclrtContext, void *);
GERT_EXPECT_TYPE(aclrtHostFunc, void (*)(void *));

/* ---- error codes: acl_base_rt.h (static const int) ---- */
GERT_EXPECT_CONST(ACL_SUCCESS, int, 0);
GERT_EXPECT_CONST(ACL_ERROR_INVALID_PARAM, int, 100000);
GERT_EXPECT_CONST(ACL_ERROR_UNINITIALIZE, int, 100001);
GERT_EXPECT_CONST(ACL_ERROR_REPEAT_INITIALIZE, int, 100002);
GERT_EXPECT_CONST(ACL_ERROR_REPEAT_FINALIZE, int, 100037);
GERT_EXPECT_CONST(ACL_ERROR_BAD_ALLOC, int, 200000);
GERT_EXPECT_CONST(ACL_ERROR_API_NOT_SUPPORT, int, 200001);
GERT_EXPECT_CONST(ACL_ERROR_INVALID_DEVICE, int, 200002);
GERT_EXPECT_CONST(ACL_ERROR_INVALID_RESOURCE_HANDLE, int, 200005);
GERT_EXPECT_CONST(ACL_ERROR_FEATURE_UNSUPPORTED, int, 200006);
GERT_EXPECT_CONST(ACL_ERROR_INTERNAL_ERROR, int, 500000);
GERT_EXPECT_CONST(ACL_ERROR_FAILURE, int, 500001);
GERT_EXPECT_CONST(ACL_ERROR_GE_FAILURE, int, 500002);
GERT_EXPECT_CONST(ACL_ERROR_RT_FAILURE, int, 500003);
GERT_EXPECT_CONST(ACL_ERROR_DRV_FAILURE, int, 500004);

/* ---- error codes: error_codes/rt_error_codes.h (#define) ---- */
GERT_EXPECT_CONST(ACL_ERROR_RT_PARAM_INVALID, int, 107000);
GERT_EXPECT_CONST(ACL_ERROR_RT_INVALID_DEVICEID, int, 107001);
GERT_EXPECT_CONST(ACL_ERROR_RT_CONTEXT_NULL, int, 107002);
GERT_EXPECT_CONST(ACL_ERROR_RT_STREAM_CONTEXT, int, 107003);
GERT_EXPECT_CONST(ACL_ERROR_RT_THREAD_SUBSCRIBE, int, 107012);
GERT_EXPECT_CONST(ACL_ERROR_RT_STREAM_NO_CB_REG, int, 107015);
GERT_EXPECT_CONST(ACL_ERROR_RT_WAIT_TIMEOUT, int, 107019);
GERT_EXPECT_CONST(ACL_ERROR_RT_DEVICE_TASK_ABORT, int, 107022);
GERT_EXPECT_CONST(ACL_ERROR_RT_STREAM_ABORT, int, 107023);
GERT_EXPECT_CONST(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, int, 207000);
GERT_EXPECT_CONST(ACL_ERROR_RT_MEMORY_ALLOCATION, int, 207001);
GERT_EXPECT_CONST(ACL_ERROR_RT_MEMORY_FREE, int, 207002);
GERT_EXPECT_CONST(ACL_ERROR_RT_NO_DEVICE, int, 207004);
GERT_EXPECT_CONST(ACL_ERROR_RT_NO_STREAM_RESOURCE, int, 207008);
GERT_EXPECT_CONST(ACL_ERROR_RT_INTERNAL_ERROR, int, 507000);
GERT_EXPECT_CONST(ACL_ERROR_RT_STREAM_NOT_COMPLETE, int, 507004);
GERT_EXPECT_CONST(ACL_ERROR_RT_EVENT_NOT_COMPLETE, int, 507006);
GERT_EXPECT_CONST(ACL_ERROR_RT_REPORT_TIMEOUT, int, 507012);
GERT_EXPECT_CONST(ACL_ERROR_RT_SYS_DMA, int, 507013);
GERT_EXPECT_CONST(ACL_ERROR_RT_AICORE_TIMEOUT, int, 507014);
GERT_EXPECT_CONST(ACL_ERROR_RT_AICORE_EXCEPTION, int, 507015);
GERT_EXPECT_CONST(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, int, 507046);
GERT_EXPECT_CONST(ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, int, 507047);
GERT_EXPECT_CONST(ACL_ERROR_RT_DEVICE_MEM_ERROR, int, 507053);

/* ---- event and stream flags (acl_rt.h #define, unsigned) ---- */
GERT_EXPECT_CONST(ACL_EVENT_SYNC, unsigned int, 0x1u);
GERT_EXPECT_CONST(ACL_EVENT_TIME_LINE, unsigned int, 0x8u);
GERT_EXPECT_CONST(ACL_STREAM_FAST_LAUNCH, unsigned int, 0x1u);
GERT_EXPECT_CONST(ACL_STREAM_FAST_SYNC, unsigned int, 0x2u);
GERT_EXPECT_CONST(ACL_CONTINUE_ON_FAILURE, unsigned int, 0x0u);
GERT_EXPECT_CONST(ACL_STOP_ON_FAILURE, unsigned int, 0x1u);

/* ---- enums ---- */
GERT_EXPECT_ENUM_TYPE(aclrtMemMallocPolicy);
GERT_EXPECT_ENUM(aclrtMemMallocPolicy, ACL_MEM_MALLOC_HUGE_FIRST, 0);
GERT_EXPECT_ENUM(aclrtMemMallocPolicy, ACL_MEM_MALLOC_HUGE_ONLY, 1);
GERT_EXPECT_ENUM(aclrtMemMallocPolicy, ACL_MEM_MALLOC_NORMAL_ONLY, 2);

GERT_EXPECT_ENUM_TYPE(aclrtMemcpyKind);
GERT_EXPECT_ENUM(aclrtMemcpyKind, ACL_MEMCPY_HOST_TO_HOST, 0);
GERT_EXPECT_ENUM(aclrtMemcpyKind, ACL_MEMCPY_HOST_TO_DEVICE, 1);
GERT_EXPECT_ENUM(aclrtMemcpyKind, ACL_MEMCPY_DEVICE_TO_HOST, 2);
GERT_EXPECT_ENUM(aclrtMemcpyKind, ACL_MEMCPY_DEVICE_TO_DEVICE, 3);
GERT_EXPECT_ENUM(aclrtMemcpyKind, ACL_MEMCPY_DEFAULT, 4);

GERT_EXPECT_ENUM_TYPE(aclrtMemAttr);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_DDR_MEM, 0);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_HBM_MEM, 1);

GERT_EXPECT_ENUM_TYPE(aclrtEventRecordedStatus);
GERT_EXPECT_ENUM(aclrtEventRecordedStatus, ACL_EVENT_RECORDED_STATUS_NOT_READY, 0);
GERT_EXPECT_ENUM(aclrtEventRecordedStatus, ACL_EVENT_RECORDED_STATUS_COMPLETE, 1);

GERT_EXPECT_ENUM_TYPE(aclrtStreamStatus);
GERT_EXPECT_ENUM(aclrtStreamStatus, ACL_STREAM_STATUS_COMPLETE, 0);
GERT_EXPECT_ENUM(aclrtStreamStatus, ACL_STREAM_STATUS_NOT_READY, 1);

GERT_EXPECT_ENUM_TYPE(aclrtDevAttr);
GERT_EXPECT_ENUM(aclrtDevAttr, ACL_DEV_ATTR_AICPU_CORE_NUM, 1);
GERT_EXPECT_ENUM(aclrtDevAttr, ACL_DEV_ATTR_AICORE_CORE_NUM, 101);
GERT_EXPECT_ENUM(aclrtDevAttr, ACL_DEV_ATTR_CUBE_CORE_NUM, 102);
GERT_EXPECT_ENUM(aclrtDevAttr, ACL_DEV_ATTR_VECTOR_CORE_NUM, 201);
GERT_EXPECT_ENUM(aclrtDevAttr, ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE, 301);
GERT_EXPECT_ENUM(aclrtDevAttr, ACL_DEV_ATTR_L2_CACHE_SIZE, 302);

GERT_EXPECT_ENUM_TYPE(aclrtLastErrLevel);
GERT_EXPECT_ENUM(aclrtLastErrLevel, ACL_RT_THREAD_LEVEL, 0);

GERT_EXPECT_ENUM_TYPE(aclrtDevResLimitType);
GERT_EXPECT_ENUM(aclrtDevResLimitType, ACL_RT_DEV_RES_CUBE_CORE, 0);
GERT_EXPECT_ENUM(aclrtDevResLimitType, ACL_RT_DEV_RES_VECTOR_CORE, 1);

/* ---- functions: init, errors ---- */
GERT_EXPECT_FN(aclInit, aclError, (const char *));
GERT_EXPECT_FN(aclFinalize, aclError, ());
GERT_EXPECT_FN(aclGetRecentErrMsg, const char *, ());

/* ---- devices ---- */
GERT_EXPECT_FN(aclrtSetDevice, aclError, (int32_t));
GERT_EXPECT_FN(aclrtResetDevice, aclError, (int32_t));
GERT_EXPECT_FN(aclrtGetDevice, aclError, (int32_t *));
GERT_EXPECT_FN(aclrtResetDeviceForce, aclError, (int32_t));

/* ---- faults: recovery and the last error (cann-runtime-rules.md, parts 2 and 3) ---- */
GERT_EXPECT_FN(aclrtDeviceTaskAbort, aclError, (int32_t, uint32_t));
GERT_EXPECT_FN(aclrtStreamAbort, aclError, (aclrtStream));
GERT_EXPECT_FN(aclrtSetStreamFailureMode, aclError, (aclrtStream, uint64_t));
GERT_EXPECT_FN(aclrtPeekAtLastError, aclError, (aclrtLastErrLevel));
GERT_EXPECT_FN(aclrtGetLastError, aclError, (aclrtLastErrLevel));
GERT_EXPECT_FN(aclrtGetDeviceCount, aclError, (uint32_t *));
GERT_EXPECT_FN(aclrtGetDeviceInfo, aclError, (uint32_t, aclrtDevAttr, int64_t *));

/* ---- contexts ---- */
GERT_EXPECT_FN(aclrtCreateContext, aclError, (aclrtContext *, int32_t));
GERT_EXPECT_FN(aclrtDestroyContext, aclError, (aclrtContext));
GERT_EXPECT_FN(aclrtSetCurrentContext, aclError, (aclrtContext));
GERT_EXPECT_FN(aclrtGetCurrentContext, aclError, (aclrtContext *));

/* ---- streams ---- */
GERT_EXPECT_FN(aclrtCreateStream, aclError, (aclrtStream *));
GERT_EXPECT_FN(aclrtCreateStreamWithConfig, aclError, (aclrtStream *, uint32_t, uint32_t));
GERT_EXPECT_FN(aclrtDestroyStream, aclError, (aclrtStream));
GERT_EXPECT_FN(aclrtSynchronizeStream, aclError, (aclrtStream));
GERT_EXPECT_FN(aclrtSynchronizeStreamWithTimeout, aclError, (aclrtStream, int32_t));
GERT_EXPECT_FN(aclrtStreamQuery, aclError, (aclrtStream, aclrtStreamStatus *));
GERT_EXPECT_FN(aclrtStreamWaitEvent, aclError, (aclrtStream, aclrtEvent));

/* ---- memory ---- */
GERT_EXPECT_FN(aclrtMalloc, aclError, (void **, size_t, aclrtMemMallocPolicy));
GERT_EXPECT_FN(aclrtMallocHost, aclError, (void **, size_t));
GERT_EXPECT_FN(aclrtFree, aclError, (void *));
GERT_EXPECT_FN(aclrtFreeHost, aclError, (void *));
GERT_EXPECT_FN(aclrtMemcpy, aclError, (void *, size_t, const void *, size_t, aclrtMemcpyKind));
GERT_EXPECT_FN(aclrtMemcpyAsync, aclError, (void *, size_t, const void *, size_t, aclrtMemcpyKind, aclrtStream));
GERT_EXPECT_FN(aclrtMemset, aclError, (void *, size_t, int32_t, size_t));
GERT_EXPECT_FN(aclrtMemsetAsync, aclError, (void *, size_t, int32_t, size_t, aclrtStream));
GERT_EXPECT_FN(aclrtGetMemInfo, aclError, (aclrtMemAttr, size_t *, size_t *));

/* ---- events ---- */
GERT_EXPECT_FN(aclrtCreateEvent, aclError, (aclrtEvent *));
GERT_EXPECT_FN(aclrtCreateEventWithFlag, aclError, (aclrtEvent *, uint32_t));
GERT_EXPECT_FN(aclrtDestroyEvent, aclError, (aclrtEvent));
GERT_EXPECT_FN(aclrtRecordEvent, aclError, (aclrtEvent, aclrtStream));
GERT_EXPECT_FN(aclrtSynchronizeEvent, aclError, (aclrtEvent));
GERT_EXPECT_FN(aclrtSynchronizeEventWithTimeout, aclError, (aclrtEvent, int32_t));
GERT_EXPECT_FN(aclrtQueryEventStatus, aclError, (aclrtEvent, aclrtEventRecordedStatus *));
GERT_EXPECT_FN(aclrtEventElapsedTime, aclError, (float *, aclrtEvent, aclrtEvent));

/* ---- host functions ---- */
GERT_EXPECT_FN(aclrtLaunchHostFunc, aclError, (aclrtStream, aclrtHostFunc, void *));

/* ---- core limits ---- */
GERT_EXPECT_FN(aclrtSetDeviceResLimit, aclError, (int32_t, aclrtDevResLimitType, uint32_t));
GERT_EXPECT_FN(aclrtGetDeviceResLimit, aclError, (int32_t, aclrtDevResLimitType, uint32_t *));
GERT_EXPECT_FN(aclrtResetDeviceResLimit, aclError, (int32_t));
GERT_EXPECT_FN(aclrtSetStreamResLimit, aclError, (aclrtStream, aclrtDevResLimitType, uint32_t));
GERT_EXPECT_FN(aclrtGetStreamResLimit, aclError, (aclrtStream, aclrtDevResLimitType, uint32_t *));
GERT_EXPECT_FN(aclrtResetStreamResLimit, aclError, (aclrtStream));
GERT_EXPECT_FN(aclrtUseStreamResInCurrentThread, aclError, (aclrtStream));
GERT_EXPECT_FN(aclrtUnuseStreamResInCurrentThread, aclError, (aclrtStream));
GERT_EXPECT_FN(aclrtGetResInCurrentThread, aclError, (aclrtDevResLimitType, uint32_t *));

/* ======================================================================================
 * Section 2: the rest of what gert's own headers (cbindings/include/acl) declare.
 * ====================================================================================== */

GERT_EXPECT_TYPE(aclFloat16, uint16_t);
GERT_EXPECT_TYPE(aclrtCallback, void (*)(void *));

GERT_EXPECT_CONST(ACL_ERROR_NONE, int, 0);
GERT_EXPECT_CONST(ACL_RT_SUCCESS, int, 0);

GERT_EXPECT_CONST(ACL_EVENT_CAPTURE_STREAM_PROGRESS, unsigned int, 0x2u);
GERT_EXPECT_CONST(ACL_EVENT_DEVICE_USE_ONLY, unsigned int, 0x10u);
GERT_EXPECT_CONST(ACL_EVENT_EXTERNAL, unsigned int, 0x20u);
GERT_EXPECT_CONST(ACL_EVENT_IPC, unsigned int, 0x40u);
GERT_EXPECT_CONST(ACL_STREAM_PERSISTENT, unsigned int, 0x4u);
GERT_EXPECT_CONST(ACL_STREAM_HUGE, unsigned int, 0x8u);
GERT_EXPECT_CONST(ACL_STREAM_CPU_SCHEDULE, unsigned int, 0x10u);
GERT_EXPECT_CONST(ACL_STREAM_DEVICE_USE_ONLY, unsigned int, 0x20u);

GERT_EXPECT_ENUM(aclrtMemMallocPolicy, ACL_MEM_MALLOC_HUGE_FIRST_P2P, 3);
GERT_EXPECT_ENUM(aclrtMemMallocPolicy, ACL_MEM_MALLOC_HUGE_ONLY_P2P, 4);
GERT_EXPECT_ENUM(aclrtMemMallocPolicy, ACL_MEM_MALLOC_NORMAL_ONLY_P2P, 5);
GERT_EXPECT_ENUM(aclrtMemMallocPolicy, ACL_MEM_MALLOC_HUGE1G_ONLY, 6);
GERT_EXPECT_ENUM(aclrtMemMallocPolicy, ACL_MEM_MALLOC_HUGE1G_ONLY_P2P, 7);
GERT_EXPECT_ENUM(aclrtMemMallocPolicy, ACL_MEM_TYPE_LOW_BAND_WIDTH, 0x100);
GERT_EXPECT_ENUM(aclrtMemMallocPolicy, ACL_MEM_TYPE_HIGH_BAND_WIDTH, 0x1000);
GERT_EXPECT_ENUM(aclrtMemMallocPolicy, ACL_MEM_ACCESS_USER_SPACE_READONLY, 0x100000);

GERT_EXPECT_ENUM(aclrtMemcpyKind, ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE, 5);
GERT_EXPECT_ENUM(aclrtMemcpyKind, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, 6);
GERT_EXPECT_ENUM(aclrtMemcpyKind, ACL_MEMCPY_INTER_DEVICE_TO_DEVICE, 7);

GERT_EXPECT_ENUM(aclrtMemAttr, ACL_DDR_MEM_HUGE, 2);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_DDR_MEM_NORMAL, 3);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_HBM_MEM_HUGE, 4);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_HBM_MEM_NORMAL, 5);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_DDR_MEM_P2P_HUGE, 6);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_DDR_MEM_P2P_NORMAL, 7);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_HBM_MEM_P2P_HUGE, 8);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_HBM_MEM_P2P_NORMAL, 9);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_HBM_MEM_HUGE1G, 10);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_HBM_MEM_P2P_HUGE1G, 11);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_MEM_NORMAL, 12);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_MEM_HUGE, 13);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_MEM_HUGE1G, 14);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_MEM_P2P_NORMAL, 15);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_MEM_P2P_HUGE, 16);
GERT_EXPECT_ENUM(aclrtMemAttr, ACL_MEM_P2P_HUGE1G, 17);

GERT_EXPECT_ENUM_TYPE(aclrtEventStatus);
GERT_EXPECT_ENUM(aclrtEventStatus, ACL_EVENT_STATUS_COMPLETE, 0);
GERT_EXPECT_ENUM(aclrtEventStatus, ACL_EVENT_STATUS_NOT_READY, 1);
GERT_EXPECT_ENUM(aclrtEventStatus, ACL_EVENT_STATUS_RESERVED, 2);

GERT_EXPECT_ENUM(aclrtStreamStatus, ACL_STREAM_STATUS_RESERVED, 0xFFFF);

GERT_EXPECT_ENUM_TYPE(aclrtCallbackBlockType);
GERT_EXPECT_ENUM(aclrtCallbackBlockType, ACL_CALLBACK_NO_BLOCK, 0);
GERT_EXPECT_ENUM(aclrtCallbackBlockType, ACL_CALLBACK_BLOCK, 1);

GERT_EXPECT_ENUM_TYPE(aclDataType);
GERT_EXPECT_ENUM(aclDataType, ACL_DT_UNDEFINED, -1);
GERT_EXPECT_ENUM(aclDataType, ACL_FLOAT, 0);
GERT_EXPECT_ENUM(aclDataType, ACL_FLOAT16, 1);
GERT_EXPECT_ENUM(aclDataType, ACL_INT8, 2);
GERT_EXPECT_ENUM(aclDataType, ACL_INT32, 3);
GERT_EXPECT_ENUM(aclDataType, ACL_UINT8, 4);
GERT_EXPECT_ENUM(aclDataType, ACL_INT16, 6);
GERT_EXPECT_ENUM(aclDataType, ACL_UINT16, 7);
GERT_EXPECT_ENUM(aclDataType, ACL_UINT32, 8);
GERT_EXPECT_ENUM(aclDataType, ACL_INT64, 9);
GERT_EXPECT_ENUM(aclDataType, ACL_UINT64, 10);
GERT_EXPECT_ENUM(aclDataType, ACL_DOUBLE, 11);
GERT_EXPECT_ENUM(aclDataType, ACL_BOOL, 12);
GERT_EXPECT_ENUM(aclDataType, ACL_STRING, 13);
GERT_EXPECT_ENUM(aclDataType, ACL_COMPLEX64, 16);
GERT_EXPECT_ENUM(aclDataType, ACL_COMPLEX128, 17);
GERT_EXPECT_ENUM(aclDataType, ACL_BF16, 27);

GERT_EXPECT_FN(aclrtDestroyStreamForce, aclError, (aclrtStream));
GERT_EXPECT_FN(aclrtResetEvent, aclError, (aclrtEvent, aclrtStream));
/* Real CANN marks aclrtQueryEvent deprecated (in favour of aclrtQueryEventStatus); naming it here is no use. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
GERT_EXPECT_FN(aclrtQueryEvent, aclError, (aclrtEvent, aclrtEventStatus *));
#pragma GCC diagnostic pop

/* ======================================================================================
 * Self-test: one deliberately wrong expectation (the memory policy passed as a plain int).
 * ====================================================================================== */
#ifdef GERT_PROBE_SELFTEST
GERT_EXPECT_FN(aclrtMalloc, aclError, (void **, size_t, int));
#endif
