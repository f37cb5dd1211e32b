# The host NPU's compute provider: ONNX Runtime (gert.hostnpu.ort_provider) computes host NPU GE graphs, called through
# gertHostSetGraphProvider's table. Host NPU only: compiled into gert._cann when the host NPU is built in, into
# gert._hostnpu when gert is built against the host NPU packaged as a toolkit; never in a build against real CANN.
from libc.stdint cimport intptr_t, int32_t, uint64_t
from libc.string cimport strncpy, memcmp, memcpy as c_memcpy
from cpython.ref cimport Py_INCREF, Py_DECREF
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.pythread cimport PyThread_get_thread_ident
from backend cimport (gertHostTensorRef, gertHostGraphProvider, gertHostOutputAlloc, gertHostSetGraphProvider,
                      gert_pin_thread_state, gert_python_finalizing, GERT_HOST_MAX_DIMS)

cdef object _provider = None
# (address, size) of the ONNX bytes a GE graph holds -> the bytes object made of them: a model compiled at many sizes
# and for several streams (policy auto) is copied once, and the provider finds its digest by the same object.
# Checked byte for byte before reuse (memory freed and reused for another model at that address must not match).
cdef dict _model_copies = {}
cdef int _MODEL_COPIES_KEPT = 4


cdef bytes _model_bytes(const void* model, size_t size):
    key = (<intptr_t>model, size)
    cdef bytes b = _model_copies.get(key)
    if b is not None and memcmp(<const char*>b, model, size) == 0:
        return b
    b = PyBytes_FromStringAndSize(<const char*>model, size)
    if len(_model_copies) >= _MODEL_COPIES_KEPT:
        _model_copies.clear()
    _model_copies[key] = b
    return b


cdef void _write_err(char* err, size_t n, str text) noexcept:
    cdef bytes b = text.encode("utf-8", "replace")[: n - 1]
    strncpy(err, b, n - 1)
    err[n - 1] = 0


cdef tuple _ref_dims(const gertHostTensorRef* r):
    return tuple([r.dims[k] for k in range(min(max(r.ndim, 0), GERT_HOST_MAX_DIMS))])


cdef int _set_dims(gertHostTensorRef* r, dims, str what) except -1:
    """Write a provider's result shape into a tensor reference: at most GERT_HOST_MAX_DIMS dims (gert::Shape's
    kMaxDimNum, the most a GE runtime tensor holds), refused with a ValueError naming the tensor otherwise."""
    cdef Py_ssize_t n = len(dims)
    if n > GERT_HOST_MAX_DIMS:
        raise ValueError(f"{what} has rank {n}; GE supports at most {GERT_HOST_MAX_DIMS} dims")
    for k in range(n):
        r.dims[k] = dims[k]
    r.ndim = <int32_t>n
    return 0


cdef class _OutputAllocator:
    cdef gertHostOutputAlloc fn
    cdef void* ctx

    def __call__(self, uint64_t nbytes):
        cdef void* p = self.fn(self.ctx, nbytes)
        if p == NULL:
            raise MemoryError(f"the device could not allocate an output of {nbytes} bytes")
        return <intptr_t>p


cdef int _prov_compile_gil(void* ctx, uint64_t group, const void* model, size_t size, int32_t n_in,
                           const char* const* in_names,
                           const gertHostTensorRef* ins, int32_t n_out, const char* const* out_names,
                           gertHostTensorRef* outs, int32_t* unknown_shape, void** exe, char* err,
                           size_t err_len) noexcept with gil:
    try:
        data = _model_bytes(model, size)
        inputs = [(in_names[i].decode(), ins[i].dtype, _ref_dims(&ins[i])) for i in range(n_in)]
        outputs = [(out_names[i].decode(), outs[i].dtype, _ref_dims(&outs[i])) for i in range(n_out)]
        executable, result, unknown = (<object>ctx).compile(data, inputs, outputs, group)
        unknown_shape[0] = 1 if unknown else 0
        for i, (dt, dims) in enumerate(result):
            _set_dims(&outs[i], dims, f"output {i} '{out_names[i].decode()}'")
            outs[i].dtype = dt
        Py_INCREF(executable)
        exe[0] = <void*>executable
        return 0
    except BaseException as e:
        _write_err(err, err_len, f"{type(e).__name__}: {e}")
        return 1


cdef int _prov_compile(void* ctx, uint64_t group, const void* model, size_t size, int32_t n_in,
                       const char* const* in_names,
                       const gertHostTensorRef* ins, int32_t n_out, const char* const* out_names,
                       gertHostTensorRef* outs, int32_t* unknown_shape, void** exe, char* err,
                       size_t err_len) noexcept nogil:
    gert_pin_thread_state()
    return _prov_compile_gil(ctx, group, model, size, n_in, in_names, ins, n_out, out_names, outs, unknown_shape, exe,
                             err, err_len)


cdef int _prov_prepare_gil(void* exe, int32_t threads, int32_t alone, char* err, size_t err_len) noexcept with gil:
    try:
        (<object>exe).session(threads, alone != 0)
        return 0
    except BaseException as e:
        _write_err(err, err_len, f"{type(e).__name__}: {e}")
        return 1


cdef int _prov_prepare(void* exe, int32_t threads, int32_t alone, char* err, size_t err_len) noexcept nogil:
    gert_pin_thread_state()
    return _prov_prepare_gil(exe, threads, alone, err, err_len)


cdef int _prov_run_gil(void* exe, int32_t threads, int32_t alone, int32_t n_in, const gertHostTensorRef* ins,
                       int32_t n_out,
                       gertHostTensorRef* outs, gertHostOutputAlloc alloc, void* alloc_ctx, char* err,
                       size_t err_len) noexcept with gil:
    cdef _OutputAllocator a
    cdef object executable = <object>exe
    try:
        # Fast path: the same buffers, shapes and share of the device as a run before (the executor's steady state):
        # reuse that run's IOBinding, keyed by the raw tensor descriptions.
        key = (threads, alone != 0, PyThread_get_thread_ident(),
               PyBytes_FromStringAndSize(<const char*>ins, n_in * sizeof(gertHostTensorRef)),
               PyBytes_FromStringAndSize(<const char*>outs, n_out * sizeof(gertHostTensorRef)))
        bound = executable.fast.get(key)
        if bound is not None:
            bound()
            return 0
        a = _OutputAllocator.__new__(_OutputAllocator)
        a.fn = alloc
        a.ctx = alloc_ctx
        inputs = [(<intptr_t>ins[i].data, ins[i].nbytes, ins[i].dtype, _ref_dims(&ins[i])) for i in range(n_in)]
        outputs = [(<intptr_t>outs[i].data, outs[i].nbytes, outs[i].dtype, _ref_dims(&outs[i])) for i in range(n_out)]
        results = executable.run(threads, alone != 0, inputs, outputs, a)
        executable.remember(key)
        for i, r in enumerate(results):
            if r is None:
                continue
            ptr, nbytes, dims = r
            _set_dims(&outs[i], dims, f"output {i}")
            outs[i].data = <void*><intptr_t>ptr
            outs[i].nbytes = nbytes
        return 0
    except BaseException as e:
        _write_err(err, err_len, f"{type(e).__name__}: {e}")
        return 1


cdef int _prov_run(void* exe, int32_t threads, int32_t alone, int32_t n_in, const gertHostTensorRef* ins,
                   int32_t n_out, gertHostTensorRef* outs, gertHostOutputAlloc alloc, void* alloc_ctx, char* err,
                   size_t err_len) noexcept nogil:
    if gert_python_finalizing():
        strncpy(err, b"the Python interpreter is shutting down", err_len - 1)
        err[err_len - 1] = 0
        return 1
    gert_pin_thread_state()
    return _prov_run_gil(exe, threads, alone, n_in, ins, n_out, outs, alloc, alloc_ctx, err, err_len)


cdef void _prov_release_gil(void* exe) noexcept with gil:
    Py_DECREF(<object>exe)


cdef void _prov_release(void* exe) noexcept nogil:
    if gert_python_finalizing():  # at exit: the executable goes with the process
        return
    gert_pin_thread_state()
    _prov_release_gil(exe)


cdef int _prov_save_gil(void* exe, gertHostOutputAlloc alloc, void* alloc_ctx, void** data, uint64_t* nbytes,
                        char* err, size_t err_len) noexcept with gil:
    cdef bytes blob
    cdef void* p
    try:
        blob = bytes((<object>exe).save())
        p = alloc(alloc_ctx, len(blob))
        if p == NULL:
            raise MemoryError(f"cannot allocate {len(blob)} bytes for the serialized model")
        c_memcpy(p, <const char*>blob, len(blob))
        data[0] = p
        nbytes[0] = len(blob)
        return 0
    except BaseException as e:
        _write_err(err, err_len, f"{type(e).__name__}: {e}")
        return 1


cdef int _prov_save(void* exe, gertHostOutputAlloc alloc, void* alloc_ctx, void** data, uint64_t* nbytes, char* err,
                    size_t err_len) noexcept nogil:
    gert_pin_thread_state()
    return _prov_save_gil(exe, alloc, alloc_ctx, data, nbytes, err, err_len)


cdef int _prov_load_gil(void* ctx, uint64_t group, const void* data, size_t size, void** exe, char* err,
                        size_t err_len) noexcept with gil:
    try:
        executable = (<object>ctx).load((<const char*>data)[:size], group)
        Py_INCREF(executable)
        exe[0] = <void*>executable
        return 0
    except BaseException as e:
        _write_err(err, err_len, f"{type(e).__name__}: {e}")
        return 1


cdef int _prov_load(void* ctx, uint64_t group, const void* data, size_t size, void** exe, char* err,
                    size_t err_len) noexcept nogil:
    gert_pin_thread_state()
    return _prov_load_gil(ctx, group, data, size, exe, err, err_len)


cdef gertHostGraphProvider _provider_table


def host_provider():
    """The compute provider registered with the host NPU (gert.hostnpu.ort_provider.OrtGraphProvider), or None."""
    return _provider


def _install_host_provider():
    """Register ONNX Runtime as the host NPU's compute provider (done at import on the host NPU)."""
    global _provider
    from gert.hostnpu.ort_provider import OrtGraphProvider
    _provider = OrtGraphProvider()
    _provider_table.ctx = <void*>_provider
    _provider_table.compile = _prov_compile
    _provider_table.prepare = _prov_prepare
    _provider_table.run = _prov_run
    _provider_table.release = _prov_release
    _provider_table.save = _prov_save
    _provider_table.load = _prov_load
    gertHostSetGraphProvider(&_provider_table)


_install_host_provider()
