"""The Engine: a model's request pipeline, the same for every front door (docs/architecture.md).

    validate (gert.core.validate) -> resolve sizes and graph key -> batch (gert.core.batching) -> dispatch to a
    stream, run under recovery (gert.core.pool.StreamPool) -> split

Concurrent callers are batched here too (dynamic batching, gert/core/dynamic.py): a request that may share a run
queues for a stream with its batch key; the one that gets the stream takes the queued requests of its key along,
merges them (Batcher.merge), runs them once and splits the outputs back (Batcher.split).

gert.Model, gert.Sequences, gert.InferenceSession, gert.onnx_backend and gert_triton are front doors: they translate
their callers' inputs and errors and call the Engine; none holds a copy of a step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from gert.core import trace as _trace
from gert.core.batching import Batcher
from gert.core.dynamic import BatchingConfig, BatchingStats, Pending, RunTimes
from gert.core.validate import Validator
from gert.errors import GertError, RequestTimeout
from gert.core.executor import Request
from gert.core.recovery import is_runtime_failure
from gert.core.pool import StreamPool
from gert.core.shapes import DEFAULT_BATCH_GEARS, ShapePlan

_RESOLVED_KEPT = 1024  # remembered sizes -> (run sizes, graph key) (cleared when full)


@dataclass(frozen=True)
class EngineConfig:
    """How the Engine runs requests: ``split_batch`` spreads one batch over the idle streams;
    ``batching``: dynamic batching of concurrent callers (gert/core/dynamic.py; None: off)."""

    split_batch: bool = False
    batching: Optional[BatchingConfig] = None


class Engine:
    """Runs requests of one model: one request, a list, a batch, or a prepared batch of sequence steps."""

    def __init__(self, plan: ShapePlan, pool: StreamPool, config: EngineConfig = EngineConfig()):
        self.plan = plan
        self.pool = pool
        self.split_batch = bool(config.split_batch)
        dynamic_batching = config.batching
        self.validator = Validator(plan)
        self.batcher = Batcher(plan)
        batch = plan.batch
        # the batch is padded up to gears and run in chunks above the largest: only where rows can be told apart
        self._pads = batch is not None and batch.policy == "pad" and self.batcher.enabled
        self._resolved: dict = {}
        self.batching = dynamic_batching
        self.batch_limit = self._batch_limit(dynamic_batching)  # rows of a dynamic batch at most (0: off)
        self.batching_stats = BatchingStats()
        self.run_times = RunTimes()  # per batch size run: what latency_slo_ms leaves room for
        # the compiled hot path (gert/core/_hotpath.pyx): a signature seen before runs in one call, without the
        # above; off where every request needs the Python path: split_batch, dynamic batching that waits for company
        # (max_queue_delay_ms, latency_slo_ms). run(list) merges there on axis 0 where every input and output
        # carries the batch there.
        waits = dynamic_batching is not None and bool(dynamic_batching.max_queue_delay_ms
                                                      or dynamic_batching.latency_slo_ms)
        b = self.batcher
        lists = b.enabled and all(a == 0 for a in b.in_axes.values()) and all(a == 0 for a in b.out_axes.values())
        self.hot = pool.open_hot_path(self.validator.names, self._count_hot,
                                      not self.split_batch and not (waits and self.batch_limit), self.batch_limit,
                                      lists)

    def _count_hot(self, prepared, runs: int, lone: int, seconds: float) -> None:
        """The compiled hot path's runs of ``prepared``, counted in C, added to its stream's stats and, for lone
        requests the dynamic batcher would have run as batches of one, to the batching stats."""
        prepared.worker.count_fast(prepared.label, runs, runs * prepared.real_elements,
                                   runs * prepared.padded_elements, seconds)
        if prepared.batched and lone:
            self.batching_stats.record_alone(lone, prepared.label)

    def _batch_limit(self, config: Optional[BatchingConfig]) -> int:
        """Rows one dynamic batch may have: up to the largest gear (pad) or max_batch; 0 when requests of this
        model never share a run: batching off, no batch axis, outputs that do not carry the batch (plan.unsplit),
        value-dependent outputs (their size would follow the whole batch), a batch of policy exact, or with gears that
        are not padded to (each merged size would need a graph of its own)."""
        batch = self.plan.batch
        if config is None or not self.batcher.enabled or self.plan.value_dependent or batch is None:
            return 0
        if batch.policy == "pad":
            top = batch.gears[-1]
            if config.max_batch is not None:
                top = min(top, config.max_batch)
        elif batch.policy in ("dynamic", "auto") and not batch.gears:
            # any size runs (the dynamic-shape graph; with auto, hot sizes get static graphs in the background)
            top = config.max_batch or DEFAULT_BATCH_GEARS[-1]
        else:
            return 0
        if config.preferred_batch_size and config.preferred_batch_size[-1] > top:
            raise GertError(f"dynamic_batching: preferred_batch_size {list(config.preferred_batch_size)} goes "
                            f"beyond the largest batch this model runs ({top})")
        return top if top > 1 else 0

    # ---- validate and resolve ------------------------------------------------------------------------------------
    def validate(self, inputs: Mapping[str, object]) -> tuple:
        """(arrays, dim sizes) of a request; InputError naming the input, the expected and the actual value."""
        return self.validator.check(inputs)

    def check(self, inputs: Mapping[str, object]) -> None:
        """Raise GertError if run(inputs) would refuse it (the inputs, and whether its sizes have a graph)."""
        _, sizes = self.validator.check(inputs)
        if self._pads and sizes["batch"] > self.plan.batch.gears[-1]:
            sizes = dict(sizes, batch=self.plan.batch.gears[-1])  # larger batches run in chunks
        self.resolve(sizes)

    def resolve(self, sizes: dict) -> tuple:
        """(run sizes, graph key) for the real sizes; remembered per sizes (errors are not)."""
        known = self._resolved.get(tuple(sizes.items()))
        if known is not None:
            return dict(known[0]), known[1]
        dims = self.plan.dims
        run_sizes = {}
        for name, value in sizes.items():
            dim = dims[name]
            axes = ", ".join(f"{i}:{a}" for i, a in dim.axes)
            run_sizes[name] = dim.resolve(value, f"inputs ({axes})")
            if name == "batch" and run_sizes[name] != value and not self._pads:
                raise GertError(f"inputs ({axes}): a batch of {value} rows would be padded to {run_sizes[name]} or "
                                f"cut into chunks, but this model's rows cannot be padded, merged or split "
                                f"({self.batcher.why}); send a batch of one of its gears {list(dim.gears)}, or load it "
                                f"with shape_policy={{'batch': 'exact'}}")
        key = tuple(sorted((n, -1 if dims[n].policy == "dynamic" else v) for n, v in run_sizes.items()))
        if len(self._resolved) >= _RESOLVED_KEPT:
            self._resolved.clear()
        self._resolved[tuple(sizes.items())] = (dict(run_sizes), key)
        return run_sizes, key

    # ---- one request -----------------------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, object], out: Optional[Mapping] = None,
            timeout: Optional[float] = None) -> dict:
        """One request: validated, run at its graph's sizes (padding sliced off), in chunks when it is larger than
        the largest gear, spread over idle streams with split_batch."""
        tr = _trace.active  # tracing (gert.trace): the request's spans on the calling thread's track; off: this check
        if tr is not None:
            t0 = time.perf_counter()
            failed = None
        try:
            timeout = self.pool.timeout_for(timeout)
            arrays, sizes = self.validator.check(inputs)
            if tr is not None:
                tr.span("validate", tr.thread_track(), t0, time.perf_counter())
            if self._pads and sizes["batch"] > self.plan.batch.gears[-1]:
                chunk, total = self.plan.batch.gears[-1], sizes["batch"]
                return self._run_chunks(arrays, sizes, [(s, min(chunk, total - s)) for s in range(0, total, chunk)],
                                        timeout)
            parts = self._idle_parts(sizes)
            if parts > 1:  # split_batch: spread one batch over the streams that have nothing to do
                total = sizes["batch"]
                counts = [total // parts + (1 if i < total % parts else 0) for i in range(parts)]
                starts = [sum(counts[:i]) for i in range(parts)]
                return self._run_chunks(arrays, sizes, list(zip(starts, counts)), timeout)
            run_sizes, key = self.resolve(sizes)  # a size without a graph fails here, alone, before any batch
            if self.batch_limit and 0 < sizes["batch"] < self.batch_limit \
                    and all(type(a) is np.ndarray for a in arrays.values()):
                pending = Pending(arrays, sizes, sizes["batch"], self.batcher.key(arrays, (timeout,)),
                                  dict(out) if out else None, timeout, self.batch_limit)
                return self.pool.dispatch_batch(pending, self._lead, self.gather_rule)
            return self.pool.dispatch(Request(arrays, sizes, run_sizes, key, dict(out) if out else None, timeout))
        except BaseException as e:
            if tr is not None:
                failed = e
            raise
        finally:
            if tr is not None:
                if failed is None:
                    tr.span("request", tr.thread_track(), t0, time.perf_counter(), "request")
                else:
                    tr.error("request", tr.thread_track(), t0, time.perf_counter(), failed)

    # ---- dynamic batching ------------------------------------------------------------------------------------------
    def gather_rule(self, group: list) -> tuple:
        """(time.perf_counter() until which the leader of ``group`` may wait for company, enough(rows)), or
        (None, None) for no added delay: max_queue_delay_ms from the leader's arrival, latency_slo_ms minus the
        measured run time of the gear the batch would fill from the oldest member's arrival; the batch stops
        waiting once it reaches the largest preferred size (default: the largest batch)."""
        if group[0].wait_s > 0:  # sequence steps with sequence_wait_s: the window of their own
            return group[0].queued_at + group[0].wait_s, (lambda rows: rows >= group[0].limit)
        config = self.batching
        if config is None or not (config.max_queue_delay_ms or config.latency_slo_ms):
            return None, None
        target = config.preferred_batch_size[-1] if config.preferred_batch_size else self.batch_limit
        first = min(p.queued_at for p in group)
        until = []
        if config.max_queue_delay_ms:
            until.append(group[0].queued_at + config.max_queue_delay_ms / 1000.0)
        if config.latency_slo_ms:
            run = self.run_times.estimate(self.plan.batch.resolve(target, "dynamic batching"))
            until.append(first + config.latency_slo_ms / 1000.0 - run if run is not None else first)
        return min(until), (lambda rows: rows >= target)

    def queue_batch(self, pending: Pending, lead: Callable[[list, Callable[[Request], dict]], None]) -> dict:
        """``pending`` queued for a stream with its batch key (dynamic batching); the request that gets the stream
        calls ``lead(group, run)`` (sequences lead their own steps: gert/sequence.py). Its result."""
        return self.pool.dispatch_batch(pending, lead, self.gather_rule)

    def _lead(self, group: list, run: Callable[[Request], dict]) -> None:
        """Run the Pending requests of ``group`` (one batch key) as one batch on the stream ``run`` runs on, and
        deliver each its outputs or error. A device fault in a merged batch is retried request by request, so that
        only a request that fails alone fails."""
        started = time.perf_counter()
        waits = [started - p.queued_at for p in group]
        ran: list = []  # the graph key of each run: the batch's, then any retry's

        def run_members(members: list) -> list:
            rows = [p.rows for p in members]
            first = members[0]
            arrays = first.arrays if len(members) == 1 else self.batcher.merge([p.arrays for p in members])
            req = self._request(arrays, dict(first.sizes, batch=sum(rows)), first.out if len(members) == 1 else None,
                                first.timeout)
            ran.append(req.key)
            if ran[1:]:  # a retry alone: not a run time of the batch
                return [run(req)]
            out = self._timed(run, req)
            return [out] if len(members) == 1 else self.batcher.split(out, rows)

        try:
            try:
                outs = run_isolated(group, run_members)
            except Exception as e:  # noqa: BLE001 - the batch's error (not a device fault): every member's
                outs = [e] * len(group)
            for p, out in zip(group, outs):
                if isinstance(out, BaseException):
                    p.set_error(out)
                else:
                    p.set_result(out)
        except BaseException as e:  # noqa: BLE001 - nobody in the group is left waiting
            for p in group:
                if not p.done:
                    p.set_error(e)
            raise
        finally:
            if ran:  # it ran (a request whose sizes have no graph did not)
                self.batching_stats.record(len(group), _label(ran[0]), waits, len(ran) > 1)

    def _timed(self, run: Callable[[Request], dict], req: Request) -> dict:
        """run(req), its time learned per batch size run (latency_slo_ms)."""
        t0 = time.perf_counter()
        out = run(req)
        self.run_times.add(req.run_sizes["batch"], time.perf_counter() - t0)
        return out

    def _request(self, arrays: dict, sizes: dict, out: Optional[dict], timeout: Optional[float]) -> Request:
        run_sizes, key = self.resolve(sizes)
        return Request(arrays, sizes, run_sizes, key, out, timeout)

    def run_prepared(self, arrays: Mapping[str, object], run: Optional[Callable[[Request], dict]] = None,
                     **request) -> dict:
        """A batch a front door laid out itself (sequence steps: states bound as device tensors, gathered and
        scattered by ``before`` / ``after``): validated, resolved and dispatched as one run (``run``: on the stream
        a batch leader holds, else the first free one); ``request``: the other Request fields (device_out, device,
        real_batch, before, after)."""
        checked, sizes = self.validator.check(arrays)
        run_sizes, key = self.resolve(sizes)
        return (run or self.pool.dispatch)(Request(checked, sizes, run_sizes, key,
                                                   timeout=self.pool.timeout_for(None), **request))

    def _idle_parts(self, sizes: dict) -> int:
        """With split_batch: how many streams are idle (at most the batch size); 1 means run as one request."""
        if not self.split_batch or not self.batcher.enabled or self.pool.count < 2 or sizes.get("batch", 0) < 2:
            return 1
        return max(1, min(self.pool.idle(), sizes["batch"]))

    def _run_chunks(self, arrays: dict, sizes: dict, chunks: list, timeout: Optional[float]) -> dict:
        """Row ranges [(start, rows)] of one request run as separate requests (concurrently with split_batch),
        their outputs joined back on each output's batch axis. Each chunk's inputs are views (Batcher.piece): no
        copy here, one at upload where the batch is not on axis 0."""
        def one(start: int, rows: int) -> dict:
            sub = self.batcher.piece(arrays, start, rows)
            sub_sizes = dict(sizes, batch=rows)
            run_sizes, key = self.resolve(sub_sizes)
            return self.pool.dispatch(Request(sub, sub_sizes, run_sizes, key, timeout=timeout))

        if self.split_batch and len(chunks) > 1:
            futures = [self.pool.parts_pool().submit(one, *c) for c in chunks[1:]]
            parts = [one(*chunks[0])] + [f.result() for f in futures]
        else:
            parts = [one(*c) for c in chunks]
        return self.batcher.join(parts)

    # ---- many requests -----------------------------------------------------------------------------------------------
    def run_many(self, requests: Sequence[Mapping[str, object]], timeout: Optional[float] = None,
                 return_exceptions: bool = False, run_group: Optional[Callable[[list], list]] = None) -> list:
        """Requests of any shapes: grouped by batch key, each group run as one batch, split back in order. A
        request that fails validation fails alone; a group whose run faults is retried request by request
        (``run_isolated``), else its error fails its members. ``return_exceptions``: each failed request's result
        is its error (else the first error is raised). ``run_group(requests)``: how a group runs (default
        ``run_batch``; gert_triton runs non-gear sizes as gear pieces), also each request's retry alone."""
        run_group = run_group or (lambda group: self.run_batch(group, timeout=timeout))
        results: list = [None] * len(requests)
        good = []
        for i, r in enumerate(requests):
            try:
                arrays, _ = self.validator.check(r)  # each request's own error names it before anything runs
            except GertError as e:
                if not return_exceptions:
                    raise
                results[i] = e
                continue
            good.append((i, r, arrays))
        for group in self.batcher.group(good, lambda item: self.batcher.key(item[2])):
            try:
                outs = run_isolated([r for _, r, _ in group], run_group, self.batching_stats.retried)
            except Exception as e:  # noqa: BLE001 - the group's error, raised or returned below
                outs = [e] * len(group)
            if not return_exceptions:
                failed = next((o for o in outs if isinstance(o, BaseException)), None)
                if failed is not None:
                    raise failed
            for (i, _, _), out in zip(group, outs):
                results[i] = out
        return results

    def run_batch(self, requests: Sequence[Mapping[str, object]], timeout: Optional[float] = None) -> list:
        """Requests sharing their batch key, merged into one batch (the merged batch is validated, not each
        request again), run once, split back into one result per request."""
        if len(requests) == 1 or not self.batcher.enabled:
            return [self.run(r, None, timeout) for r in requests]
        names = self.validator.names
        for i, r in enumerate(requests):
            missing = [n for n in names if n not in r]
            if missing:
                raise GertError(f"request {i}: inputs {missing} are missing; the model takes {names}")
        axes = self.batcher.in_axes
        first = requests[0]

        def rest(r: Mapping[str, object], n: str) -> tuple:  # the shape of input n without its batch axis
            shape = np.shape(r[n])
            return shape[:axes[n]] + shape[axes[n] + 1:]

        if any(not np.array_equal(np.asarray(r[n]), np.asarray(first[n])) if axes[n] is None else
               rest(r, n) != rest(first, n) for r in requests[1:] for n in names):
            return self.run_many(requests, timeout)  # other non-batch shapes or unbatched values: not one batch
        out = self.run(self.batcher.merge([{n: r[n] for n in names} for r in requests]), None, timeout)
        return self.batcher.split(out, [self.batcher.rows({n: r[n] for n in names}) for r in requests])


def run_isolated(members: list, run: Callable[[list], list], on_retry: Optional[Callable[[], None]] = None) -> list:
    """``run(members)``: one result per member, run as one batch. When a batch of several fails with a device
    fault, each member runs again alone (``run([member])``) so that only a member that fails alone fails: its
    result is then its error. Any other error of the batch is raised (it is every member's). The one fault
    isolation of merged batches: dynamic batches (Engine._lead), run(list) and gert_triton (Engine.run_many),
    sequence steps (gert/sequence.py, whose failed step leaves every state as it was). ``on_retry``: called once
    when the members are retried (stats' retried_batches)."""
    try:
        return run(members)
    except Exception as e:  # noqa: BLE001 - raised unless a device fault of several members
        if len(members) < 2 or not _device_fault(e):
            raise
    if on_retry is not None:
        on_retry()
    outs: list = []
    for m in members:
        try:
            outs.append(run([m])[0])
        except Exception as e1:  # noqa: BLE001 - this member's own error
            outs.append(e1)
    return outs


def _device_fault(e: BaseException) -> bool:
    """A failure of the device or runtime while a merged batch ran (gert.recovery.is_runtime_failure), not a
    timeout: its requests are retried one by one, so that only a request that fails alone fails."""
    return is_runtime_failure(e) and not isinstance(e, RequestTimeout)


def _label(key: tuple) -> str:
    """A graph key as stats() labels it ("batch=8,seq=32", "static")."""
    return ",".join(f"{k}={v}" for k, v in key) or "static"


def write_out(result: dict, out: Mapping[str, np.ndarray]) -> dict:
    """``out=`` of Model.run: each result in the caller's array (a copy unless the download wrote it there)."""
    for name, dst in out.items():
        if name not in result:
            raise GertError(f"out names '{name}', which is not a model output; outputs: {list(result)}")
        dst = np.asarray(dst)
        src = result[name]
        if dst.shape != src.shape or dst.dtype != src.dtype:
            raise GertError(f"out['{name}'] is {dst.shape} {dst.dtype}; the result is {src.shape} {src.dtype}")
        if src is dst or (src.size and src.ctypes.data == dst.ctypes.data and src.strides == dst.strides):
            continue  # the D2H wrote straight into the caller's array
        np.copyto(dst, src)
        result[name] = dst
    return result
