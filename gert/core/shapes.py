"""Shape policy: which dims of a model are dynamic, how each is served (gears), and how a request maps to a graph.

Dims are addressed by their ONNX symbolic name, an unnamed (or ambiguous) dynamic dim as ``"input:axis"``, and
``"batch"`` always means the batch axis: the first axis when it is symbolic in every input, or the one ``batch_dim``
names (an ONNX dim name such as ``"N"``, or the axes that carry it, ``["x:1", "h:1"]``: a recurrent state laid out
[layers, batch, hidden] has its batch on axis 1). Policies per dim:

- ``pad``: pad up to the nearest gear (``pad_value``), slice outputs back. Always transparent on the batch axis;
  on other axes only for models that mask padding, so it is never the default there.
- ``exact``: a static graph per size, compiled on first use, kept in a bounded scan-resistant LRU (gert.core.tiers).
- ``dynamic``: one dynamic-shape graph.
- ``auto``: tiered (gert.core.tiers): a size runs at once on the stream's dynamic-shape graph; sizes that turn out hot get a
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
    aliases: dict = field(default_factory=dict)       # another name of a dim (ONNX name, "input:axis") -> dim name
    # outputs computed from the batch that do not carry it (a reduction over the batch; a value-dependent output
    # such as NMS's [selected, 3]): requests are then never padded, merged or split (docs/architecture.md)
    unsplit: tuple = ()
    unknown: tuple = ()                               # of those, the ones inference could not place
    value_dependent: tuple = ()

    @property
    def tiered(self) -> bool:
        """Some dim uses the ``auto`` policy: requests fall back to a dynamic-shape graph (gert.core.tiers)."""
        return any(d.policy == "auto" for d in self.dims.values())

    @property
    def batch(self) -> Optional[Dim]:
        return self.dims.get("batch")

    def batch_axis(self, name: str, output: bool = False) -> Optional[int]:
        """The axis of input (or output) ``name`` that carries the batch, or None."""
        axes = self.output_axes if output else self.input_axes
        t = next((t for t in (self.outputs if output else self.inputs) if t.name == name), None)
        if t is None:
            return None
        return next((a for a in range(len(t.shape)) if axes.get((name, a)) == "batch"), None)

    @property
    def separable(self) -> bool:
        """Requests may share one run: every output computed from the batch carries the batch axis, so each
        request's rows can be sliced back out (and pad rows sliced off)."""
        return not self.unsplit

    def dim_name(self, spec: str, what: str = "dim") -> str:
        """The dim that ``spec`` names: a dim name ("batch", "seq"), an ONNX dim_param, or "input:axis"."""
        name = spec if spec in self.dims else self.aliases.get(spec)
        if name is None:
            raise GertError(f"{what}: '{spec}' is not a dynamic dim of the model; its dynamic dims are "
                            f"{sorted(self.dims)}" + (f" (also named {sorted(self.aliases)})" if self.aliases else "")
                            + ("" if self.has_batch else " (the model has no batch axis)"))
        return name

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


def _batch_axes(batch_dim, inputs: list, outputs: list, keys: dict) -> tuple:
    """({(input, axis)}, {(output, axis)}, {symbolic names}) that ``batch_dim`` names as the batch axis; an output dim
    with one of those names carries the batch too."""
    if batch_dim is None:
        return set(), set(), set()
    if isinstance(batch_dim, str) and ":" not in batch_dim:
        found = {(t.name, a) for t in inputs for a, k in enumerate(keys[t.name]) if k == batch_dim}
        if not found:
            names = sorted({k for t in inputs for k in keys[t.name] if isinstance(k, str)})
            raise GertError(f"batch_dim '{batch_dim}' is not a dynamic dim name of the model's inputs; they have "
                            f"{names}")
        return found, set(), {batch_dim}
    specs = [batch_dim] if isinstance(batch_dim, str) else list(batch_dim)
    ins, outs = set(), set()
    by_name = {t.name: ("output", t) for t in outputs}
    by_name.update({t.name: ("input", t) for t in inputs})
    for spec in specs:
        name, _, axis = str(spec).rpartition(":")
        kind, t = by_name.get(name, (None, None))
        if t is None or not axis.lstrip("-").isdigit() or not -len(t.shape) <= int(axis) < len(t.shape):
            raise GertError(f"batch_dim '{spec}' must be 'tensor:axis' naming an axis of an input or output; inputs "
                            f"{[(i.name, i.shape) for i in inputs]}")
        a = int(axis) % len(t.shape)
        if isinstance(t.shape[a], int):
            raise GertError(f"batch_dim '{spec}': axis {a} of {kind} '{name}' is fixed ({t.shape[a]}), not dynamic "
                            f"(shape {t.shape})")
        (ins if kind == "input" else outs).add((name, a))
    if not ins:
        raise GertError(f"batch_dim {specs} names no input axis")
    shapes = {t.name: t.shape for t in inputs}
    return ins, outs, {shapes[n][a] for n, a in ins if isinstance(shapes[n][a], str)}


def plan_shapes(io: dict, gears: Optional[Mapping[str, Sequence[int]]] = None,
                shape_policy: Optional[Mapping[str, str]] = None, pad_value: Union[float, Mapping[str, float]] = 0,
                max_batch: Optional[int] = None,
                output_dims: Optional[Mapping[str, Mapping[int, str]]] = None,
                batch_dim: Union[str, Sequence[str], None] = None,
                state: Optional[Mapping[str, str]] = None, *, model=None, value_dependent: Sequence[str] = ()
                ) -> ShapePlan:
    """Build the shape plan from ONNX I/O metadata (``gert._cann.read_onnx_io``) and the user's settings. With
    ``model`` (the parsed ONNX model) the outputs' dims come from shape inference (gert.core.onnx_io.output_dims),
    else from the dim names the file declares (config tools that only describe a model)."""
    inputs = _tensor_infos(io["inputs"], "input")
    outputs = _tensor_infos(io["outputs"], "output")
    if not inputs:
        raise GertError("the model has no inputs")
    plan = ShapePlan(inputs=inputs, outputs=outputs)
    keys = {t.name: _dim_keys(t) for t in inputs}
    batch_in, batch_out, batch_names = _batch_axes(batch_dim, inputs, outputs, keys)
    if batch_dim is None:
        first = [keys[t.name][0] if t.shape else 1 for t in inputs]
        plan.has_batch = all(not isinstance(k, int) for k in first)
        if plan.has_batch:
            batch_in = {(t.name, 0) for t in inputs}
    else:
        plan.has_batch = True
    for t in inputs:
        for axis, k in enumerate(keys[t.name]):
            if isinstance(k, int):
                continue
            name = "batch" if (t.name, axis) in batch_in else k
            dim = plan.dims.setdefault(name, Dim(name=name, axes=[]))
            dim.axes.append((t.name, axis))
            plan.input_axes[(t.name, axis)] = name
    plan.aliases = _aliases(inputs, keys, plan.input_axes)
    _output_axes(plan, keys, batch_dim, batch_out, batch_names, model, value_dependent, state, output_dims)
    # policies and gears
    policy = {plan.dim_name(k, "shape_policy"): v for k, v in (shape_policy or {}).items()}
    user_gears = {plan.dim_name(k, "gears"): v for k, v in (gears or {}).items()}
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
    _unsplit_policy(plan, "batch" in policy, "batch" in user_gears)
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


def _aliases(inputs: list, keys: dict, input_axes: dict) -> dict:
    """Other names of each dim: its ONNX dim_param (when it names one dim only) and "input:axis" of each axis."""
    out: dict = {}
    by_param: dict = {}
    for t in inputs:
        for axis, k in enumerate(keys[t.name]):
            dim = input_axes.get((t.name, axis))
            if dim is None:
                continue
            out[f"{t.name}:{axis}"] = dim
            if isinstance(t.shape[axis], str):
                by_param.setdefault(t.shape[axis], set()).add(dim)
    for param, dims in by_param.items():
        if len(dims) == 1:
            out.setdefault(param, next(iter(dims)))
    return out


def _output_axes(plan: ShapePlan, keys: dict, batch_dim, batch_out: set, batch_names: set, model,
                 value_dependent: Sequence[str], state, output_dims) -> None:
    """plan.output_axes ({(output, axis): dim}) and plan.unsplit: by shape inference when the model is given."""
    inputs, outputs = plan.inputs, plan.outputs
    unknown: set = set()
    if model is not None:
        from gert.core.onnx_io import output_dims as infer_output_dims

        inferred = infer_output_dims(model, plan.input_axes)
        for t in outputs:
            dims = inferred.get(t.name)
            if dims is None or len(dims) != len(t.shape):
                unknown.add(t.name)
                continue
            if dims.count("batch") > 1:  # [N, N]: one request's rows are not one slice
                unknown.add(t.name)
                continue
            for axis, d in enumerate(dims):
                if isinstance(d, str):
                    plan.output_axes[(t.name, axis)] = d
            if "batch" not in dims and None in dims:
                unknown.add(t.name)  # the batch may hide in a dim inference could not tell (a Reshape to [-1])
        for n, a in batch_out:  # batch_dim names an output axis: the user's word, as output_dims
            plan.output_axes[(n, a)] = "batch"
            unknown.discard(n)
    else:  # by the names the file declares
        in_names = {k for t in inputs for k in keys[t.name] if isinstance(k, str)}
        for t in outputs:
            for axis, d in enumerate(t.shape):
                if isinstance(d, int):
                    continue
                if (batch_dim is None and axis == 0 and plan.has_batch) or (t.name, axis) in batch_out \
                        or d in batch_names:
                    plan.output_axes[(t.name, axis)] = "batch"
                elif isinstance(d, str) and d in in_names and d in plan.dims:
                    plan.output_axes[(t.name, axis)] = d
    for in_name, out_name in (state.items() if isinstance(state, Mapping) else ()):  # a state output carries its state input's dims
        t = next((t for t in inputs if t.name == in_name), None)
        if t is not None and out_name in {o.name for o in outputs}:
            for axis in range(len(t.shape)):
                if (in_name, axis) in plan.input_axes:
                    plan.output_axes[(out_name, axis)] = plan.input_axes[(in_name, axis)]
            unknown.discard(out_name)
    for out_name, mapping in (output_dims or {}).items():
        if out_name not in {t.name for t in outputs}:
            raise GertError(f"output_dims names '{out_name}', which is not a model output; outputs: "
                            f"{[t.name for t in outputs]}")
        for key in [k for k in plan.output_axes if k[0] == out_name]:  # the user's word replaces inference
            del plan.output_axes[key]
        unknown.discard(out_name)
        for axis, dim_name in mapping.items():
            plan.output_axes[(out_name, int(axis))] = plan.dim_name(dim_name, f"output_dims['{out_name}'][{axis}]")
    plan.value_dependent = tuple(value_dependent)
    if plan.batch is None:
        return
    carried = {n for n, a in plan.output_axes if plan.output_axes[(n, a)] == "batch"}
    if model is not None:
        from gert.core.onnx_io import depends_on

        batched = depends_on(model, {n for n, _ in plan.batch.axes})
    else:
        batched = {t.name for t in outputs}
    plan.unsplit = tuple(t.name for t in outputs if t.name in batched and t.name not in carried)
    plan.unknown = tuple(n for n in plan.unsplit if n in unknown and n not in plan.value_dependent)


def _unsplit_policy(plan: ShapePlan, policy_given: bool, gears_given: bool) -> None:
    """A model with outputs that do not carry the batch (plan.unsplit) never has filler rows added to a request:
    its batch defaults to ``exact``. Asking for ``pad`` is refused, unless the outputs are value-dependent (NMS over
    filler images: a documented choice, warned about); an output inference could not place must be named."""
    batch = plan.batch
    if batch is None or not plan.unsplit:
        return
    unknown = plan.unknown
    if unknown and batch.policy == "pad":
        name = unknown[0]
        raise GertError(f"output '{name}': shape inference cannot tell which of its axes carries the batch (its shape "
                        f"is {next(t.shape for t in plan.outputs if t.name == name)} in the file), so a padded or "
                        f"merged batch could hand a request rows it did not send; pass output_dims={{'{name}': "
                        f"{{0: 'batch'}}}} naming its batch axis (or {{'{name}': {{}}}} if it has none), or "
                        f"shape_policy={{'batch': 'exact'}}")
    if not policy_given:
        batch.policy = "exact"
        if not gears_given:
            batch.gears = ()
        return
    if batch.policy == "pad":
        reduced = [n for n in plan.unsplit if n not in plan.value_dependent]
        if reduced:
            raise GertError(f"shape_policy batch='pad': output '{reduced[0]}' does not carry the batch axis (it is "
                            f"computed over the whole batch, e.g. a reduction), so filler rows would change it; use "
                            f"'exact' (the default for such models), or pass output_dims={{'{reduced[0]}': "
                            f"{{0: 'batch'}}}} if it does carry the batch")
        import warnings

        warnings.warn(f"shape_policy batch='pad' on a model whose outputs {list(plan.value_dependent)} depend on "
                      f"input values: the filler rows of a padded batch are run too and can change those outputs (e.g. "
                      f"NMS over padded images adds boxes); 'exact' (the default for such models) runs each batch size "
                      f"as it is", stacklevel=4)


def warmup_keys(plan: ShapePlan, sizes: Optional[Mapping[str, Sequence[int]]] = None,
                fallback_key: Optional[tuple] = None) -> list:
    """The graph keys a warmup compiles: every combination of the dims' gears (a dynamic dim: -1; an exact or auto
    dim without gears: ``sizes[dim]``). When some dim has neither, no static combination is known and only
    ``fallback_key`` (the auto policy's dynamic-shape graph, if any) is compiled."""
    import itertools

    names = sorted(plan.dims)
    choices: list = []
    for n in names:
        d = plan.dims[n]
        if d.policy == "dynamic":
            choices.append([-1])
        elif d.gears:
            choices.append(list(d.gears))
        elif sizes and sizes.get(n):
            choices.append(sorted({int(v) for v in sizes[n]}))
        else:
            return [fallback_key] if fallback_key is not None else []
    return [tuple(zip(names, combo)) for combo in itertools.product(*choices)]
