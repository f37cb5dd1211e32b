"""The one batcher: which requests may share a graph run, how they are merged, how the outputs are split back.

Every front door that batches (Model.run(list) / run_batch / split batches, Sequences.step and seq.run, gert_triton's
execute and its sequence batcher) goes through one Batcher, so "which axis carries the batch" is decided once (at
load, by shape inference: gert.core.onnx_io) and used the same everywhere. Requests are merged without a host
concatenate (gert.core.rows.Rows, compiled with the merge in gert/core/_merge.pyx: on axis 0 each request's rows are copied straight into the device buffer; on another
axis the executor lays the parts out once); padding rows, when a door pads a batch up to a gear itself, are one more
part. Outputs are split and joined on each output's own batch axis.

``Batcher.enabled`` is the one answer to "may gert pad, merge, split or chunk this model's batch": every path that does
(Engine.run's chunks and split_batch, run_batch, run_many, dynamic batching, sequence step batches, gert_triton's
gear pieces, the compiled path's run(list)) asks it, and merge / split / join refuse to work for a model where it is
False (a bug then fails loudly instead of handing a caller rows it did not send).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from gert.core._merge import merge
from gert.core._split import split as split_rows
from gert.core._split import take
from gert.core.rows import Rows
from gert.core.shapes import ShapePlan
from gert.errors import GertError


class Batcher:
    """The batch axis of every input and output of a model, and the operations on it."""

    def __init__(self, plan: ShapePlan):
        self.plan = plan
        self.in_axes = {t.name: plan.batch_axis(t.name) for t in plan.inputs}
        self.out_axes = {t.name: plan.batch_axis(t.name, output=True) for t in plan.outputs}
        # an output with the batch on two axes ([N, N] of x @ x^T): a request's part of it is not one slice
        several = [
            (t.name, axes)
            for t in plan.outputs
            for axes in [[a for a in range(len(t.shape)) if plan.output_axes.get((t.name, a)) == "batch"]]
            if len(axes) > 1
        ]
        if plan.batch is None:
            self.why = "the model has no batch axis"
        elif not plan.separable:
            self.why = (
                f"outputs {list(plan.unsplit)} are computed from the batch but do not carry it, so one "
                "request's rows cannot be told apart in them"
            )
        elif several:
            self.why = (
                f"output '{several[0][0]}' carries the batch on axes {several[0][1]}, so one request's part "
                "of it is not one slice"
            )
        else:
            self.why = ""
        # requests may share a run, and a batch may be padded, split or chunked: the model has a batch axis and every
        # output computed from it carries it on exactly one axis
        self.enabled = not self.why

    def key(self, arrays: Mapping[str, object], extra: tuple = ()) -> tuple:
        """Requests with equal keys form one batch: the same dtypes and non-batch shapes, and equal values of the
        inputs without the batch axis (a 0-d sample rate)."""
        key = list(extra)
        for n, a in sorted(arrays.items()):
            axis = self.in_axes.get(n)
            if axis is None:
                a = np.asarray(a)
                key.append((n, a.shape, a.dtype.str, a.tobytes()))
            else:
                key.append((n, a.dtype.str, a.shape[:axis] + a.shape[axis + 1 :]))
        return tuple(key)

    def rows(self, arrays: Mapping[str, object]) -> int:
        """A request's rows along the batch axis (1 for a model without one)."""
        for n, a in arrays.items():
            axis = self.in_axes.get(n)
            shape = a.shape if hasattr(a, "shape") else np.shape(a)
            if axis is not None and len(shape) > axis:
                return int(shape[axis])
        return 1

    def merge(
        self,
        requests: Sequence[Mapping[str, object]],
        pad_to: Optional[int] = None,
        pad_value: Optional[Mapping[str, float]] = None,
        total: Optional[int] = None,
    ) -> dict:
        """One batch of ``requests`` (equal keys): each batched input joined on its batch axis as Rows (no host
        copy); inputs without the batch axis taken from the first request. ``pad_to``: rows of filler
        (``pad_value``, else the plan's) appended up to that many rows; ``total``: the requests' rows, when the
        caller counted them already."""
        if total is None:
            total = sum(self.rows(r) for r in requests)
        if len(requests) > 1 or (pad_to is not None and pad_to > total):
            self._check("merged or padded")
        # compiled (gert/core/_merge.pyx): the hot path's run(list) joins its requests with the same code
        return merge(requests, self.in_axes, pad_to, pad_value or self.plan.pad_value, total)

    def split(self, out: Mapping[str, np.ndarray], rows: Sequence[int]) -> list:
        """Each request's rows of the outputs that carry the batch (views); an output without the batch axis (one
        that no batched input reaches: the same for all) as it is."""
        if len(rows) > 1:
            self._check("split")
        return split_rows(out, rows, self.out_axes)  # compiled (gert/core/_split.pyx): the hot path's split too

    def join(self, parts: Sequence[Mapping[str, np.ndarray]]) -> dict:
        """The outputs of consecutive row ranges of one request, joined back on each output's batch axis."""
        if len(parts) > 1:
            self._check("joined from chunks")
        return join(parts, self.out_axes)

    def piece(self, arrays: Mapping[str, object], start: int, rows: int) -> dict:
        """Rows start:start+rows of a request's batched inputs (a chunk of it, or its share of a split batch),
        without a copy: on axis 0 a view (C-contiguous, uploaded as it is); on another axis a Rows of that view, which
        the executor lays out once (a strided view never reaches the compiled path)."""
        self._check("cut into chunks")
        out = {}
        for n, a in arrays.items():
            axis = self.in_axes.get(n)
            part = take(a, axis, start, rows)
            if type(part) is np.ndarray and not part.flags.c_contiguous:
                part = Rows([part], f"input '{n}'", axis)
            out[n] = part
        return out

    def _check(self, what: str) -> None:
        """Refuse to pad, merge, split or chunk a batch of a model whose rows cannot be told apart."""
        if not self.enabled:
            raise GertError(f"a batch of this model cannot be {what}: {self.why}")

    @staticmethod
    def chunks(items: Sequence, rows: Callable[[Any], int], top: Optional[int]) -> list:
        """``items`` in order, cut into runs of at most ``top`` rows (None: one run)."""
        out, chunk, total = [], [], 0
        for item in items:
            r = rows(item)
            if chunk and top is not None and total + r > top:
                out.append(chunk)
                chunk, total = [], 0
            chunk.append(item)
            total += r
        if chunk:
            out.append(chunk)
        return out

    def group(self, items: Sequence, key: Callable[[Any], tuple]) -> list:
        """``items`` grouped by ``key`` (first appearance order); each alone when batching is off."""
        if not self.enabled:
            return [[i] for i in items]
        groups: dict = {}
        for item in items:
            groups.setdefault(key(item), []).append(item)
        return list(groups.values())


def join(parts: Sequence[Mapping[str, np.ndarray]], axes: Mapping[str, Optional[int]]) -> dict:
    """Outputs of consecutive row ranges joined on each output's batch axis (``axes``: name -> axis, None: the
    output does not carry the batch, and every part has the same: the last one's is kept).

    Each part's array is dropped from its dict as soon as it is copied (the parts are the caller's to give up): the
    joined array's pages are written part by part, so the process holds the joined output plus the parts not yet
    copied, not the parts and the whole joined output at once (np.concatenate's peak: twice the output; PP-OCR rec,
    one request of 4 lines at width 912 split over two streams: 2 x 12 MB, issue 41)."""
    out = {}
    for name in list(parts[0]):
        axis = axes.get(name)
        if axis is None:
            out[name] = parts[-1][name]
            continue
        out[name] = _join_releasing(parts, name, axis)
    return out


def _join_releasing(parts: Sequence[Mapping[str, np.ndarray]], name: str, axis: int) -> np.ndarray:
    """``parts``' arrays ``name`` concatenated on ``axis``, each popped from its (mutable) dict once copied; arrays
    that do not agree on the dtype or the other axes are joined by np.concatenate (its promotion and its errors)."""
    first = parts[0][name]
    rest_shape = first.shape[:axis] + first.shape[axis + 1 :]
    if len(parts) < 2 or any(
        type(a) is not np.ndarray or a.dtype != first.dtype or a.shape[:axis] + a.shape[axis + 1 :] != rest_shape
        for a in (p[name] for p in parts)
    ):
        return np.concatenate([p[name] for p in parts], axis=axis)
    total = sum(p[name].shape[axis] for p in parts)
    joined = np.empty(first.shape[:axis] + (total,) + first.shape[axis + 1 :], first.dtype)
    del first
    index: list = [slice(None)] * joined.ndim
    start = 0
    for part in parts:  # the part's dict holds its array's only reference here (a read-only mapping keeps it)
        a = part[name]
        index[axis] = slice(start, start + a.shape[axis])
        joined[tuple(index)] = a
        start += a.shape[axis]
        del a
        if isinstance(part, dict):
            part.pop(name, None)
    return joined
