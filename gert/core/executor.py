"""The multi-stream executor: one worker per stream, each with its own GE Session, graphs per shape and device
I/O buffers, so that requests on different streams run concurrently.

A worker runs one request at a time: H2D of each input straight from the caller's array into the worker's device
buffer (padding written on the device, or staged only when a non-batch axis is padded), one
ExecuteGraphWithStreamAsync, one D2H per output straight into the result array, then a synchronize that waits
without the GIL. GE serializes launches inside one Session, hence one Session per stream.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from gert import _cann
from gert._cann import DeviceBuffer, Graph
from gert.errors import GeError, GertError
from gert.core import empty_rows, hooks, trace as _trace
from gert.core.staged import run_staged
from gert.core.recovery import watchdog
from gert.core.rows import Rows
from gert.core.shapes import ShapePlan
from gert.core.stream_graphs import GraphEntry, StreamGraphs, WorkerStats  # noqa: F401 - WorkerStats: re-exported
from gert.core.tensor import DeviceTensor


@dataclass
class GearStats:
    hits: int = 0
    real_elements: int = 0
    padded_elements: int = 0

    @property
    def padding_ratio(self) -> float:
        return 0.0 if not self.padded_elements else 1.0 - self.real_elements / self.padded_elements


@dataclass
class Request:
    """One request after validation: arrays by input name and the real size of each dynamic dim."""

    arrays: dict
    sizes: dict  # dim name -> real size
    run_sizes: dict  # dim name -> size the graph runs at (gear, or real)
    key: tuple = field(default=())
    out: Optional[dict] = None  # output name -> the caller's out= array, written by D2H directly when it fits
    timeout: Optional[float] = None  # seconds the request may take on its stream (None: no limit)
    # output name -> DeviceBuffer the output is written into on the device (no D2H; absent from the results).
    # Inputs given as a gert.DeviceTensor are bound as they are (no H2D): together, a recurrent state stays on the
    # device from one step to the next (gert.sequence)
    device_out: Optional[dict] = None
    device: Optional[int] = None  # run on a stream of this device (where the request's device tensors live)
    real_batch: Optional[int] = None  # rows that are real when the caller padded the batch itself (gear stats)
    # device-side work queued on the request's stream: before the run (D2D copies (dst, dmax, src, n) and zero fills
    # (ptr, dmax, n): a batch of sequences gathers its states), and after a successful run (D2D copies: scattered
    # back). On the stream, so ordered with the run without the calling thread needing the device's context.
    before: Optional[list] = None
    after: Optional[list] = None


class Worker(StreamGraphs):
    """One stream on one device running requests, one at a time (the caller holds ``lock``), on the graphs of its
    table (gert.core.stream_graphs.StreamGraphs: the stream, Session, graphs, buffers and their life)."""

    def __init__(
        self,
        index: int,
        device: int,
        graph: Graph,
        plan: ShapePlan,
        session_options: dict,
        graph_options: dict,
        cube_cores: Optional[int],
        vector_cores: Optional[int],
        max_exact_graphs: int,
        cache=None,
        tiers=None,
        hot: Optional[Callable[[], object]] = None,
    ):
        super().__init__(
            index,
            device,
            graph,
            plan,
            session_options,
            graph_options,
            cube_cores,
            vector_cores,
            max_exact_graphs,
            cache,
            tiers,
            hot,
        )
        self.limited = cube_cores is not None or vector_cores is not None
        self._compiled_for = 0  # id() of the request whose graph the request path compiled last
        self.trace_events: Optional[list] = None  # timing events of a traced run (gert/core/staged.py)
        self.gear_stats: dict = {}

    # ---- graphs -----------------------------------------------------------------------------------------
    def graph_for(self, req: Request) -> GraphEntry:
        if self.tiers is not None:
            return self.tiers.route(self, req)
        entry = self.graphs.get(req.key)
        if entry is not None:
            if entry.evictable and id(req) != self._compiled_for:  # a retry (OOM) of the request is not a reuse
                self.exact.hit(req.key)
            return entry
        failed = self.failed.get(req.key)
        if failed is not None:  # the same shape failed to compile: fail fast instead of compiling again
            raise copy.copy(failed).with_traceback(None)
        try:
            self.stats.request_path_compiles += 1
            self._compiled_for = id(req)
            return self.compile(req.key)
        except GeError as e:
            if e.code != _GE_MEMORY_ALLOCATION:  # out of device memory may pass later; the rest is the shape's
                self.stats.failed_compiles += 1
                self.failed[req.key] = e
                while len(self.failed) > _FAILED_COMPILES_KEPT:
                    self.failed.popitem(last=False)
            raise

    # ---- buffers ------------------------------------------------------------------------------------------
    def _buffer(self, pool: dict, name: str, nbytes: int) -> DeviceBuffer:
        buf = pool.get(name)
        if buf is None or buf.nbytes < nbytes:
            if buf is not None:
                self.forget_prepared()  # the hot path's runs over the old buffer
                buf.free()  # no work is queued: the previous request was synchronized
            buf = DeviceBuffer(max(nbytes, 1), self.device)
            pool[name] = buf
        return buf

    # ---- one request --------------------------------------------------------------------------------------
    def run(self, req: Request) -> dict:
        """Run one request (the caller holds self.lock)."""
        if 0 in req.sizes.values():  # no graph runs on an empty tensor: answered from the plan, or refused
            answered = empty_rows.answer(self.plan, req)
            if answered is not None:
                return answered
        if self.limited:
            # aclrtUseStreamResInCurrentThread on every launch (~40 ns): a thread that also launches on other
            # streams (another Model's, with other limits) must be bound to this stream's limits again
            self.stream.use_in_current_thread()
        tr = _trace.active  # tracing (gert.trace): this run's stages on the stream's track; off: this check
        t0 = time.perf_counter()
        if tr is not None:
            compiles = self.stats.request_path_compiles
        entry = self.graph_for(req)
        if tr is not None:
            track = tr.stream_track(self)
            tr.flow(tr.thread_track(), t0, track, t0)
            tr.span(
                "graph",
                track,
                t0,
                time.perf_counter(),
                args={
                    "graph": "static" if entry.is_static else "dynamic",
                    "key": _key_label(req.key),
                    "compiled": self.stats.request_path_compiles > compiles,
                },
            )
        plan = self.plan
        real_elements = padded_elements = 0
        uploads, fills, inputs = [], [], []
        for t in plan.inputs:
            arr = req.arrays[t.name]
            if type(arr) is DeviceTensor:  # device-resident: bound as the graph's input, nothing copied
                inputs.append(self._bind_device_input(t.name, arr, entry, req))
                real_elements += self._real_elements(t.name, arr, req)
                padded_elements += arr.size
                continue
            if entry.is_static:
                shape, nbytes, ge_dt = entry.in_meta[t.name]
            else:
                shape = tuple(
                    req.run_sizes[plan.input_axes[(t.name, a)]] if (t.name, a) in plan.input_axes else d
                    for a, d in enumerate(t.shape)
                )
                nbytes, ge_dt = math.prod(shape) * arr.dtype.itemsize, None
            buf = self._buffer(self.in_bufs, t.name, nbytes)
            self._plan_upload(arr, shape, buf, plan.pad_value[t.name], uploads, fills)
            inputs.append((buf, shape, arr.dtype, nbytes, ge_dt))
            real_elements += arr.size if req.real_batch is None else self._real_elements(t.name, arr, req)
            padded_elements += math.prod(shape)
        results = {}
        fused = False  # ran by the fused call: the compiled hot path may run its signature again (_offer)
        staged = entry.is_static and tr is not None and tr.stages
        if req.before and (staged or not entry.is_static):  # else in the fused call (on the host NPU: inline)
            self.enqueue(req.before)
        if entry.is_static:
            # the whole request in one call without the GIL: uploads, run, downloads, synchronize
            outputs, downloads = [], []
            for o, shape, (dtype, nbytes, ge_dt) in zip(plan.outputs, entry.output_shapes, entry.out_meta):
                target = req.device_out.get(o.name) if req.device_out else None
                if target is not None:  # written into the caller's device buffer: no D2H
                    _check_device_out(o.name, target, nbytes, self.device)
                    outputs.append((target.ptr, nbytes, ge_dt, shape))
                    continue
                buf = self._buffer(self.out_bufs, o.name, nbytes)
                outputs.append((buf.ptr, nbytes, ge_dt, shape))
                host, results[o.name] = self._plan_download(o.name, shape, dtype, req)
                if host.nbytes:
                    downloads.append((host, buf.ptr))
            if staged:  # separate calls, each timed by the stream (its waits bounded by req.timeout: staged.py)
                tr.span("prepare", track, t0, time.perf_counter())
                run_staged(self, tr, track, entry, req, uploads, fills, inputs, downloads)
            else:
                if tr is not None:
                    t1 = time.perf_counter()
                # a sequence step's gather (before) and scatter (after, into staged buffers swapped in only once the
                # step succeeded) in the same call: no hand-off to the stream's worker for them on the host NPU
                self.session.run_fused(
                    entry.graph_id,
                    self.stream,
                    uploads,
                    fills,
                    [(b.ptr, n, g, s) for b, s, _, n, g in inputs],
                    outputs,
                    downloads,
                    -1 if req.timeout is None else max(1, round(req.timeout * 1000)),
                    req.before,
                    req.after,
                )
                fused = tr is None
                if tr is not None:
                    tr.span(
                        "execute",
                        track,
                        t1,
                        time.perf_counter(),
                        args={"clock": "host", "fused": "h2d, execute, d2h, synchronize in one call"},
                    )
        else:
            if req.timeout is None:  # the host NPU runs it on this thread (a timeout needs the worker to abort)
                with hooks.current().inline(self.stream.handle):
                    self._run_dynamic(entry, req, uploads, fills, inputs, results, tr)
            else:
                self._run_dynamic(entry, req, uploads, fills, inputs, results, tr)
        # counted once the request succeeded, so that gear hits add up to the stream's requests
        label = _LABELS.get(req.key)
        if label is None:
            label = _key_label(req.key)
            if len(_LABELS) < _LABELS_KEPT:  # bounded: under exact / auto every size is a key
                _LABELS[req.key] = label
        gear = self.gear_stats.setdefault(label, GearStats())
        gear.hits += 1
        gear.real_elements += real_elements
        gear.padded_elements += padded_elements
        self.stats.requests += 1
        if entry.is_static:
            self.stats.static_hits += 1
        else:
            self.stats.dynamic_hits += 1
        self.stats.busy_seconds += time.perf_counter() - t0
        hot = self._hot_path() if fused else None
        if hot is not None:
            self._offer(
                hot,
                req,
                entry,
                uploads,
                fills,
                inputs,
                outputs,
                downloads,
                results,
                label,
                real_elements,
                padded_elements,
            )
        if tr is not None:
            tr.span(
                "run",
                track,
                t0,
                time.perf_counter(),
                "run",
                {"rows": req.sizes.get("batch"), "key": label, "graph": "static" if entry.is_static else "dynamic"},
            )
        return results

    def _offer(
        self,
        hot,
        req: Request,
        entry: GraphEntry,
        uploads: list,
        fills: list,
        inputs: list,
        outputs: list,
        downloads: list,
        results: dict,
        label: str,
        real_elements: int,
        padded_elements: int,
    ) -> None:
        """Offer the request just run to the compiled hot path (gert/core/_hotpath.pyx), when running its signature
        again is this same fused call with only the host arrays changed: numpy inputs each uploaded whole (no staged
        padding), every output downloaded whole into a fresh array (no slice of a padded one), a graph that is not
        evicted, nothing of the request's own (out=, timeout, device tensors, sequence copies). Under the auto policy's
        tiers a static graph's runs there are counted by the tiers as route() counts the Python path's (Tiers.seen)."""
        if (
            req.out
            or req.device_out
            or req.before
            or req.after
            or req.real_batch is not None
            or req.timeout is not None
            or entry.evictable
            or len(downloads) != len(self.plan.outputs)
        ):
            return
        arrays = [req.arrays[t.name] for t in self.plan.inputs]
        signature = tuple((a.shape, a.dtype) for a in arrays)
        if not hot.wants(signature, self):  # off, or prepared on this stream already
            return
        if all(type(a) is Rows and a.axis == 0 for a in arrays):  # a merged batch (run(list)): parts in a row
            if any(a.shape[1:] != tuple(i[1][1:]) for a, i in zip(arrays, inputs)) or len(uploads) != sum(
                1 for a in arrays for part in a.parts if part.nbytes
            ):
                return
            whole = [(b.ptr, b.nbytes, a.nbytes) for a, (b, _, _, _, _) in zip(arrays, inputs)]
        elif len(uploads) == len(arrays) and all(type(a) is np.ndarray and u[2] is a for a, u in zip(arrays, uploads)):
            whole = [(dptr, dmax, host.nbytes) for dptr, dmax, host in uploads]
        else:
            return
        outs = [results[o.name] for o in self.plan.outputs]
        if any(host is not out for (host, _), out in zip(downloads, outs)):
            return
        call = _cann.FusedCall(
            self.session,
            entry.graph_id,
            self.stream,
            whole,
            fills,
            [(b.ptr, n, g, s) for b, s, _, n, g in inputs],
            outputs,
            [(dptr, host.nbytes) for host, dptr in downloads],
        )
        hot.offer(
            self,
            signature,
            req.sizes,
            call,
            self.stream.use_in_current_thread if self.limited else None,
            tuple(o.name for o in self.plan.outputs),
            tuple(o.shape for o in outs),
            tuple(o.dtype for o in outs),
            label,
            real_elements,
            padded_elements,
            None if self.tiers is None else functools.partial(self.tiers.seen, self, req.key),
        )

    def count_fast(self, label: str, runs: int, real_elements: int, padded_elements: int, seconds: float) -> None:
        """Runs of the compiled hot path on this stream, added to its stats as Worker.run counts its own."""
        gear = self.gear_stats.setdefault(label, GearStats())
        gear.hits += runs
        gear.real_elements += real_elements
        gear.padded_elements += padded_elements
        self.stats.requests += runs
        self.stats.static_hits += runs
        self.stats.busy_seconds += seconds

    def _run_dynamic(
        self,
        entry: GraphEntry,
        req: Request,
        uploads: list,
        fills: list,
        inputs: list,
        results: dict,
        tr: Optional[_trace.Recorder] = None,
    ) -> None:
        """A request on a dynamic-shape graph: uploads, the run (GE sizes the outputs), downloads, synchronize.
        Traced: each stage stamped by the host (GE waits for the run to size the outputs, so ``execute`` holds it)."""
        plan = self.plan
        stream = self.stream
        stamps = [time.perf_counter()] if tr is not None else None
        for dptr, dmax, host in uploads:
            if host.nbytes:
                _cann.memcpy_async(
                    dptr, dmax, host.ctypes.data, host.nbytes, _cann.MEMCPY_HOST_TO_DEVICE, stream.handle
                )
        for dptr, dmax, n, value in fills:
            _cann.memset_async(dptr, dmax, value, n, stream.handle)
        stream.keep_alive(uploads)
        tensors = [DeviceTensor(b, s, d) for b, s, d, _, _ in inputs]
        if stamps is not None:
            stamps.append(time.perf_counter())
        with watchdog(stream, req.timeout):  # GE waits here until the run sized the outputs
            outputs = self.session.execute_async(entry.graph_id, stream, tensors)
        if stamps is not None:
            stamps.append(time.perf_counter())
        for o, dev in zip(plan.outputs, outputs):
            target = req.device_out.get(o.name) if req.device_out else None
            if target is not None:  # GE allocated it: one D2D copy into the caller's device buffer
                n = math.prod(dev.shape) * np.dtype(dev.dtype).itemsize
                _check_device_out(o.name, target, n, self.device)
                if n:
                    _cann.memcpy_async(
                        target.ptr, target.nbytes, dev.buffer.ptr, n, _cann.MEMCPY_DEVICE_TO_DEVICE, stream.handle
                    )
                continue
            host, results[o.name] = self._plan_download(o.name, dev.shape, dev.dtype, req)
            if host.nbytes:
                dev.buffer.copy_to(host, stream)
        if req.after:
            self.enqueue(req.after)
        if stamps is not None:
            stamps.append(time.perf_counter())
        stream.synchronize(req.timeout)
        if stamps is not None:
            stamps.append(time.perf_counter())
            track = tr.stream_track(self)
            for name, start, end in zip(("h2d", "execute", "d2h"), stamps, stamps[1:]):
                tr.span(name, track, start, end, args={"clock": "host"})
            tr.span("synchronize", tr.thread_track(), stamps[3], stamps[4])

    def enqueue(self, ops: list) -> None:
        """Queue device-side copies (dst, dmax, src, n) and zero fills (ptr, dmax, n) on this stream."""
        handle = self.stream.handle
        for op in ops:
            if len(op) == 3:
                _cann.memset_async(op[0], op[1], 0, op[2], handle)
            else:
                _cann.memcpy_async(op[0], op[1], op[2], op[3], _cann.MEMCPY_DEVICE_TO_DEVICE, handle)

    def _real_elements(self, name: str, arr, req: Request) -> int:
        """Elements of ``arr`` that are not padding the caller added on the batch axis (req.real_batch rows)."""
        if req.real_batch is None or self.plan.batch_axis(name) is None:
            return arr.size
        return arr.size * req.real_batch // max(1, req.run_sizes.get("batch", req.real_batch))

    def _bind_device_input(self, name: str, arr: DeviceTensor, entry: GraphEntry, req: Request) -> tuple:
        """(buffer, shape, dtype, nbytes, GE dtype) of a device-resident input: it must already have the shape the
        graph runs at (no padding on the device) and live on this stream's device."""
        if arr.buffer.device_id != self.device:
            raise GertError(
                f"input '{name}' lives on device {arr.buffer.device_id}; this stream is on device {self.device}"
            )
        if entry.is_static:
            shape = entry.in_meta[name][0]
        else:
            t = next(t for t in self.plan.inputs if t.name == name)
            shape = tuple(
                req.run_sizes[self.plan.input_axes[(name, a)]] if (name, a) in self.plan.input_axes else d
                for a, d in enumerate(t.shape)
            )
        if tuple(shape) != arr.shape:
            raise GertError(
                f"input '{name}': a device tensor is bound as it is, so it must have the shape the graph "
                f"runs at {tuple(shape)}; got {arr.shape}"
            )
        return arr.buffer, arr.shape, arr.dtype, arr.nbytes, arr.ge_dtype

    @staticmethod
    def _plan_upload(arr, shape: tuple, buf: DeviceBuffer, pad_value, uploads: list, fills: list) -> None:
        """The H2D copies (and memsets) that lay ``arr`` out in ``buf`` as ``shape`` (>= arr.shape on every axis).
        A Rows (a batch kept in parts) on axis 0 is copied part by part into its place: no host concatenation. A batch
        on another axis (a Rows, or a strided view) is laid out once in a host array of ``shape`` (padding included):
        only C-contiguous memory is uploaded."""
        strided = type(arr) is np.ndarray and not arr.flags.c_contiguous or type(arr) is Rows and arr.axis != 0
        if not strided and arr.shape[1:] == shape[1:] and len(shape) > 0:  # real rows, then pad rows (if padded)
            if isinstance(arr, Rows):
                offset = 0
                for part in arr.parts:
                    if part.nbytes:
                        uploads.append((buf.ptr + offset, buf.nbytes - offset, part))
                        offset += part.nbytes
            else:
                uploads.append((buf.ptr, buf.nbytes, arr))
            pad_bytes = (shape[0] - arr.shape[0]) * math.prod(shape[1:]) * arr.dtype.itemsize
            if pad_bytes:
                if pad_value == 0:
                    fills.append((buf.ptr + arr.nbytes, buf.nbytes - arr.nbytes, pad_bytes, 0))
                else:
                    pad = np.full((shape[0] - arr.shape[0],) + shape[1:], pad_value, arr.dtype)
                    uploads.append((buf.ptr + arr.nbytes, buf.nbytes - arr.nbytes, pad))
            return
        if not strided and arr.shape == shape:  # 0-d
            uploads.append((buf.ptr, buf.nbytes, arr))
            return
        # a padded non-batch axis or batch on another axis: staged on the host in one copy
        staged = np.empty(shape, arr.dtype) if arr.shape == tuple(shape) else np.full(shape, pad_value, arr.dtype)
        if type(arr) is Rows:
            arr.write_to(staged)
        else:
            staged[tuple(slice(0, s) for s in arr.shape)] = arr
        uploads.append((buf.ptr, buf.nbytes, staged))

    def _plan_download(self, name: str, shape: tuple, dtype: np.dtype, req: Request) -> tuple:
        """(host array the D2H copy fills, the result): the output sliced back to the request's real sizes where the
        graph ran padded. Leading rows are contiguous, so a batch slice copies only them (into ``out=`` if given)."""
        plan = self.plan
        real = list(shape)
        for axis in range(len(real)):
            dim = plan.output_axes.get((name, axis))
            if dim is not None and plan.dims[dim].policy == "pad" and req.run_sizes[dim] == shape[axis]:
                real[axis] = req.sizes[dim]
        real = tuple(real)
        if real == tuple(shape) or real[1:] == tuple(shape[1:]):
            out = _out_array(req.out.get(name) if req.out else None, real, dtype)
            if out is None:
                out = np.empty(real, dtype)
            return out, out
        full = np.empty(shape, dtype)
        return full, full[tuple(slice(0, s) for s in real)]


def _check_device_out(name: str, target: DeviceBuffer, nbytes: int, device: int) -> None:
    if target.device_id != device:
        raise GertError(f"output '{name}': its device buffer is on device {target.device_id}, the stream on {device}")
    if target.nbytes < nbytes:
        raise GertError(f"output '{name}' needs {nbytes} bytes; its device buffer holds {target.nbytes}")


def _out_array(dst, shape: tuple, dtype) -> Optional[np.ndarray]:
    """The caller's out= array (or buffer) as an ndarray, if the D2H can write straight into it."""
    if dst is None:
        return None
    a = dst if isinstance(dst, np.ndarray) else np.asarray(dst)
    if a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable:
        return a
    return None


_LABELS: dict = {}  # graph key -> its label in stats(), for the first _LABELS_KEPT keys
_LABELS_KEPT = 1024
_FAILED_COMPILES_KEPT = 64
_GE_MEMORY_ALLOCATION = 245000  # ACL_ERROR_GE_MEMORY_ALLOCATION


def _key_label(key: tuple) -> str:
    return ",".join(f"{k}={v}" for k, v in key) or "static"
