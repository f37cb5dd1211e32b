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
from gert.errors import GertError, RowsNotIndependent

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

    name: str  # "batch", an ONNX dim_param, or "input:axis"
    axes: list  # [(input name, axis)] where it appears
    policy: str = "exact"
    gears: tuple = ()  # sorted sizes; empty: any size (exact / dynamic / auto only)

    def resolve(self, value: int, where: str) -> int:
        """The size the graph is run at for a request of ``value`` along this dim."""
        if self.policy == "pad":
            for g in self.gears:
                if g >= value:
                    return g
            if self.name == "batch":
                return self.gears[-1]  # the executor splits larger batches
            raise GertError(
                f"{where}: size {value} of dim '{self.name}' is larger than its largest gear; "
                f"gears are {list(self.gears)}"
            )
        if self.gears and value not in self.gears:
            raise GertError(f"{where}: size {value} of dim '{self.name}' is not one of its gears {list(self.gears)}")
        return value


@dataclass
class ShapePlan:
    """The model's I/O and dynamic dims, with the user's gears and policies applied."""

    inputs: list
    outputs: list
    dims: dict = field(default_factory=dict)  # name -> Dim
    input_axes: dict = field(default_factory=dict)  # (input, axis) -> dim name
    output_axes: dict = field(default_factory=dict)  # (output, axis) -> dim name, for slicing
    has_batch: bool = False
    pad_value: dict = field(default_factory=dict)  # input name -> pad value
    aliases: dict = field(default_factory=dict)  # another name of a dim (ONNX name, "input:axis") -> dim name
    # outputs whose rows are not proved independent of other rows (gert.core.row_proof: a reduction or softmax over
    # the batch, NMS's [selected, 3], an op without a rule): requests are then never padded, merged or split
    unsplit: tuple = ()
    mixing: dict = field(default_factory=dict)  # output -> why its rows are not proved independent
    unplaced: dict = field(default_factory=dict)  # output -> axes whose size inference could not tell
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
            raise GertError(
                f"{what}: '{spec}' is not a dynamic dim of the model; its dynamic dims are "
                f"{sorted(self.dims)}"
                + (f" (also named {sorted(self.aliases)})" if self.aliases else "")
                + ("" if self.has_batch else " (the model has no batch axis)")
            )
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
            raise GertError(
                f"batch_dim '{batch_dim}' is not a dynamic dim name of the model's inputs; they have {names}"
            )
        return found, set(), {batch_dim}
    specs = [batch_dim] if isinstance(batch_dim, str) else list(batch_dim)
    ins, outs = set(), set()
    by_name = {t.name: ("output", t) for t in outputs}
    by_name.update({t.name: ("input", t) for t in inputs})
    for spec in specs:
        name, _, axis = str(spec).rpartition(":")
        kind, t = by_name.get(name, (None, None))
        if t is None or not axis.lstrip("-").isdigit() or not -len(t.shape) <= int(axis) < len(t.shape):
            raise GertError(
                f"batch_dim '{spec}' must be 'tensor:axis' naming an axis of an input or output; inputs "
                f"{[(i.name, i.shape) for i in inputs]}"
            )
        a = int(axis) % len(t.shape)
        if isinstance(t.shape[a], int):
            raise GertError(
                f"batch_dim '{spec}': axis {a} of {kind} '{name}' is fixed ({t.shape[a]}), not dynamic "
                f"(shape {t.shape})"
            )
        (ins if kind == "input" else outs).add((name, a))
    if not ins:
        raise GertError(f"batch_dim {specs} names no input axis")
    shapes = {t.name: t.shape for t in inputs}
    return ins, outs, {shapes[n][a] for n, a in ins if isinstance(shapes[n][a], str)}


def plan_shapes(
    io: dict,
    gears: Optional[Mapping[str, Sequence[int]]] = None,
    shape_policy: Optional[Mapping[str, str]] = None,
    pad_value: Union[float, Mapping[str, float]] = 0,
    max_batch: Optional[int] = None,
    output_dims: Optional[Mapping[str, Mapping[int, str]]] = None,
    batch_dim: Union[str, Sequence[str], None] = None,
    state: Optional[Mapping[str, str]] = None,
    *,
    model=None,
    value_dependent: Sequence[str] = (),
    rows_independent: Union[bool, Sequence[str], None] = None,
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
    _output_axes(
        plan, keys, batch_dim, batch_out, batch_names, model, value_dependent, state, output_dims, rows_independent
    )
    # policies and gears
    policy = {plan.dim_name(k, "shape_policy"): v for k, v in (shape_policy or {}).items()}
    user_gears = {plan.dim_name(k, "gears"): v for k, v in (gears or {}).items()}
    for name, dim in plan.dims.items():
        # (the policy names and the gears' sizes were checked by gert.core.load_config.LoadConfig)
        p = policy.get(name, "pad" if name == "batch" else "exact" if name in user_gears else "auto")
        dim.policy = p
        g = user_gears.get(name)
        if g is not None:
            dim.gears = tuple(sorted({int(x) for x in g}))
        elif name == "batch" and p == "pad":
            top = max_batch or DEFAULT_BATCH_GEARS[-1]
            dim.gears = tuple(x for x in DEFAULT_BATCH_GEARS if x < top) + (top,)
        elif p == "pad":
            raise GertError(f"dim '{name}' uses policy 'pad' but has no gears; give gears={{'{name}': [...]}}")
    _unsplit_policy(plan, "batch" in policy, "batch" in user_gears)
    if model is not None:
        _padded_dims_placed(plan, model)
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


def _output_axes(
    plan: ShapePlan,
    keys: dict,
    batch_dim,
    batch_out: set,
    batch_names: set,
    model,
    value_dependent: Sequence[str],
    state,
    output_dims,
    rows_independent,
) -> None:
    """plan.output_axes ({(output, axis): dim}) and plan.unsplit. With the model: the batch axis of each output and
    whether its rows are independent come from the row proof (gert.core.row_proof), the other dims' axes from shape
    inference; ``output_dims`` adds to or corrects what they found, ``rows_independent`` declares outputs whose rows
    the user knows to be independent."""
    inputs, outputs = plan.inputs, plan.outputs
    names = [t.name for t in outputs]
    declared = _declared(rows_independent, names)
    mixing: dict = {}
    if model is not None:
        from gert.core.onnx_io import output_dims as infer_output_dims
        from gert.core import row_proof

        inferred = infer_output_dims(model, plan.input_axes)
        proof = row_proof.prove(model, plan.input_axes) if plan.batch is not None else {}
        for t in outputs:
            dims = inferred.get(t.name)
            dims = dims if dims is not None and len(dims) == len(t.shape) else ()
            unplaced = [a for a, d in enumerate(dims) if d is None] if dims else list(range(len(t.shape)))
            if unplaced:
                plan.unplaced[t.name] = unplaced
            for axis, d in enumerate(dims):
                if isinstance(d, str) and d != "batch":
                    plan.output_axes[(t.name, axis)] = d
            p = proof.get(t.name)
            if p is None:
                continue
            if p.axis is not None:
                plan.output_axes[(t.name, p.axis)] = "batch"
            elif t.name in declared and dims.count("batch") == 1:  # the user's word, inference's axis
                plan.output_axes[(t.name, dims.index("batch"))] = "batch"
            if not p.independent:
                mixing[t.name] = p.reason
        for n, a in batch_out:  # batch_dim names an output axis: the user's word, as output_dims
            _place(plan, n, a, "batch")
    else:  # by the names the file declares
        in_names = {k for t in inputs for k in keys[t.name] if isinstance(k, str)}
        for t in outputs:
            for axis, d in enumerate(t.shape):
                if isinstance(d, int):
                    continue
                if (
                    (batch_dim is None and axis == 0 and plan.has_batch)
                    or (t.name, axis) in batch_out
                    or d in batch_names
                ):
                    plan.output_axes[(t.name, axis)] = "batch"
                elif isinstance(d, str) and d in in_names and d in plan.dims:
                    plan.output_axes[(t.name, axis)] = d
    for in_name, out_name in (
        state.items() if isinstance(state, Mapping) else ()
    ):  # a state output carries its state input's dims
        t = next((t for t in inputs if t.name == in_name), None)
        if t is not None and out_name in names:
            for axis in range(len(t.shape)):
                if (in_name, axis) in plan.input_axes:
                    plan.output_axes[(out_name, axis)] = plan.input_axes[(in_name, axis)]
    for out_name, mapping in (output_dims or {}).items():
        if out_name not in names:
            raise GertError(f"output_dims names '{out_name}', which is not a model output; outputs: {names}")
        if not mapping:  # {}: the output carries no dim of the inputs
            for key in [k for k in plan.output_axes if k[0] == out_name]:
                del plan.output_axes[key]
        if not mapping:
            plan.unplaced.pop(out_name, None)
        for axis, dim_name in mapping.items():  # merged with what the proof and inference found
            if dim_name is None:  # the user's word: this axis carries no dim (returned at the size it runs at)
                plan.output_axes.pop((out_name, int(axis)), None)
            else:
                _place(plan, out_name, int(axis), plan.dim_name(dim_name, f"output_dims['{out_name}'][{axis}]"))
            left = [a for a in plan.unplaced.pop(out_name, ()) if a != int(axis)]
            if left:
                plan.unplaced[out_name] = left
    plan.value_dependent = tuple(value_dependent)
    if plan.batch is None:
        return
    for t in outputs:
        axes = [a for (n, a), d in plan.output_axes.items() if n == t.name and d == "batch"]
        if len(axes) > 1:  # [N, N]: one request's rows are not one slice
            mixing.setdefault(t.name, f"it carries the batch on axes {sorted(axes)}")
        elif t.name in declared:
            mixing.pop(t.name, None)
            if not axes and model is not None and t.name in _batched(model, plan):
                raise GertError(
                    f"rows_independent declares output '{t.name}', but no axis of it is known to carry "
                    f"the batch; name it with output_dims={{'{t.name}': {{AXIS: 'batch'}}}}"
                )
    if model is None:
        carried = {n for (n, a), d in plan.output_axes.items() if d == "batch"}
        mixing = {t.name: "it does not carry the batch" for t in outputs if t.name not in carried}
    plan.mixing = mixing
    plan.unsplit = tuple(n for n in names if n in mixing)


def _place(plan: ShapePlan, output: str, axis: int, dim: str) -> None:
    """Output axis ``axis`` carries ``dim``; placing the batch moves it there from any other axis."""
    if dim == "batch":
        for key in [k for k, d in plan.output_axes.items() if k[0] == output and d == "batch"]:
            del plan.output_axes[key]
    plan.output_axes[(output, axis)] = dim


def _declared(rows_independent, names: list) -> set:
    """The outputs ``rows_independent`` declares (True: all of them)."""
    if rows_independent is None or rows_independent is False:
        return set()
    if rows_independent is True:
        return set(names)
    if isinstance(rows_independent, str):
        rows_independent = [rows_independent]
    declared = set(rows_independent)
    unknown = sorted(declared - set(names))
    if unknown:
        raise GertError(f"rows_independent names {unknown}, which are not model outputs; outputs: {names}")
    return declared


def _batched(model, plan: ShapePlan) -> set:
    from gert.core.onnx_io import depends_on

    return depends_on(model, {n for n, _ in plan.batch.axes})


def _padded_dims_placed(plan: ShapePlan, model) -> None:
    """A non-batch dim padded to its gears is sliced back off every output axis that carries it: an output computed
    from it with an axis whose size neither inference nor the probe could tell would keep the padding (a Conv's
    strided length, a value-dependent count), so 'pad' is refused there, naming the output and the axes."""
    from gert.core.onnx_io import depends_on

    for name, dim in plan.dims.items():
        if name == "batch" or dim.policy != "pad":
            continue
        _padded_alike(plan, model, name)
        reached = depends_on(model, {n for n, _ in dim.axes})
        for t in plan.outputs:
            axes = plan.unplaced.get(t.name)
            if axes and t.name in reached:
                raise GertError(
                    f"shape_policy '{name}': 'pad': output '{t.name}' is computed from dim '{name}', but "
                    f"the size of its axes {axes} cannot be told from the inputs' sizes, so the padding "
                    f"could not be sliced off it; use 'exact' or 'auto' for '{name}', name the axis "
                    f"with output_dims={{'{t.name}': {{{axes[0]}: '{name}'}}}} if it follows '{name}', or "
                    f"{{{axes[0]}: None}} to take that axis at its padded run size"
                )


def _padded_alike(plan: ShapePlan, model, name: str) -> None:
    """A padded dim that the model ties to another dim (two unnamed dims an Add or a Mul makes equal) must be padded
    alike, or the padded input no longer fits the other: the shapes traced with the dims padded alike at one size and
    the others at another must fit where they fit at one size for all (ShapeError otherwise: refused, naming them)."""
    from gert.core import shape_infer

    dim = plan.dims[name]
    alike = {n for n, d in plan.dims.items() if n != "batch" and d.policy == "pad" and d.gears == dim.gears}

    def fits(size_of) -> bool:
        dims = {
            t.name: [
                size_of(plan.input_axes[(t.name, a)]) if (t.name, a) in plan.input_axes else d
                for a, d in enumerate(t.shape)
            ]
            for t in plan.inputs
        }
        try:
            shape_infer.trace(model, dims)
        except shape_infer.ShapeError:
            return False
        except Exception:  # noqa: BLE001 - sizes the fold or inference cannot take: nothing learnt
            return True
        return True

    for base in (5, 7, 12):
        if not fits(lambda d: 3 if d == "batch" else base):
            continue
        if not fits(lambda d: 3 if d == "batch" else base + 1 if d in alike else base):
            others = sorted(n for n in plan.dims if n != "batch" and n not in alike)
            raise GertError(
                f"shape_policy '{name}': 'pad': the model needs dim '{name}' to equal one of {others} "
                f"(its shapes do not fit when they differ), so padding '{name}' alone would break a good "
                f"request; give them the same policy and gears, or use 'exact' or 'auto' for '{name}'"
            )
        return


def _unsplit_policy(plan: ShapePlan, policy_given: bool, gears_given: bool) -> None:
    """A model with outputs whose rows are not proved independent (plan.unsplit) never has filler rows added to a
    request, nor its rows merged or split: its batch defaults to ``exact``, and ``pad`` is refused."""
    batch = plan.batch
    if batch is None or not plan.unsplit:
        return
    name = plan.unsplit[0]
    if not policy_given:
        batch.policy = "exact"
        if not gears_given:
            batch.gears = ()
        import warnings

        warnings.warn(
            f"gert.load: requests of this model run alone on the batch axis (never padded, merged or "
            f"split): the rows of output '{name}' are not proved independent: {plan.mixing.get(name, '')}; "
            f"declare rows_independent=['{name}'] if each of its rows depends on the same input row alone",
            RowsNotIndependent,
            stacklevel=7,  # the caller of gert.load (through plan_shapes, gert.core.load_analysis, Model)
        )
        return
    if batch.policy == "pad":
        raise GertError(
            f"shape_policy batch='pad': the rows of output '{name}' are not proved independent "
            f"({plan.mixing.get(name, '')}), so filler rows or another caller's rows could change its "
            f"values; use 'exact' (the default for such models), or declare rows_independent="
            f"['{name}'] if each of its rows depends on the same input row alone"
        )


def warmup_keys(
    plan: ShapePlan, sizes: Optional[Mapping[str, Sequence[int]]] = None, fallback_key: Optional[tuple] = None
) -> list:
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
