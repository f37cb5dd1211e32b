"""Shape policy: which dims of a model are dynamic, how each is served (gears), and how a request maps to a graph.

Dims are addressed by their ONNX symbolic name, an unnamed (or ambiguous) dynamic dim as ``"input:axis"``, and
``"batch"`` always means the batch axis (the first axis, when it is symbolic in every input). Policies per dim:

- ``pad``: pad up to the nearest gear (``pad_value``), slice outputs back. Always transparent on the batch axis;
  on other axes only for models that mask padding, so it is never the default there.
- ``exact``: a static graph per size, compiled on first use, kept in a bounded scan-resistant LRU (gert.tiers).
- ``dynamic``: one dynamic-shape graph.
- ``auto``: tiered (gert.tiers): a size runs at once on the stream's dynamic-shape graph; sizes that turn out hot get a
  static graph compiled in the background. The default for non-batch dims without gears.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from gert.dtypes import onnx_to_numpy
from gert.errors import GertError

POLICIES = ("pad", "exact", "dynamic", "auto")
DEFAULT_BATCH_GEARS = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output: name, dtype and shape (ints for fixed dims, the dim's name for dynamic ones)."""

    name: str
    dtype: np.dtype
    shape: tuple


@dataclass
class Dim:
    """One dynamic dimension of the model and how it is served."""

    name: str                       # "batch", an ONNX dim_param, or "input:axis"
    axes: list                      # [(input name, axis)] where it appears
    policy: str = "exact"
    gears: tuple = ()               # sorted sizes; empty: any size (exact / dynamic / auto only)

    def resolve(self, value: int, where: str) -> int:
        """The size the graph is run at for a request of ``value`` along this dim."""
        if self.policy == "pad":
            for g in self.gears:
                if g >= value:
                    return g
            if self.name == "batch":
                return self.gears[-1]  # the executor splits larger batches
            raise GertError(f"{where}: size {value} of dim '{self.name}' is larger than its largest gear; "
                            f"gears are {list(self.gears)}")
        if self.gears and value not in self.gears:
            raise GertError(f"{where}: size {value} of dim '{self.name}' is not one of its gears {list(self.gears)}")
        return value


@dataclass
class ShapePlan:
    """The model's I/O and dynamic dims, with the user's gears and policies applied."""

    inputs: list
    outputs: list
    dims: dict = field(default_factory=dict)          # name -> Dim
    input_axes: dict = field(default_factory=dict)    # (input, axis) -> dim name
    output_axes: dict = field(default_factory=dict)   # (output, axis) -> dim name, for slicing
    has_batch: bool = False
    pad_value: dict = field(default_factory=dict)     # input name -> pad value

    @property
    def tiered(self) -> bool:
        """Some dim uses the ``auto`` policy: requests fall back to a dynamic-shape graph (gert.tiers)."""
        return any(d.policy == "auto" for d in self.dims.values())

    @property
    def batch(self) -> Optional[Dim]:
        return self.dims.get("batch")

    def max_batch(self) -> Optional[int]:
        b = self.batch
        return b.gears[-1] if b and b.gears else None


def _tensor_infos(io: Sequence[tuple], what: str) -> list:
    out = []
    for name, elem, dims in io:
        if dims is None:
            raise GertError(f"model {what} '{name}' has no shape (rank) in the ONNX file; gert needs the rank")
        out.append(TensorInfo(name, onnx_to_numpy(elem), tuple(dims)))
    return out


def _dim_keys(info: TensorInfo) -> list:
    """The dim key of each axis of one tensor: an int for fixed axes, else its symbolic name or 'tensor:axis'."""
    names = [d for d in info.shape if isinstance(d, str)]
    keys = []
    for axis, d in enumerate(info.shape):
        if isinstance(d, int):
            keys.append(d)
        elif d is None or names.count(d) > 1:  # unnamed, or a name used twice in one tensor ("?"): its own dim
            keys.append(f"{info.name}:{axis}")
        else:
            keys.append(d)
    return keys


def plan_shapes(io: dict, gears: Optional[Mapping[str, Sequence[int]]] = None,
                shape_policy: Optional[Mapping[str, str]] = None, pad_value: Union[float, Mapping[str, float]] = 0,
                max_batch: Optional[int] = None,
                output_dims: Optional[Mapping[str, Mapping[int, str]]] = None) -> ShapePlan:
    """Build the shape plan from ONNX I/O metadata (``gert._cann.read_onnx_io``) and the user's settings."""
    inputs = _tensor_infos(io["inputs"], "input")
    outputs = _tensor_infos(io["outputs"], "output")
    if not inputs:
        raise GertError("the model has no inputs")
    plan = ShapePlan(inputs=inputs, outputs=outputs)
    keys = {t.name: _dim_keys(t) for t in inputs}
    first = [keys[t.name][0] if t.shape else 1 for t in inputs]
    plan.has_batch = all(not isinstance(k, int) for k in first)
    for t in inputs:
        for axis, k in enumerate(keys[t.name]):
            if isinstance(k, int):
                continue
            name = "batch" if plan.has_batch and axis == 0 else k
            dim = plan.dims.setdefault(name, Dim(name=name, axes=[]))
            dim.axes.append((t.name, axis))
            plan.input_axes[(t.name, axis)] = name
    # outputs: the batch axis, and dims that carry an input dim's symbolic name, are sliced back
    in_names = {k for t in inputs for k in keys[t.name] if isinstance(k, str)}
    for t in outputs:
        for axis, d in enumerate(t.shape):
            if axis == 0 and plan.has_batch and not isinstance(d, int):
                plan.output_axes[(t.name, 0)] = "batch"
            elif isinstance(d, str) and d in in_names and d in plan.dims:
                plan.output_axes[(t.name, axis)] = d
    for out_name, mapping in (output_dims or {}).items():
        if out_name not in {t.name for t in outputs}:
            raise GertError(f"output_dims names '{out_name}', which is not a model output; outputs: "
                            f"{[t.name for t in outputs]}")
        for axis, dim_name in mapping.items():
            if dim_name not in plan.dims:
                raise GertError(f"output_dims maps {out_name} axis {axis} to '{dim_name}', which is not a dynamic "
                                f"dim of the model; dims: {sorted(plan.dims)}")
            plan.output_axes[(out_name, int(axis))] = dim_name
    # policies and gears
    policy = dict(shape_policy or {})
    user_gears = {k: v for k, v in (gears or {}).items()}
    for name in list(policy) + list(user_gears):
        if name not in plan.dims:
            raise GertError(f"'{name}' is not a dynamic dim of the model; its dynamic dims are {sorted(plan.dims)}"
                            + ("" if plan.has_batch else " (the model has no batch axis)"))
    for name, dim in plan.dims.items():
        p = policy.get(name, "pad" if name == "batch" else "exact" if name in user_gears else "auto")
        if p not in POLICIES:
            raise GertError(f"shape_policy for '{name}' is '{p}'; choose one of {list(POLICIES)}")
        dim.policy = p
        g = user_gears.get(name)
        if g is not None:
            try:
                g = tuple(sorted({int(x) for x in g}))
            except (TypeError, ValueError) as e:
                raise GertError(f"gears for '{name}' must be positive integers, got {list(g)!r}") from e
            if not g or g[0] <= 0:
                raise GertError(f"gears for '{name}' must be positive integers, got {list(g)!r}")
            dim.gears = g
        elif name == "batch" and p == "pad":
            top = max_batch or DEFAULT_BATCH_GEARS[-1]
            dim.gears = tuple(x for x in DEFAULT_BATCH_GEARS if x < top) + (top,)
        elif p == "pad":
            raise GertError(f"dim '{name}' uses policy 'pad' but has no gears; give gears={{'{name}': [...]}}")
    if max_batch is not None and plan.batch is not None and plan.batch.gears and plan.batch.gears[-1] > max_batch:
        raise GertError(f"batch gears {list(plan.batch.gears)} go beyond max_batch={max_batch}")
    # pad values
    if isinstance(pad_value, Mapping):
        for k in pad_value:
            if k not in {t.name for t in inputs}:
                raise GertError(f"pad_value names '{k}', which is not a model input")
        plan.pad_value = {t.name: pad_value.get(t.name, 0) for t in inputs}
    else:
        plan.pad_value = {t.name: pad_value for t in inputs}
    return plan
