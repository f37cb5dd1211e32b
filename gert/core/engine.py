"""The Engine: a model's request pipeline, the same for every front door (docs/architecture.md).

    validate (gert.core.validate) -> resolve sizes and graph key -> batch (gert.core.batching) -> dispatch to a
    stream, run under recovery (the Streams the Model gives) -> split

gert.Model, gert.Sequences, gert.InferenceSession, gert.onnx_backend and gert_triton are front doors: they translate
their callers' inputs and errors and call the Engine; none holds a copy of a step.
"""
from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from gert.core.batching import Batcher, take
from gert.core.validate import Validator
from gert.errors import GertError
from gert.core.executor import Request
from gert.core.shapes import ShapePlan

_RESOLVED_KEPT = 1024  # remembered sizes -> (run sizes, graph key) (cleared when full)


@dataclass
class Streams:
    """What the Engine needs of the streams that run requests (the Model owns them, with their lifecycle):
    ``dispatch`` runs a Request on the first free stream under recovery; ``idle`` counts the free streams;
    ``count`` all of them; ``timeout_for`` a request's device timeout; ``parts_pool`` threads for split batches."""

    dispatch: Callable[[Request], dict]
    idle: Callable[[], int]
    count: Callable[[], int]
    timeout_for: Callable[[Optional[float]], Optional[float]]
    parts_pool: Callable[[], concurrent.futures.ThreadPoolExecutor]


class Engine:
    """Runs requests of one model: one request, a list, a batch, or a prepared batch of sequence steps."""

    def __init__(self, plan: ShapePlan, streams: Streams, split_batch: bool = False):
        self.plan = plan
        self.streams = streams
        self.split_batch = bool(split_batch)
        self.validator = Validator(plan)
        self.batcher = Batcher(plan)
        self._resolved: dict = {}

    # ---- validate and resolve ------------------------------------------------------------------------------------
    def validate(self, inputs: Mapping[str, object]) -> tuple:
        """(arrays, dim sizes) of a request; InputError naming the input, the expected and the actual value."""
        return self.validator.check(inputs)

    def check(self, inputs: Mapping[str, object]) -> None:
        """Raise GertError if run(inputs) would refuse it (the inputs, and whether its sizes have a graph)."""
        _, sizes = self.validator.check(inputs)
        batch = self.plan.batch
        if batch is not None and batch.policy == "pad" and sizes["batch"] > batch.gears[-1]:
            sizes = dict(sizes, batch=batch.gears[-1])  # larger batches run in chunks
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
        timeout = self.streams.timeout_for(timeout)
        arrays, sizes = self.validator.check(inputs)
        batch = self.plan.batch
        if batch is not None and batch.policy == "pad" and sizes["batch"] > batch.gears[-1]:
            chunk, total = batch.gears[-1], sizes["batch"]
            return self._run_chunks(arrays, sizes, [(s, min(chunk, total - s)) for s in range(0, total, chunk)],
                                    timeout)
        parts = self._idle_parts(sizes)
        if parts > 1:  # split_batch: spread one batch over the streams that have nothing to do
            total = sizes["batch"]
            counts = [total // parts + (1 if i < total % parts else 0) for i in range(parts)]
            starts = [sum(counts[:i]) for i in range(parts)]
            return self._run_chunks(arrays, sizes, list(zip(starts, counts)), timeout)
        run_sizes, key = self.resolve(sizes)
        return self.streams.dispatch(Request(arrays, sizes, run_sizes, key, dict(out) if out else None, timeout))

    def run_prepared(self, arrays: Mapping[str, object], **request) -> dict:
        """A batch a front door laid out itself (sequence steps: states bound as device tensors, gathered and
        scattered by ``before`` / ``after``): validated, resolved and dispatched as one run; ``request``: the
        other Request fields (device_out, device, real_batch, before, after)."""
        checked, sizes = self.validator.check(arrays)
        run_sizes, key = self.resolve(sizes)
        return self.streams.dispatch(Request(checked, sizes, run_sizes, key,
                                             timeout=self.streams.timeout_for(None), **request))

    def _idle_parts(self, sizes: dict) -> int:
        """With split_batch: how many streams are idle (at most the batch size); 1 means run as one request."""
        if not self.split_batch or not self.batcher.enabled or self.streams.count() < 2 or sizes.get("batch", 0) < 2:
            return 1
        return max(1, min(self.streams.idle(), sizes["batch"]))

    def _run_chunks(self, arrays: dict, sizes: dict, chunks: list, timeout: Optional[float]) -> dict:
        """Row ranges [(start, rows)] of one request run as separate requests (concurrently with split_batch),
        their outputs joined back on the batch axis."""
        axes = self.batcher.in_axes

        def one(start: int, rows: int) -> dict:
            sub = {k: take(v, axes.get(k), start, rows) for k, v in arrays.items()}
            sub_sizes = dict(sizes, batch=rows)
            run_sizes, key = self.resolve(sub_sizes)
            return self.streams.dispatch(Request(sub, sub_sizes, run_sizes, key, timeout=timeout))

        if self.split_batch and len(chunks) > 1:
            futures = [self.streams.parts_pool().submit(one, *c) for c in chunks[1:]]
            parts = [one(*chunks[0])] + [f.result() for f in futures]
        else:
            parts = [one(*c) for c in chunks]
        return self.batcher.join(parts)

    # ---- many requests -----------------------------------------------------------------------------------------------
    def run_many(self, requests: Sequence[Mapping[str, object]], timeout: Optional[float] = None,
                 return_exceptions: bool = False) -> list:
        """Requests of any shapes: grouped by batch key, each group run as one batch, split back in order. A
        request that fails validation fails alone; a group that fails, fails its members. ``return_exceptions``:
        each failed request's result is its error (else the first error is raised, after every group ran)."""
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
                outs = self.run_batch([r for _, r, _ in group], timeout=timeout)
            except Exception as e:  # noqa: BLE001 - the group's error, raised or returned below
                if not return_exceptions:
                    raise
                outs = [e] * len(group)
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
        if any(not np.array_equal(np.asarray(r[n]), np.asarray(first[n]))
               for r in requests[1:] for n in names if axes[n] is None):
            return self.run_many(requests, timeout)  # inputs without the batch axis differ: not one batch
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
