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
import weakref
from dataclasses import dataclass
from typing import Callable, Optional


from gert import _cann
from gert._cann import DeviceBuffer, Graph
from gert.errors import GeError
from gert.core import empty_rows, hooks, trace as _trace
from gert.core.run_trace import traced_run
from gert.core._core_share import CoreShare
from gert.core.dynamic import RunTimes
from gert.core.error_kinds import ErrorKind, kind_of
from gert.core.recovery import watchdog
from gert.core.shapes import ShapePlan
from gert.core.request import Request
from gert.core.resolve import key_label
from gert.core.stream_graphs import GraphEntry, StreamGraphs, WorkerStats  # noqa: F401 - WorkerStats: re-exported
from gert.core.transfers import Transfers, check_device_out
from gert.core.tensor import DeviceTensor


@dataclass
class GearStats:
    """One gear's runs: how many, their input elements (real and as run, padding included), and what the padding
    cost: each run's seconds times its padded share of the elements (run time taken as proportional to the elements
    computed: an estimate, which ``padding_seconds`` of a gear that never pads leaves at 0)."""

    hits: int = 0
    real_elements: int = 0
    padded_elements: int = 0
    padding_seconds: float = 0.0

    @property
    def padding_ratio(self) -> float:
        return 0.0 if not self.padded_elements else 1.0 - self.real_elements / self.padded_elements


class GearCounts(dict):
    """A stream's GearStats per graph-key label (stats()'s gears)."""

    def add(self, label: str, runs: int, real_elements: int, padded_elements: int, seconds: float) -> None:
        """``runs`` runs of the gear ``label`` that took ``seconds`` together, each with the same elements."""
        gear = self.get(label)
        if gear is None:
            gear = self[label] = GearStats()
        gear.hits += runs
        gear.real_elements += real_elements
        gear.padded_elements += padded_elements
        if padded_elements > real_elements:
            gear.padding_seconds += seconds * (1.0 - real_elements / padded_elements)


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
        run_times: Optional[RunTimes] = None,
        busy_on: Optional[Callable[[int], int]] = None,
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
        # ``busy_on(device)``: the pool's streams in use there, given when they share its cores by load (CoreShare)
        fixed = cube_cores is not None or vector_cores is not None
        self.core_share = None if busy_on is None or fixed else CoreShare(functools.partial(busy_on, device))
        self.limited = fixed or self.core_share is not None
        self._compiled_for: Callable[[], object] = lambda: None  # weakly: the request compiled for last (not its id)
        self.trace_events: Optional[list] = None  # timing events of a traced run (gert/core/staged.py)
        self.gear_stats = GearCounts()
        self.run_times = run_times  # the model's run time per batch size (its streams' runs, graph lookup excluded)
        self.transfers = Transfers(plan, device)  # each request's uploads and downloads (gert/core/transfers.py)

    # ---- graphs -----------------------------------------------------------------------------------------
    def graph_for(self, req: Request) -> GraphEntry:
        if self.tiers is not None:
            return self.tiers.route(self, req)
        entry = self.graphs.get(req.key)
        if entry is not None:
            if entry.evictable and self._compiled_for() is not req:  # a retry (OOM) of the request is not a reuse
                self.exact.hit(req.key)
            return entry
        failed = self.failed.get(req.key)
        if failed is not None:  # the same shape failed to compile: fail fast instead of compiling again
            raise copy.copy(failed).with_traceback(None)
        try:
            self.stats.request_path_compiles += 1
            self._compiled_for = weakref.ref(req)
            return self.compile(req.key)
        except GeError as e:
            if kind_of(e) is not ErrorKind.OUT_OF_MEMORY:  # out of memory may pass later; the rest is the shape's
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
            self.use_limits()
        tr = _trace.active  # tracing (gert.trace): the same stages, each in a span (gert/core/run_trace.py)
        if tr is not None:
            return traced_run(self, req, tr)
        return self.run_stages(req, self)

    def use_limits(self) -> None:
        """Bind the launching thread to this stream's core limits, set first where the streams share their device's
        cores by load (gert/core/_core_share.pyx)."""
        if self.core_share is not None:
            changed = self.core_share.apply(self.stream, self.device_cores)
            if changed is not None:
                self.stats.cube_cores, self.stats.vector_cores = changed
        self.stream.use_in_current_thread()

    traced = False  # as a run's ``stages``: the worker's own, untimed (run_trace.TracedStages times them)
    separate_calls = False  # a static graph's request as one fused call

    def run_stages(self, req: Request, stages) -> dict:
        """The request's stages, each called on ``stages``: this worker, or its traced wrapper."""
        t0 = time.perf_counter()
        entry = stages.graph_for(req)
        looked_up = time.perf_counter()  # (a first run's compile is not a run time)
        plan = self.plan
        real_elements = padded_elements = 0
        uploads, fills, inputs = [], [], []
        for t in plan.inputs:
            arr = req.arrays[t.name]
            if type(arr) is DeviceTensor:  # device-resident: bound as the graph's input, nothing copied
                inputs.append(self.transfers.bind_device_input(t.name, arr, entry, req))
                real_elements += self.transfers.real_elements(t.name, arr, req)
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
            self.transfers.upload(arr, shape, buf, plan.pad_value[t.name], uploads, fills)
            inputs.append((buf, shape, arr.dtype, nbytes, ge_dt))
            real_elements += arr.size if req.real_batch is None else self.transfers.real_elements(t.name, arr, req)
            padded_elements += math.prod(shape)
        results = {}
        separate = entry.is_static and stages.separate_calls
        if req.before and (separate or not entry.is_static):  # else in the fused call (on the host NPU: inline)
            Transfers.enqueue(self.stream.handle, req.before)
        if entry.is_static:
            # the whole request in one call without the GIL: uploads, run, downloads, synchronize
            outputs, downloads = [], []
            for o, shape, (dtype, nbytes, ge_dt) in zip(plan.outputs, entry.output_shapes, entry.out_meta):
                target = req.device_out.get(o.name) if req.device_out else None
                if target is not None:  # written into the caller's device buffer: no D2H
                    check_device_out(o.name, target, nbytes, self.device)
                    outputs.append((target.ptr, nbytes, ge_dt, shape))
                    continue
                buf = self._buffer(self.out_bufs, o.name, nbytes)
                outputs.append((buf.ptr, nbytes, ge_dt, shape))
                host, results[o.name] = self.transfers.download(o.name, shape, dtype, req)
                if host.nbytes:
                    downloads.append((host, buf.ptr))
            if separate:  # separate calls, each timed by the stream (its waits bounded by req.timeout: staged.py)
                stages.run_separately(entry, req, uploads, fills, inputs, downloads, t0)
            else:
                stages.run_fused(entry, req, uploads, fills, inputs, outputs, downloads)
        elif req.timeout is None:  # the host NPU runs it on this thread (a timeout needs the worker to abort)
            with hooks.current().inline(self.stream.handle):
                self._run_dynamic(stages, entry, req, uploads, fills, inputs, results)
        else:
            self._run_dynamic(stages, entry, req, uploads, fills, inputs, results)
        # counted once the request succeeded, so that gear hits add up to the stream's requests
        label = _label(req.key)
        done = time.perf_counter()
        self.gear_stats.add(label, 1, real_elements, padded_elements, done - t0)
        self.stats.count(1, entry.is_static, done - t0)
        if self.run_times is not None and "batch" in req.run_sizes:
            self.run_times.add(req.run_sizes["batch"], done - looked_up)
        # a fused run the compiled hot path (gert/core/_hotpath.pyx) may replay; not one traced
        hot = self._hot_path() if entry.is_static and not stages.traced else None
        if getattr(hot, "enabled", False):  # (off, or no hot path: not even the signature is worked out, ~7 us)
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
        return results

    def run_fused(
        self, entry: GraphEntry, req: Request, uploads: list, fills: list, inputs: list, outputs: list, downloads: list
    ) -> None:
        """A static graph's request in one call without the GIL: uploads, run, downloads, synchronize; a sequence
        step's gather (before) and scatter (after, into staged buffers swapped in only once the step succeeded) in
        the same call: no hand-off to the stream's worker for them on the host NPU."""
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
        """Offer the request just run to the compiled hot path (gert/core/_hotpath.pyx) when its transfers can be
        replayed as they are (Transfers.replayable). Its runs there are counted as graph_for counts the Python
        path's (_hit_counter). Whether the hot path wants the signature is asked first: the checks and the call are
        made only for a signature not prepared on this stream yet."""
        signature = self.transfers.signature(req)
        if signature is None or not hot.wants(signature, self):  # off, or prepared on this stream already
            return
        found = self.transfers.replayable(req, uploads, inputs, downloads, results)
        if found is None:
            return
        whole, outs = found
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
            self.use_limits if self.limited else None,
            tuple(o.name for o in self.plan.outputs),
            tuple(o.shape for o in outs),
            tuple(o.dtype for o in outs),
            label,
            real_elements,
            padded_elements,
            self._hit_counter(entry, req.key),
        )

    def _hit_counter(self, entry: GraphEntry, key: tuple):
        """What a hot-path run of ``key`` counts before it runs, as graph_for counts the Python path's: the auto
        policy's tiers (Tiers.seen), or the exact sizes' eviction order (a graph used there is not evicted as cold);
        None when nothing is counted."""
        if self.tiers is not None:
            return functools.partial(self.tiers.seen, self, key)
        if entry.evictable:
            return functools.partial(self.exact.hit, key)
        return None

    def count_fast(self, label: str, runs: int, real_elements: int, padded_elements: int, seconds: float) -> None:
        """Runs of the compiled hot path on this stream, added to its stats as Worker.run counts its own."""
        self.gear_stats.add(label, runs, real_elements, padded_elements, seconds)
        self.stats.count(runs, True, seconds)

    def _run_dynamic(
        self, stages, entry: GraphEntry, req: Request, uploads: list, fills: list, inputs: list, results: dict
    ) -> None:
        """A request on a dynamic-shape graph: uploads, the run (GE sizes the outputs), downloads, synchronize, each
        a stage of ``stages`` (traced: each stamped by the host; GE waits for the run to size the outputs, so
        ``execute`` holds it)."""
        tensors = stages.copy_in(uploads, fills, inputs)
        outputs = stages.execute_async(entry, req, tensors)
        stages.copy_out(req, outputs, results)
        stages.synchronize(req)

    def copy_in(self, uploads: list, fills: list, inputs: list) -> list:
        self.transfers.copy_in(self.stream, uploads, fills)
        return [DeviceTensor(b, s, d) for b, s, d, _, _ in inputs]

    def execute_async(self, entry: GraphEntry, req: Request, tensors: list) -> list:
        with watchdog(self.stream, req.timeout):  # GE waits here until the run sized the outputs
            return self.session.execute_async(entry.graph_id, self.stream, tensors)

    def copy_out(self, req: Request, outputs: list, results: dict) -> None:
        self.transfers.copy_out(self.stream, req, outputs, results)
        if req.after:
            Transfers.enqueue(self.stream.handle, req.after)

    def synchronize(self, req: Request) -> None:
        self.stream.synchronize(req.timeout)


_LABELS: dict = {}  # graph key -> its label in stats(), for the first _LABELS_KEPT keys
_LABELS_KEPT = 1024
_FAILED_COMPILES_KEPT = 64


def _label(key: tuple) -> str:
    """The stats label of a graph key, remembered for the first _LABELS_KEPT keys (under exact / auto every size is
    a key)."""
    label = _LABELS.get(key)
    if label is None:
        label = key_label(key)
        if len(_LABELS) < _LABELS_KEPT:
            _LABELS[key] = label
    return label
