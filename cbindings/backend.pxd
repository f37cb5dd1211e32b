# Which runtime the extension was built against, the host NPU's own API, per-thread helpers (gert_backend.h).
from libc.stdint cimport uint32_t, uint64_t, int32_t, int64_t


cdef extern from "gert_backend.h" nogil:
    const char* GERT_BACKEND_NAME
    const char* GERT_TOOLKIT_ROOT

    # The host NPU's own API (gert_host/): C functions that catch every C++ exception (none is `except +`). Declared for _host.pxi and _provider.pxi, which only the host NPU
    # builds compile; the header provides it only there (GERT_HOSTNPU or GERT_HOSTNPU_MODULE).

    ctypedef struct gertHostCounters:
        uint64_t bytes_h2d
        uint64_t bytes_d2h
        uint64_t bytes_d2d
        uint64_t bytes_h2h
        uint64_t tasks
        uint64_t device_memory_in_use
        uint64_t device_memory_peak
        uint64_t streams_alive
        uint64_t faults_execute
        uint64_t faults_sticky
        uint64_t faults_hang
        uint64_t faults_malloc
        uint64_t faults_memcpy
        uint64_t stream_aborts
        uint64_t device_task_aborts
        uint64_t inline_tasks

    void gertHostGetCounters(gertHostCounters* out)
    int gertHostInjectFault(const char* kind, int32_t device, uint64_t after, uint64_t count, uint64_t every,
                            uint32_t duration_ms)
    void gertHostClearFaults()
    void gertHostResetCounters()
    void gertHostSetSpinMicros(uint32_t us)
    uint32_t gertHostGetSpinMicros()
    void gertHostSetInlineLaunch(int on)
    int gertHostGetInlineLaunch()
    int gertHostStreamBeginInline(void* stream) nogil
    void gertHostStreamEndInline(void* stream) nogil
    int gertHostLastCompileCache()
    const char* gertHostCompileOption(const char* key)
    uint64_t gertHostModelBytesHeld()

    const int GERT_HOST_MAX_DIMS
    ctypedef struct gertHostTensorRef:
        void* data
        uint64_t nbytes
        int32_t dtype
        int32_t ndim
        int64_t dims[25]
    ctypedef void* (*gertHostOutputAlloc)(void* alloc_ctx, uint64_t nbytes)
    ctypedef struct gertHostGraphProvider:
        void* ctx
        int (*compile)(void*, uint64_t, const void*, size_t, int32_t, const char* const*, const gertHostTensorRef*, int32_t,
                       const char* const*, gertHostTensorRef*, int32_t*, void**, char*, size_t)
        int (*prepare)(void*, int32_t, int32_t, char*, size_t)
        int (*run)(void*, int32_t, int32_t, int32_t, const gertHostTensorRef*, int32_t, gertHostTensorRef*,
                   gertHostOutputAlloc, void*, char*, size_t)
        void (*release)(void*)
        int (*save)(void*, gertHostOutputAlloc, void*, void**, uint64_t*, char*, size_t)
        int (*load)(void*, uint64_t, const void*, size_t, void**, char*, size_t)
    void gertHostSetGraphProvider(const gertHostGraphProvider* provider)

    # aclrtLaunchHostFunc with a release hook for a function an abort drops (gert_backend.h); an aclError.
    int gert_launch_host_func(void* stream, void (*fn)(void*) noexcept nogil, void (*drop)(void*) noexcept nogil,
                              void* args)

    # Per-thread cache of the context gert last made current (see gert_backend.h).
    void* gert_tls_context()
    void gert_tls_set_context(void* ctx)

    # Keep one Python thread state per runtime worker thread for its whole life (design.md, "Hot path").
    void gert_pin_thread_state()
    int gert_python_finalizing()
