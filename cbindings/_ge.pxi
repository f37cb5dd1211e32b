# GE: initialize/finalize, ONNX parsing, sessions, compile / load / execute on a stream. (The host NPU's compute
# provider behind it is in _provider.pxi.)
from libc.string cimport memcpy as _c_memcpy
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.pair cimport pair
cimport ge as cge

import os as _os


cdef str _ge_message():
    return cge.gert_ge_error_msg().decode("utf-8", "replace")


cdef int _check_ge(cge.Status st, str what) except -1:
    if st != 0:
        msg = _ge_message()
        raise _GeError(st, msg if msg else what)
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
        _check_parse(model)  # gert's CANN op check, registered (gert/_binding.py: it decides when it applies)
        cdef cge.gert_options o = _options(parser_params, "Graph.from_onnx")
        cdef cge.graphStatus st
        cdef bytes data
        cdef bytes path
        cdef const char* p
        cdef size_t n
        if isinstance(model, (bytes, bytearray, memoryview)):
            data = bytes(model)
            if not data:
                raise _GeError(0x3000001, "Graph.from_onnx: the model bytes are empty")
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
    """Owns a gert::Tensor (or a ge::Tensor handle, ``gt``) whose memory GE allocated; deleting it frees that memory."""
    cdef cge.Tensor* t
    cdef cge.GeTensor* gt

    def __dealloc__(self):
        if self.t != NULL:
            del self.t
            self.t = NULL
        if self.gt != NULL:
            del self.gt
            self.gt = NULL


cdef object _np = None  # numpy, imported by the first Session.run_graph


# The fused call's lists, parsed in this one place: by Session.run_fused at each call, by FusedCall (_fused.pxi) once.
cdef int _push_uploads(vector[cge.gert_copy]& out, uploads, list held, vector[char]& staged, str what,
                       bint gather=True) except -1:
    """``uploads``: [(device_ptr, device_max, host)] H2D copies of the whole host buffer, or of a list of host buffers
    laid one after the other (a merged batch's parts: _push_pieces places them, small ones gathered into
    ``staged`` when ``gather``; it must not be resized until the copies ran). The buffers are kept acquired in
    ``held``."""
    cdef _HeldBuffer h
    cdef cge.gert_copy c
    cdef vector[const void*] srcs
    cdef vector[size_t] lens
    cdef vector[size_t] first  # per upload, its first piece in srcs / lens
    cdef vector[cge.gert_copy] wholes  # per upload, its device end and size (src unset)
    cdef vector[bint] pieces  # per upload, whether its host end is a list of pieces
    cdef size_t i, gathered = 0
    c.kind = ACL_MEMCPY_HOST_TO_DEVICE
    for dptr, dmax, obj in uploads:
        first.push_back(srcs.size())
        c.dst = <void*><intptr_t>dptr
        c.dmax = dmax
        c.n = 0
        for piece in (obj if type(obj) is list else (obj,)):
            h = _acquire(piece, False, what)
            held.append(h)
            srcs.push_back(h.view.buf)
            lens.push_back(h.view.len)
            c.n += h.view.len
        wholes.push_back(c)
        pieces.push_back(type(obj) is list)
        if type(obj) is list and gather:
            gathered += _gathered_bytes(c.n)
    first.push_back(srcs.size())
    staged.resize(gathered + 1)
    cdef char* at = staged.data()
    cdef char** into = &at if gather else NULL
    for i in range(wholes.size()):
        if pieces[i]:
            _push_pieces(out, wholes[i], srcs.data() + first[i], lens.data() + first[i], first[i + 1] - first[i], into)
        else:
            c = wholes[i]
            c.src = srcs[first[i]]
            out.push_back(c)
    return 0


cdef int _push_fills(vector[cge.gert_fill]& out, fills) except -1:
    """``fills``: [(device_ptr, device_max, nbytes, value)] memsets."""
    cdef cge.gert_fill f
    for dptr, dmax, n, value in fills:
        f.dst = <void*><intptr_t>dptr
        f.dmax = dmax
        f.n = n
        f.value = value
        out.push_back(f)
    return 0


cdef int _push_graph_tensors(cge.gert_tensor_list& out, tensors) except -1:
    """``tensors``: [(device_ptr, nbytes, ge_dtype, shape)] the graph's inputs or outputs."""
    cdef vector[int64_t] dims
    for dptr, n, dt, shape in tensors:
        dims.clear()
        for d in shape:
            dims.push_back(d)
        cge.gert_push_device_tensor(out, <void*><intptr_t>dptr, n, dt, dims)
    return 0


cdef int _fused_failed(int code, int kind, string msg) except -1:
    """Raise what gert_run_fused reported: GE's Status (``kind`` 2), else the runtime's aclError."""
    text = msg.decode("utf-8", "replace")
    if kind == 2:
        raise _GeError(<unsigned int>code, text)
    raise _AclError(code, text)


cdef DeviceBuffer _device_buffer_of(t, int i, str what, str api):
    """The live DeviceBuffer behind DeviceTensor ``t`` (``what``[i] of ``api``'s arguments)."""
    cdef DeviceBuffer buf
    b = t.buffer
    if not isinstance(b, DeviceBuffer):  # e.g. a HostBuffer: GE takes device memory only
        raise _GeError(145000, f"{api}: {what}[{i}] is backed by a "
                       f"{type(b).__name__}, not device memory; GE takes device memory only: copy it to "
                       f"a DeviceBuffer first (DeviceTensor.from_numpy / DeviceBuffer.copy_from)")
    buf = b
    if buf._ptr == 0 and buf.nbytes:
        raise _AclError(ACL_ERROR_RT_PARAM_INVALID, f"{api}: {what}[{i}]: the DeviceBuffer was freed")
    buf._check()
    return buf


cdef int _push_tensors(cge.gert_tensor_list& v, list tensors, str what) except -1:
    cdef DeviceBuffer buf
    cdef vector[int64_t] dims
    dims.reserve(8)
    v.reserve(len(tensors))
    for i, t in enumerate(tensors):
        buf = _device_buffer_of(t, i, what, "ExecuteGraphWithStreamAsync")
        dims.clear()
        for d in t.shape:
            dims.push_back(d)
        cge.gert_push_device_tensor(v, <void*>buf._ptr, buf.nbytes, t.ge_dtype, dims)
    return 0


cdef int _push_ge_tensors(vector[cge.GeTensor]& v, list tensors, str what) except -1:
    cdef DeviceBuffer buf
    cdef vector[int64_t] dims
    for i, t in enumerate(tensors):
        buf = _device_buffer_of(t, i, what, "RunGraphWithStreamAsync")
        dims.clear()
        for d in t.shape:
            dims.push_back(d)
        cge.gert_push_ge_device_tensor(v, <void*>buf._ptr, buf.nbytes, t.ge_dtype, dims)
    return 0


cdef object _ge_owned_tensor(_GeTensorOwner owner, void* ptr, size_t nbytes, tuple shape, int ge_dtype,
                             Stream stream):
    """A DeviceTensor over memory GE allocated for an output, freed when ``owner`` goes."""
    cdef DeviceBuffer buf = DeviceBuffer.__new__(DeviceBuffer)
    buf._ptr = <intptr_t>ptr
    buf.nbytes = nbytes
    buf.device_id = stream.device_id
    buf._epoch = stream._epoch
    buf._owner = owner
    return _DeviceTensor(buf, shape, _numpy_dtype(ge_dtype))


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
            raise _GeError(0xFFFFFFFF, msg or "Session could not be created")

    cdef int _check(self) except -1:
        if self._s == NULL:
            raise _GeError(0xFFFFFFFF, "the session was closed")
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
            raise _GeError(0xFFFFFFFF, _ge_message() or f"graph {graph_id} has no compile summary")
        return _GraphSummary(
            is_static=s.is_static, _const_memory_size=s.const_memory if s.const_st == 0 else None,
            _feature_memory_size=s.feature_memory if s.feature_st == 0 else None,
            _output_shapes=[tuple(d) for d in s.shapes] if s.shapes_st == 0 else None,
            _output_dtypes=[_numpy_dtype(d) for d in s.dtypes] if s.dtypes_st == 0 else None, graph_id=graph_id)

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
        if st != 0:  # (the message formatted on failure only: these are per-request calls)
            _check_ge(st, f"ExecuteGraphWithStreamAsync({graph_id}) failed")
        stream._keep_alive((in_list, out_list))
        cdef vector[int64_t] got
        cdef object had
        cdef Py_ssize_t k
        if out_list:
            for i in range(outs.size()):  # GE writes each output's shape into its tensor (unknown-shape graphs)
                got = cge.gert_tensor_dims(outs[i])
                had = out_list[i].shape
                if <size_t>len(had) == got.size():
                    for k in range(len(had)):
                        if had[k] != got[k]:
                            break
                    else:
                        continue  # unchanged (a static graph's): no new tuple
                out_list[i].shape = tuple(got)
            return out_list
        cdef list produced = []
        cdef _GeTensorOwner owner
        for i in range(outs.size()):
            owner = _GeTensorOwner.__new__(_GeTensorOwner)
            owner.t = cge.gert_take_tensor(outs, i)
            produced.append(_ge_owned_tensor(owner, owner.t.GetAddr(), owner.t.GetSize(),
                                             tuple(cge.gert_tensor_dims(owner.t[0])),
                                             cge.gert_tensor_dtype(owner.t[0]), stream))
        return produced

    def run_async(self, uint32_t graph_id, Stream stream, inputs, outputs=None):
        """RunGraphWithStreamAsync (ge::Tensor handles over device memory): compiles and loads the graph on this
        stream on first use, then queues one run, as execute_async does (same arguments and results)."""
        self._check()
        stream._check()
        cdef vector[cge.GeTensor] ins, outs
        cdef list in_list = list(inputs)
        cdef list out_list = [] if outputs is None else list(outputs)
        _push_ge_tensors(ins, in_list, "inputs")
        _push_ge_tensors(outs, out_list, "outputs")
        cdef cge.Status st
        cdef void* h = stream._h
        with nogil:
            st = self._s.RunGraphWithStreamAsync(graph_id, h, ins, outs)
        if st != 0:  # (the message formatted on failure only: these are per-request calls)
            _check_ge(st, f"RunGraphWithStreamAsync({graph_id}) failed")
        self._loaded.setdefault(graph_id, stream)
        stream._keep_alive((in_list, out_list))
        if out_list:
            return out_list
        cdef list produced = []
        cdef _GeTensorOwner owner
        for i in range(outs.size()):
            owner = _GeTensorOwner.__new__(_GeTensorOwner)
            owner.gt = cge.gert_take_ge_tensor(outs, i)
            produced.append(_ge_owned_tensor(owner, <void*>owner.gt.GetData(), owner.gt.GetSize(),
                                             tuple(cge.gert_ge_tensor_dims(owner.gt[0])),
                                             cge.gert_ge_tensor_dtype(owner.gt[0]), stream))
        return produced

    def run_fused(self, uint32_t graph_id, Stream stream, list uploads, list fills, list inputs, list outputs,
                  list downloads, int32_t timeout_ms=-1, list before=None, list after=None):
        """One request of a static graph, enqueued and waited for in a single call without the GIL.

        ``uploads``: [(device_ptr, device_max, host_buffer)] H2D copies of the whole host buffer;
        ``fills``: [(device_ptr, device_max, nbytes, value)] memsets; ``inputs``/``outputs``: [(device_ptr, nbytes,
        ge_dtype, shape)] the graph's tensors; ``downloads``: [(host_buffer, device_ptr)] D2H copies filling the
        whole (writable) host buffer. Then the stream is synchronized (``timeout_ms`` >= 1: with that timeout; when
        it expires the stream is aborted and ACL_ERROR_RT_STREAM_SYNC_TIMEOUT raised). Faster than separate calls:
        the stream's worker never waits for this thread's GIL. ``before``: device-side work ahead of the uploads,
        zero fills (device_ptr, device_max, nbytes) and D2D copies (dst, dst_max, src, nbytes) (a batch of sequences
        gathering its states); ``after``: D2D copies after the downloads, before the synchronize (scattered back).
        Fills run before copies.
        """
        self._check()
        stream._check()
        cdef vector[cge.gert_copy] cin, cout
        cdef vector[cge.gert_fill] cfill
        cdef cge.gert_copy c
        cdef cge.gert_fill f
        cdef cge.gert_tensor_list ins, outs
        cdef _HeldBuffer h
        cdef list held = []
        for op in before or ():
            if len(op) == 3:
                f.dst = <void*><intptr_t>op[0]
                f.dmax = op[1]
                f.n = op[2]
                f.value = 0
                cfill.push_back(f)
            else:
                c.dst = <void*><intptr_t>op[0]
                c.dmax = op[1]
                c.src = <const void*><intptr_t>op[2]
                c.n = op[3]
                c.kind = ACL_MEMCPY_DEVICE_TO_DEVICE
                cin.push_back(c)
        cdef vector[char] staged  # pieces gathered on the host (_push_pieces), alive until the call returns
        _push_uploads(cin, uploads, held, staged, "run_fused upload")
        _push_fills(cfill, fills)
        _push_graph_tensors(ins, inputs)
        _push_graph_tensors(outs, outputs)
        for obj, dptr in downloads:
            h = _acquire(obj, True, "run_fused download")
            held.append(h)
            c.dst = h.view.buf
            c.dmax = h.view.len
            c.src = <const void*><intptr_t>dptr
            c.n = h.view.len
            c.kind = ACL_MEMCPY_DEVICE_TO_HOST
            cout.push_back(c)
        for dst, dmax, src, n in after or ():
            c.dst = <void*><intptr_t>dst
            c.dmax = dmax
            c.src = <const void*><intptr_t>src
            c.n = n
            c.kind = ACL_MEMCPY_DEVICE_TO_DEVICE
            cout.push_back(c)
        cdef int kind = 0
        cdef string msg
        cdef int code
        cdef void* sh = stream._h
        with nogil:
            code = cge.gert_run_fused(self._s, graph_id, sh, cin, cfill, ins, outs, cout, timeout_ms, &kind, &msg)
        if code != 0:
            _fused_failed(code, kind, msg)

    def run_graph(self, uint32_t graph_id, inputs):
        """RunGraph: synchronous, numpy arrays in and out (compiles the graph on first use)."""
        self._check()
        global _np
        if _np is None:
            import numpy
            _np = numpy
        np = _np
        # np.require keeps 0-d arrays 0-d (np.ascontiguousarray would make them shape (1,))
        arrays = [a if type(a) is np.ndarray and a.flags.c_contiguous else np.require(a, requirements="C")
                  for a in inputs]
        cdef vector[const void*] data
        cdef vector[size_t] sizes
        cdef vector[int] dtypes
        cdef vector[vector[int64_t]] dims
        cdef vector[int64_t] d
        cdef vector[cge.GeTensor] out
        cdef _HeldBuffer h
        cdef list held = []
        for a in arrays:
            dtypes.push_back(_ge_dtype(a.dtype))  # first: it names a dtype GE has no type for
            h = _acquire(a, False, "run_graph input")
            held.append(h)
            data.push_back(h.view.buf)
            sizes.push_back(h.view.len)
            d.clear()
            for x in a.shape:
                d.push_back(x)
            dims.push_back(d)
        cdef cge.Status st
        with nogil:
            st = cge.gert_run_graph(self._s, graph_id, data, sizes, dtypes, dims, &out)
        if st != 0:  # (the message formatted on failure only: these are per-request calls)
            _check_ge(st, f"RunGraph({graph_id}) failed")
        results = []
        cdef size_t n
        for i in range(out.size()):
            shape = tuple(cge.gert_ge_tensor_dims(out[i]))
            result = np.empty(shape, _numpy_dtype(cge.gert_ge_tensor_dtype(out[i])))
            n = out[i].GetSize()
            if n:
                h = _acquire(result, True, "run_graph output")
                if <size_t>h.view.len != n:
                    raise _GeError(0xFFFFFFFF, f"RunGraph({graph_id}): output {i} holds {n} bytes, its shape "
                                   f"{shape} needs {h.view.len}")
                _c_memcpy(h.view.buf, <const void*>out[i].GetData(), n)
            results.append(result)
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
