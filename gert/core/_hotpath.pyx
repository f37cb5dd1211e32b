# cython: language_level=3, boundscheck=False, wraparound=False
# distutils: language = c++
"""The request pipeline's hot loop, compiled: a request whose (names, shapes, dtypes) signature already ran alone on
a static graph runs again in one call here, without the Python pipeline (docs/architecture.md, "The data path").

    signature -> the stream's prepared run (graph, device buffers, padding, slicing: gert._cann.FusedCall)
    -> a free stream (FreeStreams.try_take) -> its lock (HandOffLock) -> uploads, execute, downloads, synchronize
    without the GIL -> fresh output arrays -> the lock's release -> the stream given back (FreeStreams.give_back)

The queue's and the lock's operations are theirs (gert/core/_free_streams.pyx, gert/core/_locks.pyx), as are a run(list)
batch's merge and split (gert/core/_merge.pyx, gert/core/_split.pyx), cimported and called in C: the same code the
Python path runs.

Filled by the Python path: gert.core.executor.Worker offers (``add``) a request it ran that qualifies (every input a
numpy array uploaded whole, every output downloaded whole into a fresh array, a static graph that is not evicted,
no out= / timeout / device tensors / sequence copies / tracing). A request that finds no stream free waits here for
the next one, in arrival order with the Python path's requests (StreamQueue.acquire), unless dynamic batching would
queue it for company. Anything else returns None from ``run`` and takes the Python path: a signature seen first, a
request dynamic batching queues, the model closed, a device under recovery, tracing on. Invalidated by the stream's
owner (``forget``) whenever what a prepared run points at changes: the stream's buffers freed or grown, a graph evicted
or released, the stream reopened after a device fault, the worker closed.

Counters are kept in C per prepared run and added to the workers' stats by ``flush`` (Model.stats()).
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE
from cpython.dict cimport PyDict_GetItem, PyDict_Size
from cpython.pycapsule cimport PyCapsule_GetPointer
from cpython.ref cimport PyObject, Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int32_t, int64_t
from libcpp.vector cimport vector

from gert.core._clock cimport now_ns
from gert.core._core_share cimport CoreShare
from gert.core._free_streams cimport FreeStreams
from gert.core._locks cimport HandOffLock
from gert.core._merge cimport Rows, join
from gert.core._split cimport split

import numpy as np

from gert import _cann
from gert.errors import ModelClosed

ctypedef int (*fused_exec_t)(object call, const void** srcs, void** dsts, int32_t timeout_ms) except -1
ctypedef int (*fused_exec_parts_t)(object call, const void** srcs, const size_t* lens, Py_ssize_t parts, void** dsts,
                                   int32_t timeout_ms) except -1

cdef fused_exec_t _exec = <fused_exec_t>PyCapsule_GetPointer(_cann.FUSED_API, b"gert._cann.fused_exec")
cdef fused_exec_parts_t _exec_parts = <fused_exec_parts_t>PyCapsule_GetPointer(
    _cann.FUSED_PARTS_API, b"gert._cann.fused_exec_parts")
cdef object _ndarray = np.ndarray
cdef object _empty = np.empty
_KEPT = 1024  # signatures kept (cleared when full, as the validator's)
cdef enum:
    _SMALL = 8  # inputs / outputs a call holds on the C stack (more: on the heap)
    _WAITS_KEPT = 4096  # waits of lone runs a Prepared keeps between flushes (the batching stats keep as many)


cdef class Prepared:
    """One signature's run on one stream: the FusedCall over the stream's buffers, the outputs' names, shapes and
    dtypes (padding already sliced off: the downloads copy the real rows only), the gear label and element counts
    of one run (for the gear stats), and the C counters of the runs since the last flush."""
    cdef readonly object worker
    cdef HandOffLock lock  # the stream's (worker.lock)
    cdef readonly object call
    cdef readonly object use_limits  # the stream's use_in_current_thread, for workers with core limits; else None
    cdef CoreShare share  # the stream's core share by load (worker.core_share), or None
    cdef object stream, device  # the worker's stream (bound to the launching thread) and device
    cdef readonly tuple out_names, out_shapes, out_dtypes
    cdef readonly str label
    cdef readonly int64_t real_elements, padded_elements
    cdef readonly bint batched  # a lone run of a request dynamic batching would have queued (its stats)
    cdef readonly Py_ssize_t rows  # its rows (the batch axis's size; 0: none)
    cdef readonly object on_hit  # () -> None before each run (the auto policy's tiers count it), or None
    cdef readonly bint valid
    cdef readonly int64_t hits, busy_ns
    cdef readonly int64_t merged  # runs of those that were run(list) batches (not lone requests)
    cdef readonly int64_t wait_ns  # how long its batched requests waited here for a stream, summed
    cdef readonly int64_t waited  # how many of them waited (the others found a stream free)
    cdef vector[int64_t] waits  # the latest _WAITS_KEPT of those waits (ns; a ring once full), for the p99
    cdef vector[Py_ssize_t] in_bytes, out_bytes

    def __init__(self, worker, call, use_limits, tuple out_names, tuple out_shapes, tuple out_dtypes, str label,
                 int64_t real_elements, int64_t padded_elements, bint batched, on_hit=None, Py_ssize_t rows=0):
        self.worker, self.call, self.use_limits, self.on_hit = worker, call, use_limits, on_hit
        self.lock = worker.lock
        self.share = getattr(worker, "core_share", None)
        self.stream, self.device = getattr(worker, "stream", None), getattr(worker, "device", None)
        self.out_names, self.out_shapes, self.out_dtypes = out_names, out_shapes, out_dtypes
        self.label, self.real_elements, self.padded_elements = label, real_elements, padded_elements
        self.batched, self.rows = batched, rows
        self.valid = True
        for n in call.upload_sizes:
            self.in_bytes.push_back(n)
        for n in call.download_sizes:
            self.out_bytes.push_back(n)
        if self.out_bytes.size() != len(out_names):
            raise ValueError("Prepared: one download per output")

    cdef inline void keep_wait(self, int64_t ns) noexcept:
        """A lone run waited ``ns`` for its stream: summed, counted, and kept for the p99 (the latest
        _WAITS_KEPT)."""
        self.wait_ns += ns
        if self.waits.size() < _WAITS_KEPT:
            self.waits.push_back(ns)
        else:
            self.waits[self.waited % _WAITS_KEPT] = ns
        self.waited += 1


cdef class HotPath:
    """A Model's compiled hot path (one per Model). ``names``: the model's inputs in order; ``queue``: its
    StreamQueue's free streams (``StreamQueue.slots``, a FreeStreams: try_take, give_back, untake);
    ``on_error(worker, error)``: the Python handling of a failed run (device faults: gert.core.recovery), called
    holding the worker's lock, true when the request runs again on the Python path (its run aborted by a recovery);
    ``on_idle()``: wakes close() once the last request in flight here ends; ``trace``: gert.core.trace (its ``active``
    recorder turns this path off); ``count``: the runs counted in C, flushed to the stats; ``enabled``: off, every
    request takes the Python path; ``batch_limit``: rows under which dynamic batching queues a request (0: off);
    ``lists``: run(list) may merge on axis 0, and its outputs are split on their ``out_axes`` (output name -> batch
    axis, Batcher.out_axes). ``acquire(workers)``: the StreamQueue's wait for the next stream free in arrival order
    (None: a request that finds none takes the Python path); ``alone(rows)``: whether a request dynamic batching would
    queue may wait so instead, running alone (gert.core.batch_queue.BatchQueue.takes_company says no company; None:
    never)."""
    cdef tuple names
    cdef Py_ssize_t n_in
    cdef dict table  # signature -> [Prepared, one per stream it ran on]
    cdef FreeStreams queue
    cdef object on_error, on_idle, trace, count, acquire, alone
    cdef tuple last_sig  # the signature last found in the table, and its runs (reset whenever the table changes)
    cdef object last_found
    cdef public bint enabled
    cdef public Py_ssize_t batch_limit  # rows under which dynamic batching queues a request (0: off)
    cdef public bint lists  # run(list) may merge on axis 0: every input and output carries the batch there
    cdef dict out_axes  # output name -> its batch axis (Batcher.out_axes): how run_list splits
    cdef readonly bint closed
    cdef readonly int suspended
    cdef readonly Py_ssize_t in_flight
    cdef readonly int64_t hits, misses

    def __init__(self, names, queue, on_error, on_idle, trace, count, bint enabled=True, Py_ssize_t batch_limit=0,
                 bint lists=False, dict out_axes=None, acquire=None, alone=None):
        self.names = tuple(names)
        self.n_in = len(self.names)
        self.table = {}
        self.queue, self.on_error, self.on_idle, self.trace, self.count = queue, on_error, on_idle, trace, count
        self.enabled, self.batch_limit, self.lists = enabled, batch_limit, lists
        self.acquire, self.alone = acquire, alone
        self.out_axes = {} if out_axes is None else out_axes
        if lists and out_axes is None:
            raise ValueError("HotPath: lists=True needs out_axes (each output's batch axis: Batcher.out_axes)")

    # ---- the call -------------------------------------------------------------------------------------------------
    cpdef object run(self, object inputs):
        """The outputs dict of ``inputs`` (a dict of input name -> array) run on the compiled path, or None: take the
        Python path (nothing was run)."""
        if not self.enabled or self.closed or self.suspended or type(inputs) is not dict \
                or PyDict_Size(inputs) != self.n_in or self.trace.active is not None:
            return None
        cdef Py_ssize_t i, n_in = self.n_in, n_out
        cdef PyObject* item
        cdef object a
        cdef tuple arrays = PyTuple_New(n_in)  # filled below (PyTuple_SET_ITEM steals: a reference taken first)
        cdef tuple parts  # the signature: ((shape, dtype) per input)
        for i in range(n_in):
            item = PyDict_GetItem(inputs, self.names[i])
            if item == NULL:
                self.misses += 1
                return None
            a = <object>item
            if type(a) is not _ndarray:
                self.misses += 1
                return None
            Py_INCREF(a)
            PyTuple_SET_ITEM(arrays, i, a)
        cdef object found = None
        cdef tuple last = self.last_sig
        if last is not None:  # the signature of the last request, as most are: no key built, no hash
            found = self.last_found
            for i in range(n_in):
                a = arrays[i]
                sig = last[i]
                if a.dtype is not (<tuple>sig)[1] or a.shape != (<tuple>sig)[0]:
                    found = None
                    break
        if found is None:
            parts = PyTuple_New(n_in)
            for i in range(n_in):
                a = arrays[i]
                sig = (a.shape, a.dtype)
                Py_INCREF(sig)
                PyTuple_SET_ITEM(parts, i, sig)
            found = self.table.get(parts)
            if found is None:
                self.misses += 1
                return None
            self.last_sig, self.last_found = parts, found
        cdef Py_buffer small[_SMALL]
        cdef vector[Py_buffer] big
        cdef Py_buffer* views = small
        if n_in > _SMALL:
            big.resize(n_in)
            views = big.data()
        cdef Py_ssize_t held = 0
        cdef Prepared p = None
        try:
            for i in range(n_in):  # C-contiguous (else the Python path copies it)
                PyObject_GetBuffer(arrays[i], &views[held], PyBUF_C_CONTIGUOUS)
                held += 1
        except (BufferError, ValueError):
            self.misses += 1
            _release(views, held)
            return None
        try:
            p = self._take_prepared(<list>found, True)
            if p is None:
                return None
            return self._run_in_flight(p, views, n_in, 1)
        finally:
            _release(views, held)

    cpdef object run_list(self, object requests):
        """The outputs of ``requests`` (a list of dicts of input name -> array, all of one dtype and non-batch shape per
        input) merged on axis 0 as run(list) merges them (each input's arrays joined into a Rows by join, the code
        Batcher.merge runs: gert/core/_merge.pyx), run once on the compiled path and split back (each request's rows:
        views of this call's own arrays); or None: take the Python path (nothing was run)."""
        if not self.enabled or not self.lists or self.closed or self.suspended or type(requests) is not list \
                or self.trace.active is not None:
            return None
        cdef Py_ssize_t k = len(requests), i, j, n_in = self.n_in
        if k < 2:
            return None
        cdef object r, b
        cdef PyObject* item
        cdef list merged = []  # one Rows per input: the requests' arrays joined on axis 0 (Batcher.merge's join)
        cdef list rows = None  # each request's rows (of every input alike: else not a request the Python path takes)
        cdef list counts
        cdef list parts = []  # the signature: ((shape, dtype) per input), the merged batch's
        for i in range(n_in):
            name = self.names[i]
            b = []
            for j in range(k):
                r = requests[j]
                if i == 0 and (type(r) is not dict or PyDict_Size(r) != n_in):
                    return None
                item = PyDict_GetItem(<dict>r, name)
                if item == NULL:
                    return None
                (<list>b).append(<object>item)
            counts = []
            b = join(<list>b, 0, None, False, counts)  # the caller's ndarrays as they are (none of 0 rows), or None
            if b is None:
                return None
            if rows is None:
                rows = counts
            elif counts != rows:
                return None
            merged.append(b)
            parts.append(((<Rows>b).shape, (<Rows>b).dtype))
        cdef object found = self.table.get(tuple(parts))
        if found is None:
            self.misses += 1
            return None
        cdef object out = None
        cdef vector[Py_buffer] all_views
        all_views.resize(n_in * k + 1)
        cdef Py_buffer* views = all_views.data()
        cdef Py_ssize_t held = 0
        cdef Prepared p = None
        try:
            try:
                for i in range(n_in):  # input-major: views[i * k + j], the parts of each input's Rows in order
                    for b in (<Rows>merged[i]).parts:
                        PyObject_GetBuffer(b, &views[held], PyBUF_C_CONTIGUOUS)
                        held += 1
            except (BufferError, ValueError):
                self.misses += 1
                return None
            p = self._take_prepared(<list>found, False)
            if p is None:
                return None
            out = self._run_in_flight(p, views, n_in, k)
        finally:
            _release(views, held)
        if out is None:
            return None
        return split(out, rows, self.out_axes)  # Batcher.split's code (gert/core/_split.pyx)

    cdef Prepared _take_prepared(self, list found, bint lone):
        """A stream and the run of ``found`` (the signature's Prepared runs) prepared on it; or None, a miss counted.
        No stream free now: the request waits here for the next one free, in arrival order with the Python path's
        (``acquire``), unless dynamic batching would queue it for company (a lone request, ``lone``, whose rows
        ``alone`` does not clear: the Python path's batch queue takes it). The stream it gets has no prepared run of
        this signature yet: given back (untake(): the Python path runs the request and offers it)."""
        cdef object w = self.queue.try_take()
        cdef Prepared first = <Prepared>found[0]
        cdef int64_t t0 = 0
        if w is None:
            if self.acquire is None or (lone and first.batched and (self.alone is None or not self.alone(first.rows))):
                self.misses += 1
                return None
            t0 = now_ns()
            try:
                w = self.acquire(self.queue.workers)  # waits without the GIL (its wake-up)
            except ModelClosed:  # closed while it waited: the Python path says so
                self.misses += 1
                return None
            if self.closed or self.suspended:  # closed, or a device recovering: the Python path decides
                self.queue.give_back(w)
                self.misses += 1
                return None
        for cand in found:
            if (<Prepared>cand).worker is w:
                if t0 and lone and first.batched:
                    (<Prepared>cand).keep_wait(now_ns() - t0)
                return <Prepared>cand
        self.queue.untake(w)
        self.misses += 1
        return None

    cdef object _run_in_flight(self, Prepared p, Py_buffer* views, Py_ssize_t n_in, Py_ssize_t k):
        """_run_on(p) on its stream (taken by _take_prepared), counted in flight: close() waits for it (on_idle)."""
        self.in_flight += 1
        try:
            return self._run_on(p, p.worker, views, n_in, k)
        finally:
            self.in_flight -= 1
            if self.closed and self.in_flight == 0:
                self.on_idle()

    cdef object _run_on(self, Prepared p, object w, Py_buffer* views, Py_ssize_t n_in, Py_ssize_t k=1):
        """Run ``p`` on ``w`` (taken from the queue, given back here)."""
        cdef Py_ssize_t i, n_out = len(p.out_names)
        cdef const void* small_srcs[_SMALL]
        cdef void* small_dsts[_SMALL]
        cdef Py_buffer small_outv[_SMALL]
        cdef vector[const void*] big_srcs
        cdef vector[void*] big_dsts
        cdef vector[Py_buffer] big_outv
        cdef vector[size_t] lens
        cdef const void** srcs = small_srcs
        cdef void** dsts = small_dsts
        cdef Py_buffer* outv = small_outv
        if n_in * k > _SMALL:
            big_srcs.resize(n_in * k)
            srcs = big_srcs.data()
        if n_out > _SMALL:
            big_dsts.resize(n_out)
            big_outv.resize(n_out)
            dsts = big_dsts.data()
            outv = big_outv.data()
        cdef Py_ssize_t out_held = 0
        cdef list outs = None  # the outputs when more than one (one: ``first``, no list built)
        cdef object first = None
        if n_out > 1:
            outs = []
        cdef int64_t t0
        cdef bint ran = False
        try:
            p.lock.wait_acquire()
            try:
                if self.closed:
                    raise ModelClosed()
                if not p.valid:  # forgotten since the lookup (its stream's buffers or graph changed)
                    return None
                if k == 1:
                    for i in range(n_in):
                        if views[i].len != p.in_bytes[i]:
                            return None
                        srcs[i] = views[i].buf
                else:  # views[i * k + j]: input i of request j, laid one after the other
                    for i in range(n_in * k):
                        srcs[i] = views[i].buf
                        lens.push_back(views[i].len)
                for i in range(n_out):
                    a = _empty(p.out_shapes[i], p.out_dtypes[i])
                    if outs is None:
                        first = a
                    else:
                        outs.append(a)
                    PyObject_GetBuffer(a, &outv[i], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
                    out_held += 1
                    if outv[i].len != p.out_bytes[i]:
                        return None
                    dsts[i] = outv[i].buf
                if p.use_limits is not None:
                    if p.share is not None and p.share.holds(p.stream, self.queue.busy_on(p.device)):
                        p.stream.use_in_current_thread()  # the limits set for this load already: bound only
                    else:
                        p.use_limits()  # (Worker.use_limits: set, counted in the stream's stats, bound)
                if p.on_hit is not None:
                    p.on_hit()
                t0 = now_ns()
                try:
                    if k == 1:
                        _exec(p.call, srcs, dsts, -1)
                    else:
                        _exec_parts(p.call, srcs, lens.data(), k, dsts, -1)
                except Exception as e:
                    if self.on_error(w, e):  # recovery's handling (it may reopen the stream), then this request
                        return None  # runs again on the Python path (a recovery aborted its run), else fails
                    raise
                p.busy_ns += now_ns() - t0
                p.hits += 1
                if k > 1:
                    p.merged += 1
                ran = True
            finally:
                _release(outv, out_held)
                p.lock.release_fast()  # then what close() handed over while the run held the lock
        finally:
            self.queue.give_back(w)
        if not ran:
            return None
        self.hits += 1
        if outs is None:
            return {p.out_names[0]: first} if n_out == 1 else {}
        return dict(zip(p.out_names, outs))

    # ---- filling and invalidation ---------------------------------------------------------------------------------
    def offer(self, worker, tuple signature, dict sizes, call, use_limits, tuple out_names, tuple out_shapes,
              tuple out_dtypes, str label, int64_t real_elements, int64_t padded_elements, on_hit=None) -> None:
        """A request of ``signature`` (dim ``sizes``) that ``worker`` just ran alone by ``call`` (a FusedCall):
        prepared for the next ones on that stream. ``batch_limit``: a request of fewer rows would have been queued
        by dynamic batching (a lone run here is counted as its batch of one). ``on_hit``: called before each run
        (under the stream's lock), or None."""
        rows = sizes.get("batch", 0)
        self.add(signature, Prepared(worker, call, use_limits, out_names, out_shapes, out_dtypes, label,
                                     real_elements, padded_elements, 0 < rows < self.batch_limit, on_hit, rows))

    def wants(self, tuple signature, worker) -> bool:
        """Whether an offer of ``signature`` run on ``worker`` would be taken (on, and not prepared there yet)."""
        if self.closed or not self.enabled:
            return False
        found = self.table.get(signature)
        return found is None or not any((<Prepared>q).worker is worker for q in found)

    def add(self, tuple signature, Prepared prepared) -> None:
        """Remember ``prepared`` for ``signature`` on its stream (replacing that stream's earlier one)."""
        if self.closed or not self.enabled:
            return
        self.last_sig = self.last_found = None
        found = self.table.get(signature)
        if found is None:
            if len(self.table) >= _KEPT:
                self.flush()
                for old in self.table.values():
                    for q in old:
                        (<Prepared>q).valid = False
                self.table.clear()
            self.table[signature] = [prepared]
            return
        for i, q in enumerate(found):
            if (<Prepared>q).worker is prepared.worker:
                (<Prepared>q).valid = False
                self._count(<Prepared>q)
                found[i] = prepared
                return
        found.append(prepared)

    def forget(self, worker=None) -> None:
        """Drop what was prepared on ``worker`` (every stream's when None): its buffers, graphs or stream change."""
        self.last_sig = self.last_found = None
        for sig in list(self.table):
            kept = []
            for q in self.table[sig]:
                if worker is None or (<Prepared>q).worker is worker:
                    (<Prepared>q).valid = False
                    self._count(<Prepared>q)
                else:
                    kept.append(q)
            if kept:
                self.table[sig] = kept
            else:
                del self.table[sig]

    def suspend(self) -> None:
        """A device is being recovered: every request takes the Python path until resume()."""
        self.suspended += 1

    def resume(self) -> None:
        self.suspended -= 1

    def close(self) -> None:
        """The model closes: no request starts here any more; what ran is counted."""
        self.closed = True
        self.forget()

    @property
    def size(self) -> int:
        """Prepared runs kept (over all streams)."""
        return sum(len(v) for v in self.table.values())

    # ---- stats --------------------------------------------------------------------------------------------------
    def flush(self) -> None:
        """Add the runs counted in C since the last flush to the Python stats (``count``)."""
        for found in list(self.table.values()):
            for q in found:
                self._count(<Prepared>q)

    cdef _count(self, Prepared q):
        cdef int64_t hits = q.hits, busy = q.busy_ns, merged = q.merged, wait_ns = q.wait_ns, waited = q.waited
        if not hits:
            return
        waits = [w * 1e-9 for w in q.waits]
        q.hits = 0
        q.busy_ns = 0
        q.merged = 0
        q.wait_ns = 0
        q.waited = 0
        q.waits.clear()
        self.count(q, hits, hits - merged, busy * 1e-9, wait_ns * 1e-9, waited, waits)


cdef inline void _release(Py_buffer* views, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    for i in range(n):
        PyBuffer_Release(&views[i])
