# GE: initialize/finalize, ONNX parsing, sessions, compile / load / execute on a stream, and the host NPU's
# compute provider (ONNX Runtime) behind it.
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.pair cimport pair
from libc.string cimport strncpy, memcpy as c_memcpy
cimport ge as cge
from backend cimport gertHostTensorRef, gertHostGraphProvider, gertHostOutputAlloc, gertHostSetGraphProvider
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.pythread cimport PyThread_get_thread_ident

import os as _os


cdef str _ge_message():
    return cge.gert_ge_error_msg().decode("utf-8", "replace")


cdef int _check_ge(cge.Status st, str what) except -1:
    if st != 0:
        msg = _ge_message()
        raise _errors.GeError(st, msg if msg else what)
    return 0


cdef cge.gert_options _options(options, str what) except *:
    cdef cge.gert_options out
    if options is None:
        return out
    if not isinstance(options, dict):
        raise TypeError(f"{what}: options must be a dict of str to str, got {type(options).__name__}")
    for k, v in options.items():
        if not isinstance(k, str):
            raise TypeError(f"{what}: option key {k!r} is not a str")
        out.push_back(pair[string, string](k.encode(), str(v).encode()))
    return out


cdef bint _ge_ready = False


def ge_last_warning() -> str:
    """GEGetWarningMsgV2: the calling thread's last GE warning (e.g. an unknown option that was ignored)."""
    return cge.gert_ge_warning_msg().decode("utf-8", "replace")


class GeContext:
    """Returned by ge_initialize(); ``with gert.ge_initialize(...):`` finalizes GE on exit."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        ge_finalize()


def ge_initialize(options=None):
    """GEInitialize(options): global GE options (``ge.*`` keys). Repeated calls are accepted, as in GE."""
    global _ge_ready
    cdef cge.gert_options o = _options(options, "ge_initialize")
    cdef cge.Status st
    with nogil:
        st = cge.gert_ge_initialize(o)
    _check_ge(st, "GEInitialize failed")
    _ge_ready = True
    return GeContext()


def ge_finalize():
    """GEFinalize: releases every session and graph."""
    global _ge_ready
    cdef cge.Status st
    with nogil:
        st = cge.GEFinalize()
    _ge_ready = False
    _check_ge(st, "GEFinalize failed")


cdef class Graph:
    """A parsed ONNX model (aclgrphParseONNX / aclgrphParseONNXFromMem)."""
    cdef cge.Graph _g

    @staticmethod
    def from_onnx(model, parser_params=None):
        """``model``: a path or the serialized model (bytes); ``parser_params``: the parser's 8 keys
        (e.g. ``{"input_shape": "x:1,3,224,224"}``); other keys fail as they do in GE."""
        cdef Graph g = Graph.__new__(Graph)
        cdef cge.gert_options o = _options(parser_params, "Graph.from_onnx")
        cdef cge.graphStatus st
        cdef bytes data
        cdef bytes path
        cdef const char* p
        cdef size_t n
        if isinstance(model, (bytes, bytearray, memoryview)):
            data = bytes(model)
            if not data:
                raise _errors.GeError(0x3000001, "Graph.from_onnx: the model bytes are empty")
            p = data
            n = len(data)
            with nogil:
                st = cge.gert_parse_onnx_mem(p, n, o, &g._g)
        else:
            path = _os.fsencode(model)
            p = path
            with nogil:
                st = cge.gert_parse_onnx(p, o, &g._g)
        _check_ge(st, "parsing the ONNX model failed")
        return g

    @property
    def name(self) -> str:
        return cge.gert_graph_name(&self._g).decode()

    def __repr__(self):
        return f"<gert.Graph {self.name!r}>"


cdef class _GeTensorOwner:
    """Owns a gert::Tensor whose memory GE allocated; deleting it frees that memory."""
    cdef cge.Tensor* t

    def __dealloc__(self):
        if self.t != NULL:
            del self.t
            self.t = NULL


cdef object _device_tensor_cls = None


cdef object _DeviceTensor():
    global _device_tensor_cls
    if _device_tensor_cls is None:
        from gert.tensor import DeviceTensor
        _device_tensor_cls = DeviceTensor
    return _device_tensor_cls


cdef int _push_tensors(cge.gert_tensor_list& v, list tensors, str what) except -1:
    cdef DeviceBuffer buf
    cdef vector[int64_t] dims
    for i, t in enumerate(tensors):
        b = t.buffer
        if not isinstance(b, DeviceBuffer):  # e.g. a HostBuffer: GE takes device memory only
            raise _errors.GeError(145000, f"ExecuteGraphWithStreamAsync: {what}[{i}] is backed by a "
                                  f"{type(b).__name__}, not device memory; GE takes device memory only: copy it to "
                                  f"a DeviceBuffer first (DeviceTensor.from_numpy / DeviceBuffer.copy_from)")
        buf = b
        if buf._ptr == 0 and buf.nbytes:
            raise _errors.AclError(ACL_ERROR_RT_PARAM_INVALID,
                                   f"ExecuteGraphWithStreamAsync: {what}[{i}]: the DeviceBuffer was freed")
        buf._check()
        dims.clear()
        for d in t.shape:
            dims.push_back(d)
        cge.gert_push_device_tensor(v, <void*>buf._ptr, buf.nbytes, t.ge_dtype, dims)
    return 0


cdef class Session:
    """A GE session (ge::Session). Launches through one session are serialized, as in GE: use one per stream
    for concurrency."""
    cdef cge.Session* _s
    cdef dict _loaded  # graph id -> Stream it was loaded on

    def __init__(self, options=None):
        global _ge_ready
        if not _ge_ready:
            ge_initialize()
        cdef cge.gert_options o = _options(options, "Session")
        with nogil:
            self._s = cge.gert_new_session(o)
        self._loaded = {}
        if self._s.GetSessionId() == 0:
            msg = _ge_message()
            del self._s
            self._s = NULL
            raise _errors.GeError(0xFFFFFFFF, msg or "Session could not be created")

    cdef int _check(self) except -1:
        if self._s == NULL:
            raise _errors.GeError(0xFFFFFFFF, "the session was closed")
        return 0

    @property
    def session_id(self) -> int:
        self._check()
        return self._s.GetSessionId()

    def add_graph(self, uint32_t graph_id, Graph graph, options=None):
        """AddGraph with graph-level options (ge.inputShape, ge.dynamicDims, ge.exec.precision_mode, ...)."""
        self._check()
        cdef cge.gert_options o = _options(options, "add_graph")
        cdef cge.Status st
        with nogil:
            st = cge.gert_add_graph(self._s, graph_id, &graph._g, o)
        _check_ge(st, f"AddGraph({graph_id}) failed")

    def compile_graph(self, uint32_t graph_id):
        self._check()
        cdef cge.Status st
        with nogil:
            st = self._s.CompileGraph(graph_id)
        _check_ge(st, f"CompileGraph({graph_id}) failed")

    def summary(self, uint32_t graph_id):
        """GetCompiledGraphSummary -> gert.GraphSummary."""
        self._check()
        cdef cge.gert_summary s
        with nogil:
            s = cge.gert_get_summary(self._s, graph_id)
        if not s.ok:
            raise _errors.GeError(0xFFFFFFFF, _ge_message() or f"graph {graph_id} has no compile summary")
        from gert.dtypes import numpy_dtype
        from gert.tensor import GraphSummary
        return GraphSummary(
            is_static=s.is_static, _const_memory_size=s.const_memory if s.const_st == 0 else None,
            _feature_memory_size=s.feature_memory if s.feature_st == 0 else None,
            _output_shapes=[tuple(d) for d in s.shapes] if s.shapes_st == 0 else None,
            _output_dtypes=[numpy_dtype(d) for d in s.dtypes] if s.dtypes_st == 0 else None, graph_id=graph_id)

    def load_graph(self, uint32_t graph_id, Stream stream, options=None):
        """LoadGraph(graph_id, options, stream): binds the compiled graph to the stream (once per graph)."""
        self._check()
        stream._check()
        cdef cge.gert_options o = _options(options, "load_graph")
        cdef cge.Status st
        cdef void* h = stream._h
        with nogil:
            st = cge.gert_load_graph(self._s, graph_id, o, h)
        _check_ge(st, f"LoadGraph({graph_id}) failed")
        self._loaded[graph_id] = stream

    def execute_async(self, uint32_t graph_id, Stream stream, inputs, outputs=None):
        """ExecuteGraphWithStreamAsync: queue one run of the graph on ``stream``.

        ``inputs``/``outputs``: lists of gert.DeviceTensor. Static graphs need ``outputs``; a dynamic graph given
        none allocates them and returns new DeviceTensors (it then waits for the run, to know their shapes).
        Everything passed stays alive until the stream is synchronized.
        """
        self._check()
        stream._check()
        cdef cge.gert_tensor_list ins, outs
        cdef list in_list = list(inputs)
        cdef list out_list = [] if outputs is None else list(outputs)
        _push_tensors(ins, in_list, "inputs")
        _push_tensors(outs, out_list, "outputs")
        cdef cge.Status st
        cdef void* h = stream._h
        with nogil:
            st = self._s.ExecuteGraphWithStreamAsync(graph_id, h, ins, outs)
        _check_ge(st, f"ExecuteGraphWithStreamAsync({graph_id}) failed")
        stream._keep_alive((in_list, out_list))
        if out_list:
            for i in range(outs.size()):  # GE writes each output's shape into its tensor (unknown-shape graphs)
                out_list[i].shape = tuple(cge.gert_tensor_dims(outs[i]))
            return out_list
        cdef list produced = []
        cdef _GeTensorOwner owner
        cdef DeviceBuffer buf
        from gert.dtypes import numpy_dtype
        for i in range(outs.size()):
            owner = _GeTensorOwner.__new__(_GeTensorOwner)
            owner.t = cge.gert_take_tensor(outs, i)
            buf = DeviceBuffer.__new__(DeviceBuffer)
            buf._ptr = <intptr_t>owner.t.GetAddr()
            buf.nbytes = owner.t.GetSize()
            buf.device_id = stream.device_id
            buf._epoch = stream._epoch
            buf._owner = owner
            produced.append(_DeviceTensor()(buf, tuple(cge.gert_tensor_dims(owner.t[0])),
                                            numpy_dtype(cge.gert_tensor_dtype(owner.t[0]))))
        return produced

    def run_fused(self, uint32_t graph_id, Stream stream, list uploads, list fills, list inputs, list outputs,
                  list downloads, int32_t timeout_ms=-1):
        """One request of a static graph, enqueued and waited for in a single call without the GIL.

        ``uploads``: [(device_ptr, device_max, host_buffer)] H2D copies of the whole host buffer;
        ``fills``: [(device_ptr, device_max, nbytes, value)] memsets; ``inputs``/``outputs``: [(device_ptr, nbytes,
        ge_dtype, shape)] the graph's tensors; ``downloads``: [(host_buffer, device_ptr)] D2H copies filling the
        whole (writable) host buffer. Then the stream is synchronized (``timeout_ms`` >= 1: with that timeout; when
        it expires the stream is aborted and ACL_ERROR_RT_STREAM_SYNC_TIMEOUT raised). Faster than separate calls:
        the stream's worker never waits for this thread's GIL.
        """
        self._check()
        stream._check()
        cdef vector[cge.gert_copy] cin, cout
        cdef vector[cge.gert_fill] cfill
        cdef cge.gert_copy c
        cdef cge.gert_fill f
        cdef cge.gert_tensor_list ins, outs
        cdef vector[int64_t] dims
        cdef _HeldBuffer h
        cdef list held = []
        for dptr, dmax, obj in uploads:
            h = _acquire(obj, False, "run_fused upload")
            held.append(h)
            c.dst = <void*><intptr_t>dptr
            c.dmax = dmax
            c.src = h.view.buf
            c.n = h.view.len
            c.kind = ACL_MEMCPY_HOST_TO_DEVICE
            cin.push_back(c)
        for dptr, dmax, n, value in fills:
            f.dst = <void*><intptr_t>dptr
            f.dmax = dmax
            f.n = n
            f.value = value
            cfill.push_back(f)
        for dptr, n, dt, shape in inputs:
            dims.clear()
            for d in shape:
                dims.push_back(d)
            cge.gert_push_device_tensor(ins, <void*><intptr_t>dptr, n, dt, dims)
        for dptr, n, dt, shape in outputs:
            dims.clear()
            for d in shape:
                dims.push_back(d)
            cge.gert_push_device_tensor(outs, <void*><intptr_t>dptr, n, dt, dims)
        for obj, dptr in downloads:
            h = _acquire(obj, True, "run_fused download")
            held.append(h)
            c.dst = h.view.buf
            c.dmax = h.view.len
            c.src = <const void*><intptr_t>dptr
            c.n = h.view.len
            c.kind = ACL_MEMCPY_DEVICE_TO_HOST
            cout.push_back(c)
        cdef int kind = 0
        cdef string msg
        cdef int code
        cdef void* sh = stream._h
        with nogil:
            code = cge.gert_run_fused(self._s, graph_id, sh, cin, cfill, ins, outs, cout, timeout_ms, &kind, &msg)
        if code != 0:
            text = msg.decode("utf-8", "replace")
            if kind == 2:
                raise _errors.GeError(<unsigned int>code, text)
            raise _errors.AclError(code, text)

    def run_graph(self, uint32_t graph_id, inputs):
        """RunGraph: synchronous, numpy arrays in and out (compiles the graph on first use)."""
        self._check()
        import numpy as np
        from gert.dtypes import ge_dtype, numpy_dtype
        # np.require keeps 0-d arrays 0-d (np.ascontiguousarray would make them shape (1,))
        arrays = [np.require(a, requirements="C") for a in inputs]
        cdef vector[const void*] data
        cdef vector[size_t] sizes
        cdef vector[int] dtypes
        cdef vector[vector[int64_t]] dims
        cdef vector[int64_t] d
        cdef vector[cge.GeTensor] out
        for a in arrays:
            data.push_back(<const void*><intptr_t>a.ctypes.data)
            sizes.push_back(a.nbytes)
            dtypes.push_back(ge_dtype(a.dtype))
            d.clear()
            for x in a.shape:
                d.push_back(x)
            dims.push_back(d)
        cdef cge.Status st
        with nogil:
            st = cge.gert_run_graph(self._s, graph_id, data, sizes, dtypes, dims, &out)
        _check_ge(st, f"RunGraph({graph_id}) failed")
        results = []
        for i in range(out.size()):
            shape = tuple(cge.gert_ge_tensor_dims(out[i]))
            dt = numpy_dtype(cge.gert_ge_tensor_dtype(out[i]))
            n = out[i].GetSize()
            raw = (<const char*>out[i].GetData())[:n] if n else b""
            results.append(np.frombuffer(raw, dtype=dt).reshape(shape).copy())
        return results

    def remove_graph(self, uint32_t graph_id):
        """RemoveGraph: fails while runs of the graph are in flight (synchronize the stream first)."""
        self._check()
        cdef cge.Status st
        with nogil:
            st = self._s.RemoveGraph(graph_id)
        _check_ge(st, f"RemoveGraph({graph_id}) failed")
        self._loaded.pop(graph_id, None)

    def close(self):
        """Destroy the session (its graphs go with it)."""
        cdef cge.Session* s = self._s
        self._s = NULL
        if s != NULL:
            with nogil:
                del s
        self._loaded.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __dealloc__(self):
        cdef cge.Session* s = self._s
        self._s = NULL
        if s != NULL:
            with nogil:
                del s


# ---- the host NPU's compute provider --------------------------------------------------------------------

cdef object _provider = None


cdef void _write_err(char* err, size_t n, str text) noexcept:
    cdef bytes b = text.encode("utf-8", "replace")[: n - 1]
    strncpy(err, b, n - 1)
    err[n - 1] = 0


cdef tuple _ref_dims(const gertHostTensorRef* r):
    return tuple([r.dims[k] for k in range(r.ndim)])


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
        data = (<const char*>model)[:size]
        inputs = [(in_names[i].decode(), ins[i].dtype, _ref_dims(&ins[i])) for i in range(n_in)]
        outputs = [(out_names[i].decode(), outs[i].dtype, _ref_dims(&outs[i])) for i in range(n_out)]
        executable, result, unknown = (<object>ctx).compile(data, inputs, outputs, group)
        unknown_shape[0] = 1 if unknown else 0
        for i, (dt, dims) in enumerate(result):
            outs[i].dtype = dt
            outs[i].ndim = len(dims)
            for k, d in enumerate(dims):
                outs[i].dims[k] = d
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


cdef int _prov_prepare_gil(void* exe, int32_t threads, char* err, size_t err_len) noexcept with gil:
    try:
        (<object>exe).session(threads)
        return 0
    except BaseException as e:
        _write_err(err, err_len, f"{type(e).__name__}: {e}")
        return 1


cdef int _prov_prepare(void* exe, int32_t threads, char* err, size_t err_len) noexcept nogil:
    gert_pin_thread_state()
    return _prov_prepare_gil(exe, threads, err, err_len)


cdef int _prov_run_gil(void* exe, int32_t threads, int32_t n_in, const gertHostTensorRef* ins, int32_t n_out,
                       gertHostTensorRef* outs, gertHostOutputAlloc alloc, void* alloc_ctx, char* err,
                       size_t err_len) noexcept with gil:
    cdef _OutputAllocator a
    cdef object executable = <object>exe
    try:
        # Fast path: the same buffers, shapes and thread count as a run before (the executor's steady state):
        # reuse that run's IOBinding, keyed by the raw tensor descriptions.
        key = (threads, PyThread_get_thread_ident(),
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
        results = executable.run(threads, inputs, outputs, a)
        executable.remember(key)
        for i, r in enumerate(results):
            if r is None:
                continue
            ptr, nbytes, dims = r
            outs[i].data = <void*><intptr_t>ptr
            outs[i].nbytes = nbytes
            outs[i].ndim = len(dims)
            for k, d in enumerate(dims):
                outs[i].dims[k] = d
        return 0
    except BaseException as e:
        _write_err(err, err_len, f"{type(e).__name__}: {e}")
        return 1


cdef int _prov_run(void* exe, int32_t threads, int32_t n_in, const gertHostTensorRef* ins, int32_t n_out,
                   gertHostTensorRef* outs, gertHostOutputAlloc alloc, void* alloc_ctx, char* err,
                   size_t err_len) noexcept nogil:
    gert_pin_thread_state()
    return _prov_run_gil(exe, threads, n_in, ins, n_out, outs, alloc, alloc_ctx, err, err_len)


cdef void _prov_release_gil(void* exe) noexcept with gil:
    Py_DECREF(<object>exe)


cdef void _prov_release(void* exe) noexcept nogil:
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
    """The compute provider registered with the host NPU (gert._ort_provider.OrtGraphProvider), or None."""
    return _provider


def _install_host_provider():
    """Register ONNX Runtime as the host NPU's compute provider (done at import on the host NPU)."""
    global _provider
    if not GERT_HAS_HOST_NPU:
        return
    from gert._ort_provider import OrtGraphProvider
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
