# A static graph's request laid out once (FusedCall): what Session.run_fused parses from Python lists on every call
# (the graph's device tensors, the copies' device ends, the padding fills) is built at construction; a call gives
# only the host ends of the copies. The request pipeline's compiled hot path (gert/core/_hotpath.pyx) calls it through
# the C function in the capsule ``FUSED_API`` without building a Python object per call.
from cpython.pycapsule cimport PyCapsule_New
from libc.string cimport memcpy as _gather_copy


ctypedef int (*gert_fused_exec_t)(object call, const void** srcs, void** dsts, int32_t timeout_ms) except -1
ctypedef int (*gert_fused_exec_parts_t)(object call, const void** srcs, const size_t* lens, Py_ssize_t parts,
                                        void** dsts, int32_t timeout_ms) except -1


cdef class FusedCall:
    """One static graph on one stream with fixed device buffers: ``uploads`` [(device_ptr, device_max, nbytes)] H2D
    copies (their host ends given per call), ``fills`` [(device_ptr, device_max, nbytes, value)] memsets (padding),
    ``inputs`` / ``outputs`` [(device_ptr, nbytes, ge_dtype, shape)] the graph's tensors, ``downloads``
    [(device_ptr, nbytes)] D2H copies (their host ends given per call). ``keep``: objects kept alive with it (the
    device buffers). A call runs what Session.run_fused runs, in one call without the GIL."""
    cdef Session session
    cdef Stream stream
    cdef uint32_t graph_id
    cdef cge.gert_tensor_list ins, outs
    cdef vector[cge.gert_copy] cin, cout
    cdef vector[cge.gert_fill] cfill
    cdef readonly object keep

    def __init__(self, Session session, uint32_t graph_id, Stream stream, list uploads, list fills, list inputs,
                 list outputs, list downloads, keep=None):
        session._check()
        stream._check()
        self.session, self.stream, self.graph_id, self.keep = session, stream, graph_id, keep
        cdef cge.gert_copy c
        for dptr, dmax, n in uploads:
            c.dst = <void*><intptr_t>dptr
            c.dmax = dmax
            c.src = NULL
            c.n = n
            c.kind = ACL_MEMCPY_HOST_TO_DEVICE
            self.cin.push_back(c)
        _push_fills(self.cfill, fills)  # (parsed as Session.run_fused parses them: _ge.pxi)
        _push_graph_tensors(self.ins, inputs)
        _push_graph_tensors(self.outs, outputs)
        for dptr, n in downloads:
            c.dst = NULL
            c.dmax = n
            c.src = <const void*><intptr_t>dptr
            c.n = n
            c.kind = ACL_MEMCPY_DEVICE_TO_HOST
            self.cout.push_back(c)

    @property
    def upload_sizes(self) -> list:
        """Bytes each upload copies (the host buffer given for it must hold exactly that)."""
        return [self.cin[i].n for i in range(self.cin.size())]

    @property
    def download_sizes(self) -> list:
        return [self.cout[i].n for i in range(self.cout.size())]

    def __call__(self, hosts_in, hosts_out, int32_t timeout_ms=-1):
        """Run once: ``hosts_in`` one C-contiguous buffer per upload, ``hosts_out`` one writable one per download,
        each of exactly its copy's size (checked)."""
        if len(hosts_in) != <Py_ssize_t>self.cin.size() or len(hosts_out) != <Py_ssize_t>self.cout.size():
            raise ValueError(f"FusedCall: {self.cin.size()} upload(s) and {self.cout.size()} download(s), got "
                             f"{len(hosts_in)} and {len(hosts_out)}")
        cdef list held = []
        cdef vector[const void*] srcs
        cdef vector[void*] dsts
        cdef _HeldBuffer h
        cdef size_t i = 0
        for obj in hosts_in:
            h = _acquire(obj, False, "FusedCall upload")
            held.append(h)
            if <size_t>h.view.len != self.cin[i].n:
                raise ValueError(f"FusedCall: upload {i} holds {h.view.len} bytes, the copy is {self.cin[i].n}")
            srcs.push_back(h.view.buf)
            i += 1
        i = 0
        for obj in hosts_out:
            h = _acquire(obj, True, "FusedCall download")
            held.append(h)
            if <size_t>h.view.len != self.cout[i].n:
                raise ValueError(f"FusedCall: download {i} holds {h.view.len} bytes, the copy is {self.cout[i].n}")
            dsts.push_back(h.view.buf)
            i += 1
        _fused_exec(self, srcs.data(), dsts.data(), timeout_ms)


cdef int _fused_exec(object obj, const void** srcs, void** dsts, int32_t timeout_ms) except -1:
    """Run ``obj`` (a FusedCall) with these host ends of its copies (``srcs``: one per upload, ``dsts``: one per
    download, each of its copy's size: the caller checked); AclError / GeError as Session.run_fused raises."""
    cdef FusedCall call = <FusedCall?>obj
    call.session._check()
    call.stream._check()  # also binds the device's context to this thread
    cdef size_t i
    for i in range(call.cin.size()):
        call.cin[i].src = srcs[i]
    for i in range(call.cout.size()):
        call.cout[i].dst = dsts[i]
    cdef int kind = 0
    cdef string msg
    cdef int code
    cdef void* sh = call.stream._h
    cdef cge.Session* s = call.session._s
    with nogil:
        code = cge.gert_run_fused(s, call.graph_id, sh, call.cin, call.cfill, call.ins, call.outs, call.cout,
                                  timeout_ms, &kind, &msg)
    if code != 0:
        _fused_failed(code, kind, msg)
    return 0


# An upload of at most this many bytes made of pieces (a merged batch) is gathered on the host first and copied once:
# a copy costs more than its bytes when they are few (the host NPU validates and runs each as a stream task, ~150 ns;
# a device copy from pageable memory synchronizes the stream each time). Larger ones are copied piece by piece (no
# second pass over their bytes with the GIL held).
cdef size_t _GATHER_MAX = 65536


cdef inline size_t _gathered_bytes(size_t n) noexcept nogil:
    """Host bytes an upload of ``n`` bytes made of pieces is gathered into first (0: copied piece by piece)."""
    return n if n <= _GATHER_MAX else 0


cdef inline int _push_pieces(vector[cge.gert_copy]& out, const cge.gert_copy& whole, const void** srcs,
                             const size_t* lens, Py_ssize_t n, char** staged) except -1:
    """The H2D copies of ``whole`` (its device end and size) made of ``n`` host pieces laid one after the other
    (``srcs[j]`` of ``lens[j]`` bytes; a merged batch's requests in order): checked to add up to ``whole.n``; gathered
    into ``staged[0]`` (advanced past them) and copied once when _gathered_bytes says so and ``staged`` is given, else
    one copy per non-empty piece at its offset. The one place a batch's pieces are placed in device memory: the
    Python path's uploads (Session.run_fused, memcpy_uploads_async) and the hot path's (FusedCall's parts)."""
    cdef size_t j, offset = 0
    for j in range(<size_t>n):
        if lens[j] > whole.n - offset:
            raise ValueError(f"the pieces of an upload hold more than its {whole.n} bytes")
        offset += lens[j]
    if offset != whole.n:
        raise ValueError(f"the pieces of an upload hold {offset} bytes, the copy is {whole.n}")
    cdef cge.gert_copy c = whole
    if staged != NULL and _gathered_bytes(whole.n):
        c.src = staged[0]
        for j in range(<size_t>n):
            if lens[j]:
                _gather_copy(staged[0], srcs[j], lens[j])
                staged[0] += lens[j]
        out.push_back(c)
        return 0
    offset = 0
    for j in range(<size_t>n):
        if not lens[j]:
            continue
        c.dst = <char*>whole.dst + offset
        c.dmax = whole.dmax - offset if offset <= whole.dmax else 0  # (past its end: refused by the runtime)
        c.src = srcs[j]
        c.n = lens[j]
        offset += lens[j]
        out.push_back(c)
    return 0


def memcpy_uploads_async(list uploads, intptr_t stream):
    """Queue the H2D copies of ``uploads`` ([(device_ptr, device_max, host buffer or list of host buffers laid one
    after the other)], as Session.run_fused takes them) on ``stream``, one aclrtMemcpyAsync per buffer (none
    gathered: the caller keeps the host buffers alive until the stream ran the copies)."""
    cdef vector[cge.gert_copy] copies
    cdef vector[char] staged
    cdef list held = []
    _push_uploads(copies, uploads, held, staged, "memcpy_uploads_async", False)
    cdef size_t i
    for i in range(copies.size()):
        if copies[i].n:
            memcpy_async(<intptr_t>copies[i].dst, copies[i].dmax, <intptr_t>copies[i].src, copies[i].n,
                         ACL_MEMCPY_HOST_TO_DEVICE, stream)


cdef int _fused_exec_parts(object obj, const void** srcs, const size_t* lens, Py_ssize_t parts, void** dsts,
                           int32_t timeout_ms) except -1:
    """As _fused_exec, each upload made of ``parts`` host pieces laid one after the other (a batch merged from
    requests: ``srcs[i * parts + j]`` of ``lens[i * parts + j]`` bytes is input i's piece j; _push_pieces places
    them)."""
    cdef FusedCall call = <FusedCall?>obj
    call.session._check()
    call.stream._check()
    cdef vector[cge.gert_copy] cin
    cdef size_t i, gathered = 0
    for i in range(call.cin.size()):
        gathered += _gathered_bytes(call.cin[i].n)
    cdef vector[char] staged  # the gathered uploads, one after the other (alive until the run synchronized)
    staged.resize(gathered + 1)
    cdef char* at = staged.data()
    for i in range(call.cin.size()):
        _push_pieces(cin, call.cin[i], srcs + i * <size_t>parts, lens + i * <size_t>parts, parts, &at)
    for i in range(call.cout.size()):
        call.cout[i].dst = dsts[i]
    cdef int kind = 0
    cdef string msg
    cdef int code
    cdef void* sh = call.stream._h
    cdef cge.Session* s = call.session._s
    with nogil:
        code = cge.gert_run_fused(s, call.graph_id, sh, cin, call.cfill, call.ins, call.outs, call.cout,
                                  timeout_ms, &kind, &msg)
    if code != 0:
        _fused_failed(code, kind, msg)
    return 0


FUSED_PARTS_API = PyCapsule_New(<void*>_fused_exec_parts, b"gert._cann.fused_exec_parts", NULL)
# the hot path's entry: int (*)(object call, const void** srcs, void** dsts, int32_t timeout_ms) except -1
FUSED_API = PyCapsule_New(<void*>_fused_exec, b"gert._cann.fused_exec", NULL)
