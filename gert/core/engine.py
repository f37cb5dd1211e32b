"""The Engine: a model's request pipeline, the same for every front door (docs/architecture.md).

    validate (gert.core.validate) -> resolve sizes and graph key -> batch (gert.core.batching) -> dispatch to a
    stream, run under recovery (gert.core.pool.StreamPool) -> split

Concurrent callers are batched here too (dynamic batching): a request that may share a run queues in the model's
BatchQueue (gert/core/batch_queue.py) with its batch key; the one that gets a stream takes the queued requests of its
key along, and the Engine merges them (Batcher.merge), runs them once and splits the outputs back (Batcher.split).

gert.Model, gert.Sequences, gert.InferenceSession, gert.onnx_backend and gert_triton are front doors: they translate
their callers' inputs and errors and call the Engine; none holds a copy of a step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from gert.core import trace as _trace
from gert.core.batching import Batcher
from gert.core.batch_queue import BatchQueue, run_isolated
from gert.core.dynamic import BatchingConfig, Pending
from gert.core.gear_pieces import run_cheapest
from gert.core.validate import Validator
from gert.errors import GertError
from gert.core.executor import Request
from gert.core.pool import StreamPool
from gert.core.resolve import Resolver
from gert.core.shapes import ShapePlan
from gert.core.split_choice import SplitChoice, batch_shape, even_rows


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
        # real sizes -> (run sizes, graph key) (gert/core/resolve.py)
        self.resolve = Resolver(plan, self._pads, self.batcher.why).resolve
        # concurrent callers batched (gert/core/batch_queue.py): its row limit (0: off) and stats
        self.batches = BatchQueue(pool, plan, self.batcher, dynamic_batching, self.resolve)
        self.batch_limit = self.batches.limit
        self.batching_stats = self.batches.stats
        # the compiled hot path (gert/core/_hotpath.pyx): a signature seen before runs in one call, without the
        # above; off where every request needs the Python path: dynamic batching that waits for company
        # (max_queue_delay_ms, latency_slo_ms). run(list) merges there on axis 0 where every input and output
        # carries the batch there. With split_batch a front door's request is not run there directly (``direct``:
        # it may be spread over the idle streams first); the parts it is spread into are.
        waits = dynamic_batching is not None and bool(
            dynamic_batching.max_queue_delay_ms or dynamic_batching.latency_slo_ms
        )
        b = self.batcher
        lists = b.enabled and all(a == 0 for a in b.in_axes.values()) and all(a == 0 for a in b.out_axes.values())
        self.hot = pool.open_hot_path(
            self.validator.names,
            self._count_hot,
            not (waits and self.batch_limit),
            self.batch_limit,
            lists,
            b.out_axes,  # how run(list)'s outputs are split (Batcher.split's code, gert/core/_split.pyx)
            self.batches.alone,  # a request dynamic batching would queue waits there for a stream without company
        )
        self.direct = not self.split_batch
        self.splits = SplitChoice(self.batcher.chunks, pool.parts_pool)  # split_batch's parts, or whole if faster

    def _count_hot(
        self, prepared, runs: int, lone: int, seconds: float, wait_s: float, waited: int, waits: list
    ) -> None:
        """The compiled hot path's runs of ``prepared``, counted in C, added to its stream's stats and, for lone
        requests the dynamic batcher would have run as batches of one, to the batching stats (``waited`` of them
        waited ``wait_s`` seconds for a stream in all, ``waits`` the latest of those waits)."""
        prepared.worker.count_fast(
            prepared.label, runs, runs * prepared.real_elements, runs * prepared.padded_elements, seconds
        )
        if prepared.batched and lone:
            self.batching_stats.record_alone(lone, prepared.label, wait_s, waited, waits)

    # ---- validate and resolve ------------------------------------------------------------------------------------
    def validate(self, inputs: Mapping[str, object]) -> tuple:
        """(arrays, dim sizes) of a request; InputError naming the input, the expected and the actual value."""
        return self.validator.check(inputs)

    def check(self, inputs: Mapping[str, object]) -> tuple:
        """(arrays, dim sizes) of a request run(inputs) would take; GertError if it would refuse it (the inputs,
        and whether its sizes have a graph). What it returns runs through ``run_checked`` without a second check."""
        arrays, sizes = self.validator.check(inputs)
        if self._pads and sizes["batch"] > self.plan.batch.gears[-1]:
            self.resolve(dict(sizes, batch=self.plan.batch.gears[-1]))  # larger batches run in chunks
        else:
            self.resolve(sizes)
        return arrays, sizes

    # ---- one request -----------------------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, object], out: Optional[Mapping] = None, timeout: Optional[float] = None) -> dict:
        """One request: validated, run at its graph's sizes (padding sliced off), in chunks when it is larger than
        the largest gear, spread over idle streams with split_batch."""
        tr = _trace.active  # tracing (gert.trace): the request wrapped in its spans (_run_traced); off: this check
        if tr is not None:
            return self._run_traced(tr, inputs, None, out, timeout, True)
        timeout = self.pool.timeout_for(timeout)
        arrays, sizes = self.validator.check(inputs)
        return self._run_valid(arrays, sizes, out, timeout, True)

    def _run(self, arrays: Mapping[str, object], sizes: dict, out, timeout: Optional[float], spread: bool) -> dict:
        """run() of ``arrays`` validated already with their ``sizes`` (a group of run_groups); ``spread``: False
        for a part of a batch spread over the idle streams already (run_checked)."""
        tr = _trace.active
        if tr is not None:
            return self._run_traced(tr, arrays, sizes, out, timeout, spread)
        return self._run_valid(arrays, sizes, out, self.pool.timeout_for(timeout), spread)

    def _run_traced(self, tr, inputs, sizes: Optional[dict], out, timeout, spread: bool) -> dict:
        """_run wrapped in the calling thread's spans: "validate" (if it validates), "request" (an error if it fails)."""
        track = tr.thread_track()

        def run() -> dict:
            t = self.pool.timeout_for(timeout)
            arrays, s = (
                (inputs, sizes)
                if sizes is not None
                else tr.timed("validate", track, lambda: self.validator.check(inputs))
            )
            return self._run_valid(arrays, s, out, t, spread)

        return tr.timed("request", track, run, cat="request", errors=True)

    def _run_valid(self, arrays, sizes: dict, out, timeout: Optional[float], spread: bool) -> dict:
        """_run of checked ``arrays``: chunks above the largest gear, split_batch's parts, dynamic batching or a stream."""
        if self._pads and sizes["batch"] > self.plan.batch.gears[-1]:
            chunk, total = self.plan.batch.gears[-1], sizes["batch"]
            return self._run_chunks(
                arrays, sizes, [(s, min(chunk, total - s)) for s in range(0, total, chunk)], timeout, spread
            )
        parts = self._idle_parts(sizes) if spread else 1
        if parts > 1:  # split_batch: spread over the idle streams, or run whole where faster (split_choice.py)
            return self.splits.timed(
                batch_shape(sizes),
                parts,
                lambda k: (
                    self._run_chunks(arrays, sizes, even_rows(sizes["batch"], k), timeout, True)
                    if k > 1
                    else self._run_valid(arrays, sizes, out, timeout, False)
                ),
            )
        run_sizes, key = self.resolve(sizes)  # a size without a graph fails here, alone, before any batch
        req = Request(arrays, sizes, run_sizes, key, dict(out) if out else None, timeout)
        if (
            self.batch_limit
            and 0 < sizes["batch"] < self.batch_limit
            and all(type(a) is np.ndarray for a in arrays.values())
        ):
            return self.batches.run_queued(req)
        return self.pool.dispatch(req)

    # ---- dynamic batching ------------------------------------------------------------------------------------------
    def queue(
        self,
        pending: Pending,
        run_members: Callable[[list, Callable[[Request], dict]], list],
        admit: Optional[Callable[[list], tuple]] = None,
        record: bool = True,
    ) -> dict:
        """``pending``'s result through the model's one batch queue (gert/core/batch_queue.py), with a front door's
        own run function and admit rule (seq.run steps: gert/sequence.py)."""
        return self.batches.submit(pending, run_members, admit, record)

    def run_prepared(
        self, arrays: Mapping[str, object], run: Optional[Callable[[Request], dict]] = None, **request
    ) -> dict:
        """A batch a front door laid out itself (sequence steps: states bound as device tensors, gathered and
        scattered by ``before`` / ``after``): validated, resolved and dispatched as one run (``run``: on the stream
        a batch leader holds, else the first free one); ``request``: the other Request fields (device_out, device,
        real_batch, before, after)."""
        checked, sizes = self.validator.check(arrays)
        run_sizes, key = self.resolve(sizes)
        return (run or self.pool.dispatch)(
            Request(checked, sizes, run_sizes, key, timeout=self.pool.timeout_for(None), **request)
        )

    def _idle_parts(self, sizes: dict) -> int:
        """With split_batch: how many streams are idle (at most the batch size); 1 means run as one request."""
        if not self.split_batch or not self.batcher.enabled or self.pool.count < 2 or sizes.get("batch", 0) < 2:
            return 1
        return max(1, min(self.pool.idle(), sizes["batch"]))

    def _run_chunks(self, arrays: dict, sizes: dict, chunks: list, timeout: Optional[float], parallel: bool) -> dict:
        """Row ranges [(start, rows)] of one request run as separate requests (concurrently with split_batch and
        ``parallel``), their outputs joined back on each output's batch axis. Each chunk's inputs are views
        (Batcher.piece): no copy here, one at upload where the batch is not on axis 0. ``parallel`` is False for a
        part run_checked spread already: that part may be running on a parts-pool thread, which must not wait for
        tasks queued behind it on the same pool (every pool thread waiting so is a deadlock)."""

        def one(start: int, rows: int) -> dict:
            sub = self.batcher.piece(arrays, start, rows)
            if timeout is None and self.split_batch:  # a part of a signature that ran before: the compiled path
                out = self.hot.run(sub)
                if out is not None:
                    return out
            sub_sizes = dict(sizes, batch=rows)
            run_sizes, key = self.resolve(sub_sizes)
            return self.pool.dispatch(Request(sub, sub_sizes, run_sizes, key, timeout=timeout))

        if parallel and self.split_batch and len(chunks) > 1:
            futures = [self.pool.parts_pool().submit(one, *c) for c in chunks[1:]]
            parts = [one(*chunks[0])] + [f.result() for f in futures]
        else:
            parts = [one(*c) for c in chunks]
        return self.batcher.join(parts)

    # ---- many requests -----------------------------------------------------------------------------------------------
    def run_many(
        self,
        requests: Sequence[Mapping[str, object]],
        timeout: Optional[float] = None,
        return_exceptions: bool = False,
    ) -> list:
        """Requests of any shapes: each validated once (a request that fails validation fails alone; its sizes are
        resolved with its group's), then ``run_groups``. ``return_exceptions``: each failed request's result is its error (else the first error is
        raised)."""
        results: list = [None] * len(requests)
        good, where = [], []
        for i, r in enumerate(requests):
            try:
                good.append(self.validator.check(r))  # each request's own error names it before anything runs
            except GertError as e:
                if not return_exceptions:
                    raise
                results[i] = e
                continue
            where.append(i)
        for i, out in zip(
            where, self.run_groups(good, lambda group: self.run_checked(group, timeout), return_exceptions)
        ):
            results[i] = out
        return results

    def run_groups(self, checked: list, run_group: Callable[[list], list], return_exceptions: bool = False) -> list:
        """Requests ``checked`` (each the (arrays, sizes) of ``check``) grouped by batch key, each group run once by
        ``run_group`` (``run_checked``; gert_triton runs non-gear sizes as gear pieces), split back in order. A group
        whose run faults is retried request by request (``run_isolated``), else its error fails its members."""
        results: list = [None] * len(checked)
        items = list(enumerate(checked))

        def key(item: tuple) -> tuple:  # (index, (arrays, sizes)): the arrays' batch key
            return self.batcher.key(item[1][0])

        for group in self.batcher.group(items, key):
            try:
                outs = run_isolated([c for _, c in group], run_group, self.batching_stats.retried)
            except Exception as e:  # noqa: BLE001 - the group's error, raised or returned below
                outs = [e] * len(group)
            if not return_exceptions:
                failed = next((o for o in outs if isinstance(o, BaseException)), None)
                if failed is not None:
                    raise failed
            for (i, _), out in zip(group, outs):
                results[i] = out
        return results

    def run_checked(self, group: Sequence[tuple], timeout: Optional[float] = None) -> list:
        """Requests of one batch key, each the (arrays, sizes) of ``check`` (not validated again), run as one batch
        and split back. A batch whose merged signature ran before (a lone request's: its own) takes the compiled
        hot path (gert/core/_hotpath.pyx) as Model.run(list) does; else the Python path, from resolve on. With
        split_batch a batch of several requests is spread over the idle streams at request boundaries, each part
        run so (in parallel), its results in order, or run whole where that was faster (gert/core/split_choice.py)."""
        parts = 1
        if self.split_batch and len(group) > 1 and self.batcher.enabled:
            parts = min(len(group), self._idle_parts({"batch": sum(sizes["batch"] for _, sizes in group)}))
        if parts < 2:
            return self._run_cut(group, timeout)
        return self.splits.run(group, parts, lambda part, spread: self._run_cut(part, timeout, spread))

    def _run_cut(self, group: Sequence[tuple], timeout: Optional[float], spread: bool = True) -> list:
        """_run_group in gear-sized groups of whole requests where cheaper than padding (gert/core/gear_pieces.py)."""
        rows, batch = [sizes.get("batch", 1) for _, sizes in group], self.batcher.enabled and self.plan.batch
        return run_cheapest(group, rows, batch, self.pool.run_times, lambda g: self._run_group(g, timeout, spread))

    def _run_group(self, group: Sequence[tuple], timeout: Optional[float], spread: bool = True) -> list:
        """run_checked of one part: the compiled path if its signature ran before, else merged and run
        (``spread``: see _run)."""
        if timeout is None:
            if len(group) == 1:
                out = self.hot.run(group[0][0])
                if out is not None:
                    return [out]
            else:
                outs = self.hot.run_list([arrays for arrays, _ in group])
                if outs is not None:
                    return outs
        if len(group) == 1 or not self.batcher.enabled:
            return [self._run(arrays, sizes, None, timeout, spread) for arrays, sizes in group]
        rows = [sizes["batch"] for _, sizes in group]
        merged = self.batcher.merge([arrays for arrays, _ in group], total=sum(rows))
        out = self._run(merged, dict(group[0][1], batch=sum(rows)), None, timeout, spread)
        return self.batcher.split(out, rows)

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
            return shape[: axes[n]] + shape[axes[n] + 1 :]

        if any(
            not np.array_equal(np.asarray(r[n]), np.asarray(first[n]))
            if axes[n] is None
            else rest(r, n) != rest(first, n)
            for r in requests[1:]
            for n in names
        ):
            return self.run_many(requests, timeout)  # other non-batch shapes or unbatched values: not one batch
        out = self.run(self.batcher.merge([{n: r[n] for n in names} for r in requests]), None, timeout)
        return self.batcher.split(out, [self.batcher.rows({n: r[n] for n in names}) for r in requests])


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
