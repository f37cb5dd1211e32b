# The host NPU's compute provider: ONNX Runtime (gert.hostnpu.ort_provider) computes host NPU GE graphs, called through
# gertHostSetGraphProvider's table (set_host_provider: gert.hostnpu gives it the provider at import). Host NPU only: compiled into gert._cann when the host NPU is built in, into
# gert._hostnpu when gert is built against the host NPU packaged as a toolkit; never in a build against real CANN.
from libc.stdint cimport intptr_t, int32_t, int64_t, uint64_t
from libc.string cimport strncpy, memcmp, memcpy as c_memcpy
from libc.stdlib cimport malloc as c_malloc, free as c_free
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF, Py_XDECREF
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.object cimport PyObject_CallObject
from backend cimport (gertHostTensorRef, gertHostGraphProvider, gertHostOutputAlloc, gertHostSetGraphProvider,
                      gert_pin_thread_state, gert_python_finalizing, gertHostCompileOption, GERT_HOST_MAX_DIMS)

cdef object _provider = None


cdef class _ModelView:
    """The ONNX bytes a GE graph holds (its GraphImpl's model, immutable), lent to the provider without a copy: a
    read-only buffer (hashlib, bytes(view)) valid while a compile of it runs or an executable compiled from it lives.
    The graph record holds the graph, and so the bytes, during its compile and until it releases its executable
    (~GraphRecord), so the view is valid while ``users`` > 0; the last release invalidates it (a buffer asked for
    then raises instead of reading freed memory). A model compiled at many sizes and for several streams (policy
    auto) shares one view, and the provider finds its digest by the same object. Before, the provider got a bytes copy of the model, which stayed
    for the process's life (10.6 MB for PP-OCR rec beside GE's own copy and ONNX Runtime's session; issue 41).
    A graph parsed from a model file holds no bytes between compiles (cbindings/hostnpu ModelBytes reads them again
    for each): its view is lent for the compile only, and the executable keeps the file instead (OrtExecutable
    .keep_file), so the view is released when the compile ends."""
    cdef const char* data
    cdef Py_ssize_t size
    cdef int users   # compiles running on it and executables alive that were compiled from it

    def __getbuffer__(self, Py_buffer* buf, int flags):
        if self.data == NULL:
            raise ValueError("the graph's model bytes are gone: every executable compiled from them was released")
        PyBuffer_FillInfo(buf, self, <void*>self.data, self.size, 1, flags)

    def __releasebuffer__(self, Py_buffer* buf):
        pass

    def __len__(self):
        return self.size

    def __bytes__(self):
        if self.data == NULL:
            raise ValueError("the graph's model bytes are gone: every executable compiled from them was released")
        return PyBytes_FromStringAndSize(self.data, self.size)

    @property
    def valid(self) -> bool:
        return self.data != NULL


# (address, size) of the ONNX bytes a GE graph holds -> the view lent for them, reused while an executable compiled
# from it lives (the bytes are alive then, so the address cannot belong to other bytes).
cdef dict _model_views = {}


cdef _ModelView _model_view(const void* model, size_t size):
    key = (<intptr_t>model, size)
    cdef _ModelView v = _model_views.get(key)
    if v is not None and v.users > 0:
        return v
    v = _ModelView.__new__(_ModelView)
    v.data = <const char*>model
    v.size = <Py_ssize_t>size
    for k in [k for k, old in _model_views.items() if (<_ModelView>old).users == 0]:
        del _model_views[k]  # views no executable uses: their bytes may be gone
    _model_views[key] = v
    return v


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


# ---- a compiled graph as the host NPU holds it -------------------------------------------------------------------
# The replay cache: a run whose outputs were all written in place is repeated, for the same tensors (addresses,
# sizes, dtypes, shapes) and the same share of the device, by calling ONNX Runtime's run_with_iobinding on the
# IOBinding that run bound: no binding, no Python frame, no object built per call (the entry holds the bound method
# and its argument tuple). Entries are matched by a hash of the tensor refs, then field by field.
cdef enum:
    _REPLAYS_KEPT = 16


cdef struct _Replay:
    uint64_t hash
    int32_t threads
    int32_t alone
    int32_t n_in
    int32_t n_out
    int32_t busy                # a thread is running this binding now (the GIL is released inside ORT's run)
    gertHostTensorRef* refs     # n_in + n_out refs, malloc'd
    PyObject* call              # ONNX Runtime's run_with_iobinding, bound
    PyObject* args              # its argument tuple
    PyObject* keep              # what the binding needs alive (the IOBinding, arrays bound for empty inputs)


cdef inline uint64_t _mix(uint64_t h, uint64_t v) noexcept nogil:
    h ^= v
    return h * <uint64_t>0x100000001b3ULL


cdef uint64_t _refs_hash(int32_t threads, int32_t alone, int32_t n_in, const gertHostTensorRef* ins, int32_t n_out,
                         const gertHostTensorRef* outs) noexcept nogil:
    cdef uint64_t h = <uint64_t>0xcbf29ce484222325ULL
    cdef int32_t i, k
    cdef const gertHostTensorRef* r
    h = _mix(h, <uint64_t>threads * 2 + <uint64_t>(alone != 0))
    for i in range(n_in + n_out):
        r = &ins[i] if i < n_in else &outs[i - n_in]
        h = _mix(h, <uint64_t><intptr_t>r.data)
        h = _mix(h, r.nbytes)
        h = _mix(h, (<uint64_t><uint32_t>r.dtype << 32) | <uint32_t>r.ndim)
        for k in range(min(max(r.ndim, 0), GERT_HOST_MAX_DIMS)):
            h = _mix(h, <uint64_t>r.dims[k])
    return h


cdef bint _ref_same(const gertHostTensorRef* a, const gertHostTensorRef* b) noexcept nogil:
    if a.data != b.data or a.nbytes != b.nbytes or a.dtype != b.dtype or a.ndim != b.ndim:
        return False
    cdef int32_t n = min(max(a.ndim, 0), GERT_HOST_MAX_DIMS)
    return n == 0 or memcmp(a.dims, b.dims, n * sizeof(int64_t)) == 0


cdef class _Executable:
    """What the host NPU holds for a compiled graph (the provider's `void* exe`): the provider's executable
    (gert.hostnpu.ort_provider.OrtExecutable) and the replay cache of its runs."""
    cdef object py
    cdef _ModelView view  # the model bytes it was compiled from (None for one loaded from GE's compile cache)
    cdef _Replay replays[_REPLAYS_KEPT]
    cdef int n_replays
    cdef readonly uint64_t replayed   # runs served from the cache (for tests and profiles)
    cdef object __weakref__

    cdef _Replay* find(self, uint64_t h, int32_t threads, int32_t alone, int32_t n_in, const gertHostTensorRef* ins,
                       int32_t n_out, const gertHostTensorRef* outs) noexcept:
        cdef int j
        cdef int32_t i
        cdef _Replay* e
        for j in range(self.n_replays):
            e = &self.replays[j]
            if e.hash != h or e.threads != threads or e.alone != alone or e.n_in != n_in or e.n_out != n_out:
                continue
            for i in range(n_in):
                if not _ref_same(&e.refs[i], &ins[i]):
                    break
            else:
                for i in range(n_out):
                    if not _ref_same(&e.refs[n_in + i], &outs[i]):
                        break
                else:
                    return e
        return NULL

    cdef int add(self, uint64_t h, int32_t threads, int32_t alone, int32_t n_in, const gertHostTensorRef* ins,
                 int32_t n_out, const gertHostTensorRef* outs, tuple replay) except -1:
        """Keep ``replay`` = (callable, args, keep) for these refs; the cache starts over when full."""
        cdef int j
        if self.find(h, threads, alone, n_in, ins, n_out, outs) != NULL:
            return 0  # another thread ran the same tensors meanwhile and kept its binding
        if self.n_replays >= _REPLAYS_KEPT:
            for j in range(self.n_replays):
                if self.replays[j].busy:
                    return 0  # an entry is in use by a run on another thread: keep them all, skip this one
            self.clear()
        call, args, keep = replay
        cdef gertHostTensorRef* refs = <gertHostTensorRef*>c_malloc((n_in + n_out) * sizeof(gertHostTensorRef) + 1)
        if refs == NULL:
            raise MemoryError("cannot allocate the replay cache entry")
        if n_in:
            c_memcpy(refs, ins, n_in * sizeof(gertHostTensorRef))
        if n_out:
            c_memcpy(&refs[n_in], outs, n_out * sizeof(gertHostTensorRef))
        cdef _Replay* e = &self.replays[self.n_replays]
        e.hash = h
        e.threads = threads
        e.alone = alone
        e.n_in = n_in
        e.n_out = n_out
        e.busy = 0
        e.refs = refs
        Py_INCREF(call)
        e.call = <PyObject*>call
        Py_INCREF(args)
        e.args = <PyObject*>args
        Py_INCREF(keep)
        e.keep = <PyObject*>keep
        self.n_replays += 1
        return 0

    cdef void clear(self) noexcept:
        cdef int j
        cdef _Replay* e
        cdef int n = self.n_replays
        self.n_replays = 0
        for j in range(n):
            e = &self.replays[j]
            c_free(e.refs)
            Py_XDECREF(e.call)
            Py_XDECREF(e.args)
            Py_XDECREF(e.keep)
            e.refs = NULL
            e.call = e.args = e.keep = NULL

    def replay_keys(self):
        """(threads, alone, input shapes, output shapes) of each cached replay, for tests."""
        cdef int j
        cdef _Replay* e
        keys = []
        for j in range(self.n_replays):
            e = &self.replays[j]
            keys.append((e.threads, e.alone != 0, tuple(_ref_dims(&e.refs[i]) for i in range(e.n_in)),
                         tuple(_ref_dims(&e.refs[e.n_in + i]) for i in range(e.n_out))))
        return keys

    @property
    def executable(self):
        return self.py

    def __dealloc__(self):
        self.clear()


cdef object _executables = None  # weakref.WeakSet of the live _Executable objects, for tests and introspection


def host_executables() -> list:
    """The host NPU's compiled graphs alive now (the provider's executable and the replay cache of each)."""
    return list(_executables) if _executables is not None else []


cdef _Executable _wrap_executable(object py):
    global _executables
    cdef _Executable w = _Executable.__new__(_Executable)
    w.py = py
    if _executables is None:
        import weakref
        _executables = weakref.WeakSet()
    _executables.add(w)
    return w


cdef int _prov_compile_gil(void* ctx, uint64_t group, const void* model, size_t size, int32_t n_in,
                           const char* const* in_names,
                           const gertHostTensorRef* ins, int32_t n_out, const char* const* out_names,
                           gertHostTensorRef* outs, int32_t* unknown_shape, void** exe, char* err,
                           size_t err_len) noexcept with gil:
    cdef _ModelView data = _model_view(model, size)
    cdef _Executable wrapped
    # A graph parsed from a model file lends its bytes for this compile only, and names the file to read them from
    # again (cbindings/hostnpu ModelBytes); "" (or NULL: no compile option) for a graph that holds its bytes.
    cdef const char* opt = gertHostCompileOption(b"gert.host.model_file")
    cdef bytes reread = opt if opt != NULL else b""  # a copy now: the provider's own asks reuse the thread's string
    data.users += 1  # the compile uses it: a graph of the same bytes released meanwhile must not invalidate it
    try:
        inputs = [(in_names[i].decode(), ins[i].dtype, _ref_dims(&ins[i])) for i in range(n_in)]
        outputs = [(out_names[i].decode(), outs[i].dtype, _ref_dims(&outs[i])) for i in range(n_out)]
        executable, result, unknown = (<object>ctx).compile(data, inputs, outputs, group)
        unknown_shape[0] = 1 if unknown else 0
        for i, (dt, dims) in enumerate(result):
            _set_dims(&outs[i], dims, f"output {i} '{out_names[i].decode()}'")
            outs[i].dtype = dt
        if reread and getattr(executable, "source", None) is data:
            executable.keep_file(reread.decode())  # /proc/self/fd/N
        wrapped = _wrap_executable(executable)
        if getattr(executable, "source", None) is data:
            wrapped.view = data  # the compile's use passes to the executable
        else:  # it keeps the model's file or bytes of its own: the bytes lent may go when the compile ends
            _release_view(data)
        Py_INCREF(wrapped)
        exe[0] = <void*>wrapped
        return 0
    except BaseException as e:
        _release_view(data)
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
        (<_Executable>exe).py.session(threads, alone != 0)
        return 0
    except BaseException as e:
        _write_err(err, err_len, f"{type(e).__name__}: {e}")
        return 1


cdef int _prov_prepare(void* exe, int32_t threads, int32_t alone, char* err, size_t err_len) noexcept nogil:
    gert_pin_thread_state()
    return _prov_prepare_gil(exe, threads, alone, err, err_len)


cdef int _prov_replay(_Replay* e, char* err, size_t err_len) noexcept:
    """Runs a cached binding again (the GIL held); the entry stays busy meanwhile (ONNX Runtime releases the GIL
    while it computes, and another thread with the same tensors must not share the binding)."""
    e.busy = 1
    try:
        PyObject_CallObject(<object>e.call, <object>e.args)
        return 0
    except BaseException as x:
        _write_err(err, err_len, f"{type(x).__name__}: {x}")
        return 1
    finally:
        e.busy = 0


cdef int _prov_run_gil(void* exe, uint64_t h, int32_t threads, int32_t alone, int32_t n_in,
                       const gertHostTensorRef* ins, int32_t n_out,
                       gertHostTensorRef* outs, gertHostOutputAlloc alloc, void* alloc_ctx, char* err,
                       size_t err_len) noexcept with gil:
    cdef _OutputAllocator a
    cdef _Executable w = <_Executable>exe
    cdef _Replay* e = w.find(h, threads, alone, n_in, ins, n_out, outs)
    if e != NULL and not e.busy:  # found after the GIL was taken: another thread may have added it meanwhile
        w.replayed += 1
        if _prov_replay(e, err, err_len) == 0:
            return 0
        # a replay that failed (bad input values at known shapes) runs again through the executable, whose error
        # carries ONNX Runtime's status (INVALID_ARGUMENT, FAIL, ...): a failure path only
    cdef object executable = w.py
    try:
        a = _OutputAllocator.__new__(_OutputAllocator)
        a.fn = alloc
        a.ctx = alloc_ctx
        inputs = [(<intptr_t>ins[i].data, ins[i].nbytes, ins[i].dtype, _ref_dims(&ins[i])) for i in range(n_in)]
        outputs = [(<intptr_t>outs[i].data, outs[i].nbytes, outs[i].dtype, _ref_dims(&outs[i])) for i in range(n_out)]
        results = executable.run(threads, alone != 0, inputs, outputs, a)
        replay = executable.take_replay()
        if replay is not None:
            w.add(h, threads, alone, n_in, ins, n_out, outs, replay)
        for i, r in enumerate(results):
            if r is None:
                continue
            ptr, nbytes, dims = r
            _set_dims(&outs[i], dims, f"output {i}")
            outs[i].data = <void*><intptr_t>ptr
            outs[i].nbytes = nbytes
        return 0
    except BaseException as x:
        _write_err(err, err_len, f"{type(x).__name__}: {x}")
        return 1


cdef int _prov_run(void* exe, int32_t threads, int32_t alone, int32_t n_in, const gertHostTensorRef* ins,
                   int32_t n_out, gertHostTensorRef* outs, gertHostOutputAlloc alloc, void* alloc_ctx, char* err,
                   size_t err_len) noexcept nogil:
    if gert_python_finalizing():
        strncpy(err, b"the Python interpreter is shutting down", err_len - 1)
        err[err_len - 1] = 0
        return 1
    cdef uint64_t h = _refs_hash(threads, alone, n_in, ins, n_out, outs)  # before the GIL: nothing Python in it
    gert_pin_thread_state()
    return _prov_run_gil(exe, h, threads, alone, n_in, ins, n_out, outs, alloc, alloc_ctx, err, err_len)


cdef void _release_view(_ModelView v) noexcept:
    """One user (a compile, an executable) of ``v`` is done; with the last, the graph's bytes may go: invalid."""
    if v is not None:
        v.users -= 1
        if v.users <= 0:
            v.data = NULL


cdef void _prov_release_gil(void* exe) noexcept with gil:
    _release_view((<_Executable>exe).view)
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
        blob = bytes((<_Executable>exe).py.save())
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
        wrapped = _wrap_executable(executable)
        Py_INCREF(wrapped)
        exe[0] = <void*>wrapped
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


cdef list _replaced_providers = []  # kept alive: executables they compiled may still call them (table.ctx)


def set_host_provider(provider) -> None:
    """gertHostSetGraphProvider: the host NPU's compute provider, the object whose compile / prepare / run / release
    / save / load methods compute its GE graphs (gert.hostnpu gives it ONNX Runtime's, OrtGraphProvider, at
    import). Until one is set, a compile fails with the host NPU's "no compute provider is registered" error."""
    global _provider
    if provider is None:
        raise TypeError("set_host_provider: provider must be a compute provider object, got None")
    if _provider is not None:
        _replaced_providers.append(_provider)
    _provider = provider
    _provider_table.ctx = <void*>_provider
    _provider_table.compile = _prov_compile
    _provider_table.prepare = _prov_prepare
    _provider_table.run = _prov_run
    _provider_table.release = _prov_release
    _provider_table.save = _prov_save
    _provider_table.load = _prov_load
    gertHostSetGraphProvider(&_provider_table)
