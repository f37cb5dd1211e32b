"""Row independence, proved per output at load: each row of an output along the batch axis is a function of the same
row of each batched input alone, and the batch lands on one known axis.

gert may pad a batch with filler rows, merge callers' rows into one run and split a batch over streams only where
that holds (docs/architecture.md, "Rows"). Carrying the batch's *size* (what shape inference shows) is not enough:
Softmax over the batch axis, ``x - ReduceMean(x, axis 0)`` or ``Range(0, Shape(x)[0])`` keep the size and mix rows.

The proof is a forward pass over the graph, one rule per operator. Each tensor is one of:

- free (not in the state): computed from no batched input, the same for every row and every batch;
- ``Batched(axis)``: its batch axis is ``axis``, and row i depends on row i of the batched inputs alone;
- ``Sized``: its value depends on the batch's size only (``Shape(x)``, a count): fine as a shape operand of a layout
  op whose result the traces check, wrong as data beside rows (a row index, ``x * N``);
- ``Mixed``: rows are mixed (or nothing proves they are not); it names the node that decided it.

Layout operators (Reshape, Flatten, Expand, Tile, Slice, Pad, Resize) are checked against the graph's shapes traced
at two batch sizes (gert.core.shape_infer.trace, GE's compile-time inference, at batch 3 and 5): the batch must
land on exactly one axis with the same rows before and after it. An operator without a rule, control flow and
custom domains are Mixed when a batched tensor reaches them: unknown means not independent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import numpy as np
import onnx

from gert.core import shape_infer
from gert.core.onnx_io import all_nodes

_B1, _B2 = 3, 5  # the two batch sizes the shapes are traced at
_BASES = (64, 48, 32, 96, 128, 16, 224, 320)  # a non-batch dynamic dim's size in the traces, first that fits


@dataclass(frozen=True)
class Batched:
    """Row i of the tensor along ``axis`` depends on row i of the batched inputs alone."""

    axis: int


@dataclass(frozen=True)
class Sized:
    """The tensor's value depends on the batch's size (not on its rows): all of it (``at`` None), or, for a 1-D
    shape vector (``Shape(x)`` and slices of it), only the elements at the positions ``at``."""

    node: str
    at: Optional[tuple] = None


@dataclass(frozen=True)
class Mixed:
    """Rows are mixed, or no rule proves they are not: ``node`` decided it, ``why`` says how."""

    node: str
    why: str


@dataclass(frozen=True)
class OutputRows:
    """What the proof says of one graph output: its batch axis (None: it has none) and whether each of its rows is
    a function of the same row of the inputs alone (True too for an output no batched input reaches)."""

    name: str
    axis: Optional[int]
    independent: bool
    reason: str = ""


def prove(model: onnx.ModelProto, input_axes: Mapping[tuple, str]) -> dict:
    """Per graph output an OutputRows, for the batch axes in ``input_axes`` ({(input, axis): dim name}, the batch's
    dim named "batch")."""
    batch = {name: axis for (name, axis), dim in input_axes.items() if dim == "batch"}
    walk = _Walk(model, _traces(model, input_axes), _ranks(model))
    for name, axis in batch.items():
        walk.state[name] = Batched(axis)
    for node in model.graph.node:
        walk.node(node)
    out = {}
    for value in model.graph.output:
        s = walk.state.get(value.name)
        if s is None:
            out[value.name] = OutputRows(value.name, None, True)
        elif isinstance(s, Batched):
            out[value.name] = OutputRows(value.name, s.axis, True)
        elif isinstance(s, Sized):
            out[value.name] = OutputRows(
                value.name, None, False, f"node {s.node} computes it from the batch's size, not from its rows"
            )
        else:
            out[value.name] = OutputRows(value.name, None, False, f"node {s.node}: {s.why}")
    return out


def _traces(model: onnx.ModelProto, input_axes: Mapping[tuple, str]) -> Optional[tuple]:
    """The graph's shapes and folded values at batch 3 and batch 5 (other dynamic dims at the first base size that
    fits the model), or None when no base fits."""
    dims_of = {}
    for value in model.graph.input:
        t = value.type.tensor_type
        if value.type.WhichOneof("value") != "tensor_type" or not t.HasField("shape"):
            continue
        dims_of[value.name] = [
            (input_axes.get((value.name, a)), d.dim_value if d.HasField("dim_value") else None)
            for a, d in enumerate(t.shape.dim)
        ]

    def at(batch: int, base: int):
        dims = {
            n: [batch if dim == "batch" else base if dim is not None else fixed for dim, fixed in axes]
            for n, axes in dims_of.items()
        }
        try:
            return shape_infer.trace(model, dims)
        except Exception:  # noqa: BLE001 - these sizes do not fit the model
            return None

    for base in _BASES:
        first = at(_B1, base)
        if first is not None:
            second = at(_B2, base)
            return (first, second) if second is not None else None
    return None


def _ranks(model: onnx.ModelProto) -> dict:
    """The rank of every tensor ONNX's own inference knows, subgraphs included: what the rules read where the traces
    have no shapes (an If's branches, sizes no base fits)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference failed as a whole: ranks from the traces only
        return {}
    out: dict = {}

    def read(g: onnx.GraphProto) -> None:
        for v in list(g.input) + list(g.output) + list(g.value_info):
            t = v.type.tensor_type if v.type.WhichOneof("value") == "tensor_type" else None
            if t is not None and t.HasField("shape"):
                out.setdefault(v.name, len(t.shape.dim))
        for i in g.initializer:
            out.setdefault(i.name, len(i.dims))
        for n in g.node:
            for a in n.attribute:
                for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                    read(sub)

    read(inferred.graph)
    return out


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


class _Walk:
    """The forward pass: ``state`` per tensor name (absent: free)."""

    def __init__(self, model: onnx.ModelProto, traces: Optional[tuple], ranks: dict):
        self.model = model
        self.state: dict = {}
        self.traces = traces
        self.ranks = ranks
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)

    def branch(self) -> "_Walk":
        """A walk of a subgraph: it sees the states of the names outside it."""
        sub = _Walk(self.model, self.traces, self.ranks)
        sub.state = dict(self.state)
        return sub

    # ---- what the traces know -----------------------------------------------------------------------------------
    def shapes(self, name: str) -> Optional[tuple]:
        """(shape at batch 3, shape at batch 5) of ``name``, both fully known, or None."""
        if self.traces is None:
            return None
        a, b = (t.shape(name) for t in self.traces)
        return (a, b) if a is not None and b is not None and len(a) == len(b) else None

    def rank(self, name: str) -> Optional[int]:
        d = self.traces[0].dims.get(name) if self.traces is not None else None
        return len(d) if d is not None else self.ranks.get(name)

    def const(self, name: str) -> Optional[np.ndarray]:
        """The value of ``name`` when it is the same at both batch sizes."""
        if not name or self.traces is None:
            return None
        a, b = (t.values.get(name) for t in self.traces)
        if a is None or b is None or a.shape != b.shape or not np.array_equal(a, b):
            return None
        return a

    def batch_axes(self, name: str) -> Optional[list]:
        """The axes of ``name`` whose size differs between the traces, None when its shapes are not known."""
        s = self.shapes(name)
        return None if s is None else [k for k, (x, y) in enumerate(zip(*s)) if x != y]

    def lands_on(self, name: str, axis: int) -> Optional[str]:
        """None when ``name`` carries the batch on ``axis`` and nowhere else (or its shapes are not known), else why
        not."""
        s = self.shapes(name)
        if s is None:
            return None
        moved = [k for k, (x, y) in enumerate(zip(*s)) if x != y]
        if moved == [axis] and s[0][axis] == _B1 and s[1][axis] == _B2:
            return None
        return f"the batch lands on axes {moved} of '{name}' (sizes {s[0]} at batch {_B1}, {s[1]} at {_B2})"

    # ---- one node -------------------------------------------------------------------------------------------------
    def node(self, node: onnx.NodeProto) -> None:
        label = f"'{node.name}' ({node.op_type})" if node.name else f"{node.op_type} -> {list(node.output)}"
        reads = [i for i in node.input if i]
        for a in node.attribute:  # a subgraph reads outer names too
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                reads += [i for n in all_nodes(g) for i in n.input if i]
        states = [self.state.get(i) for i in reads]
        if all(s is None for s in states):
            return  # free
        mixed = next((s for s in states if isinstance(s, Mixed)), None)
        if mixed is not None:
            result = [mixed] * len(node.output)
        elif len(reads) != len([i for i in node.input if i]) and node.op_type != "If":
            result = [Mixed(label, f"control flow ({node.op_type}) over the batch")] * len(node.output)
        elif not any(isinstance(s, Batched) for s in states):
            result = [self._sized(node, label)] + [Sized(label)] * (len(node.output) - 1)  # from the batch's size
            if (
                node.op_type == "ConstantOfShape"
                or node.op_type in ("Expand", "Tile")
                and self.state.get(node.input[0]) is None
            ):
                result = [self._uniform(node, label)]
        else:
            rule = _RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
            if rule is None:
                result = [
                    Mixed(label, f"no row rule for {node.domain + '.' if node.domain else ''}{node.op_type}")
                ] * len(node.output)
            else:
                try:
                    got = rule(self, node, label)
                except _Refuse as e:
                    got = Mixed(label, str(e))
                result = got if isinstance(got, list) else [got] * len(node.output)
        for name, s in zip(node.output, result):
            if not name:
                continue
            if isinstance(s, Batched):
                why = self.lands_on(name, s.axis)
                if why is not None:
                    s = Mixed(label, why)
            self.state[name] = s

    def _sized(self, node: onnx.NodeProto, label: str):
        """A node computed from the batch's size and free values: which elements of its output carry the size.

        Proved by following the batch's position through a shape vector (Shape, Gather, Slice, Concat, Cast,
        Identity, Squeeze, Unsqueeze with free constant operands); None (free) when no element does: ``Shape(x)[1:]``
        or ``Shape(x)[2]`` is the same for every batch. Anything else is Sized as a whole. (Equal values at the two
        traced batch sizes prove nothing: ``Min(N, 3)`` is 3 at batch 3 and 5 and 1 at batch 1.)"""
        whole = Sized(label)
        data = self.state.get(node.input[0]) if node.input else None
        others = [self.state.get(i) for i in node.input[1:] if i]
        if not isinstance(data, Sized) or any(o is not None for o in others) or node.domain not in ("", "ai.onnx"):
            return whole
        if data.at is None:
            if node.op_type == "Unsqueeze" and self.rank(node.input[0]) == 0:
                return Sized(label, (0,))
            return Sized(label) if node.op_type in ("Cast", "Identity", "Squeeze", "Unsqueeze") else whole
        length = self._length(node.input[0])
        if node.op_type in ("Cast", "Identity") or (node.op_type == "Unsqueeze" and length is None):
            return Sized(label, data.at)
        if length is None:
            return whole
        picked = self._picked(node, length)
        if picked is None:
            return whole
        at = tuple(k for k, i in enumerate(picked) if i in data.at)
        if not at:
            return None
        if node.op_type == "Gather" and self.rank(node.output[0]) == 0:
            return Sized(label)
        return Sized(label, at)

    def _length(self, name: str) -> Optional[int]:
        """The length of the 1-D vector ``name``, the same at both traces; None when not known."""
        s = self.shapes(name)
        return s[0][0] if s is not None and len(s[0]) == 1 and s[0] == s[1] else None

    def _picked(self, node: onnx.NodeProto, length: int) -> Optional[list]:
        """For each element of the output of a Gather / Slice / Concat / Squeeze / Unsqueeze over a 1-D vector of
        ``length`` elements: the input element it is (Concat: of its first input; others' elements are free, -1)."""
        consts = [self.const(i) if i else None for i in node.input]
        if node.op_type == "Gather" and int(_attr(node, "axis", 0)) == 0 and consts[1] is not None:
            idx = np.asarray(consts[1]).reshape(-1).astype(np.int64)
            if np.any(idx < -length) or np.any(idx >= length):
                return None
            return [int(i) % length for i in idx]
        if node.op_type == "Slice" and all(c is not None for c in consts[1:]):
            starts, ends = consts[1], consts[2]
            axes = consts[3] if len(consts) > 3 else np.array([0])
            steps = consts[4] if len(consts) > 4 else np.array([1])
            if np.asarray(axes).reshape(-1).tolist() not in ([0], [-1]) or len(np.asarray(starts).reshape(-1)) != 1:
                return None
            start, end = int(np.asarray(starts).reshape(-1)[0]), int(np.asarray(ends).reshape(-1)[0])
            step = int(np.asarray(steps).reshape(-1)[0])
            return list(range(length))[slice(*slice(start, end, step).indices(length))] if step != 0 else None
        if node.op_type == "Concat" and len(node.input) >= 1:
            rest = [n for n in (self._length(i) for i in node.input[1:]) if n is not None]
            if len(rest) != len(node.input) - 1:
                return None
            return list(range(length)) + [-1] * sum(rest)
        if node.op_type in ("Squeeze", "Unsqueeze") and length == 1:
            return [0]
        return None

    def _uniform(self, node: onnx.NodeProto, label: str):
        """ConstantOfShape / Expand / Tile of a free tensor to a shape with the batch's size: every row the same."""
        moved = self.batch_axes(node.output[0])
        if moved == []:
            return None
        if moved is None or len(moved) != 1:
            return Mixed(label, "a tensor shaped by the batch's size on several axes")
        axis = moved[0]
        out = self.shapes(node.output[0])
        if out[0][axis] != _B1 or out[1][axis] != _B2:
            return Mixed(label, "a tensor shaped by a function of the batch's size")
        if node.op_type != "ConstantOfShape":
            src = self.shapes(node.input[0])
            k = axis - (len(out[0]) - len(src[0])) if src is not None else -1
            if src is None or (k >= 0 and src[0][k] != 1):
                return Mixed(label, "a free tensor repeated along the batch")
        return Batched(axis)

    # ---- helpers for the rules --------------------------------------------------------------------------------------
    def data(self, node: onnx.NodeProto, positions: tuple, label: str) -> list:
        """The states of the inputs at ``positions`` (absent inputs left out); a Sized one beside rows is refused."""
        out = []
        for k in positions:
            if k < len(node.input) and node.input[k]:
                s = self.state.get(node.input[k])
                if isinstance(s, Sized):
                    raise _Refuse(f"input '{node.input[k]}' is computed from the batch's size and used as data")
                out.append((node.input[k], s))
        return out

    def only_first(self, node: onnx.NodeProto, label: str) -> int:
        """The batch axis of input 0; every other input must be free (parameters, shape operands)."""
        s = self.state.get(node.input[0])
        if not isinstance(s, Batched):
            raise _Refuse(f"input '{node.input[0]}' is not batched but another input is")
        for i in node.input[1:]:
            if i and isinstance(self.state.get(i), Batched):
                raise _Refuse(f"input '{i}' (a parameter of {node.op_type}) is batched")
        return s.axis

    def shape_operands_ok(self, node: onnx.NodeProto, positions: tuple) -> None:
        for k in positions:
            if k < len(node.input) and node.input[k] and isinstance(self.state.get(node.input[k]), Batched):
                raise _Refuse(f"shape operand '{node.input[k]}' is computed from the rows' values")

    def axes_value(self, node: onnx.NodeProto, position: int, attr: str = "axes") -> Optional[list]:
        """An axes operand: the attribute (older opsets) or a constant input; None when not given."""
        v = _attr(node, attr)
        if v is not None:
            return [int(x) for x in np.atleast_1d(v)]
        if position < len(node.input) and node.input[position]:
            c = self.const(node.input[position])
            if c is None:
                raise _Refuse(f"its {attr} ('{node.input[position]}') are not constant")
            return [int(x) for x in np.atleast_1d(c)]
        return None

    def need_rank(self, name: str) -> int:
        r = self.rank(name)
        if r is None:
            raise _Refuse(f"the rank of '{name}' is not known")
        return r


class _Refuse(Exception):
    """A rule's finding: the rows are mixed (the message says how)."""


# ---- the rules: (walk, node, label) -> Batched / Mixed for every output, or a list per output ------------------------


def _elementwise(w: _Walk, node: onnx.NodeProto, label: str):
    """Broadcasting ops: the batched inputs' axes align on one output axis; a free input there has size 1."""
    ins = w.data(node, tuple(range(len(node.input))), label)
    ranks = {n: w.need_rank(n) for n, _ in ins}
    out_rank = max(ranks.values())
    axis = None
    for n, s in ins:
        if isinstance(s, Batched):
            a = s.axis + out_rank - ranks[n]
            if axis is not None and a != axis:
                raise _Refuse("its inputs carry the batch on different axes")
            axis = a
    for n, s in ins:
        if s is None:
            k = axis - (out_rank - ranks[n])
            if k >= 0:
                shp = w.shapes(n)
                if shp is None or shp[0][k] != 1 or shp[1][k] != 1:
                    raise _Refuse(f"input '{n}' has its own values along the batch axis (broadcast over rows)")
    return Batched(axis)


def _along(mixing: Callable[[_Walk, onnx.NodeProto, int], set]):
    """Ops on input 0 that combine values along some axes (``mixing``: those axes, and axes whose positions take
    their own parameters): the batch must not be one of them."""

    def rule(w: _Walk, node: onnx.NodeProto, label: str):
        a = w.only_first(node, label)
        w.data(node, (0,), label)
        r = w.need_rank(node.input[0])
        if a in {m % r for m in mixing(w, node, r)}:
            raise _Refuse(f"it combines values along the batch axis {a}")
        return Batched(a)

    return rule


def _softmax_axes(w: _Walk, node: onnx.NodeProto, r: int) -> set:
    axis = _attr(node, "axis", -1 if w.opset >= 13 else 1) % r
    return {axis} if w.opset >= 13 or node.op_type not in ("Softmax", "LogSoftmax", "Hardmax") else set(range(axis, r))


def _cumsum_axes(w: _Walk, node: onnx.NodeProto, r: int) -> set:
    c = w.const(node.input[1])
    if c is None:
        raise _Refuse("its axis is not constant")
    return {int(np.asarray(c).reshape(-1)[0])}


def _layernorm_axes(w: _Walk, node: onnx.NodeProto, r: int) -> set:
    return set(range(_attr(node, "axis", -1) % r, r))


def _batchnorm_axes(w: _Walk, node: onnx.NodeProto, r: int) -> set:
    if _attr(node, "training_mode", 0):
        raise _Refuse("BatchNormalization in training mode takes its statistics over the batch")
    return {1}  # each channel its own scale and mean


def _mvn_axes(w: _Walk, node: onnx.NodeProto, r: int) -> set:
    return set(_attr(node, "axes", [0, 2, 3]))


def _first_only(w: _Walk, node: onnx.NodeProto, r: int) -> set:
    """Conv-like ops: the batch must be axis 0 (they combine channels and space)."""
    return set(range(1, r))


def _pool_axes(w: _Walk, node: onnx.NodeProto, r: int) -> set:
    return set(range(2, r))


def _reduce(w: _Walk, node: onnx.NodeProto, label: str):
    a = w.only_first(node, label)
    r = w.need_rank(node.input[0])
    new_style = node.op_type == "ReduceSum" and w.opset >= 13 or w.opset >= 18
    axes = w.axes_value(node, 1) if new_style else _attr(node, "axes")
    if axes is None:
        if _attr(node, "noop_with_empty_axes", 0):
            return Batched(a)
        raise _Refuse("it reduces over every axis, the batch's too")
    axes = {x % r for x in axes}
    if a in axes:
        raise _Refuse(f"it reduces over the batch axis {a}")
    return Batched(a if _attr(node, "keepdims", 1) else a - sum(1 for x in axes if x < a))


def _arg(w: _Walk, node: onnx.NodeProto, label: str):
    a = w.only_first(node, label)
    r = w.need_rank(node.input[0])
    axis = _attr(node, "axis", 0) % r
    if axis == a:
        raise _Refuse(f"it compares values along the batch axis {a}")
    return Batched(a if _attr(node, "keepdims", 1) else a - (axis < a))


def _topk(w: _Walk, node: onnx.NodeProto, label: str):
    a = w.only_first(node, label)
    if len(node.input) > 1 and node.input[1] and w.state.get(node.input[1]) is not None:
        raise _Refuse("its k is computed from the batch")
    axis = _attr(node, "axis", -1) % w.need_rank(node.input[0])
    if axis == a:
        raise _Refuse(f"it ranks values along the batch axis {a}")
    return Batched(a)


def _matmul(w: _Walk, node: onnx.NodeProto, label: str):
    (na, sa), (nb, sb) = w.data(node, (0, 1), label)[:2]
    if len(node.input) > 2:  # MatMulInteger's zero points: one per row would be positional
        for z in node.input[2:]:
            shp = w.shapes(z) if z else None
            if z and (w.state.get(z) is not None or shp is None or math.prod(shp[0]) != 1):
                raise _Refuse(f"zero point '{z}' is not one value")
    ra, rb = w.need_rank(na), w.need_rank(nb)
    if ra == 1 and isinstance(sa, Batched) or rb == 1 and isinstance(sb, Batched):
        raise _Refuse("it contracts the batch axis")
    out = max(ra, rb, 2)
    axes = []
    if isinstance(sa, Batched):
        if sa.axis == ra - 1:
            raise _Refuse("it contracts the batch axis")
        axes.append(out - 2 if sa.axis == ra - 2 else sa.axis + out - ra)
    if isinstance(sb, Batched):
        if sb.axis == rb - 2:
            raise _Refuse("it contracts the batch axis")
        axes.append(out - 1 if sb.axis == rb - 1 else sb.axis + out - rb)
    if len(axes) == 2 and (axes[0] != axes[1] or axes[0] >= out - 2):
        raise _Refuse("the batch lands on two axes (rows times rows)")
    axis = axes[0]
    if axis < out - 2:  # a broadcast batch dim: the free operand must have size 1 there
        for n, s, r in ((na, sa, ra), (nb, sb, rb)):
            k = axis - (out - r)
            if s is None and k >= 0 and r >= 2:
                shp = w.shapes(n)
                if shp is None or shp[0][k] != 1:
                    raise _Refuse(f"operand '{n}' has its own values along the batch axis")
    return Batched(axis)


def _gemm(w: _Walk, node: onnx.NodeProto, label: str):
    ins = dict(w.data(node, (0, 1, 2), label))
    sa, sb = ins.get(node.input[0]), ins.get(node.input[1])
    ta, tb = _attr(node, "transA", 0), _attr(node, "transB", 0)
    axes = []
    if isinstance(sa, Batched):
        if sa.axis != (1 if ta else 0):
            raise _Refuse("it contracts the batch axis")
        axes.append(0)
    if isinstance(sb, Batched):
        if sb.axis != (0 if tb else 1):
            raise _Refuse("it contracts the batch axis")
        axes.append(1)
    if len(axes) != 1:
        raise _Refuse("the batch lands on two axes (rows times rows)" if axes else "only its bias is batched")
    if len(node.input) > 2 and node.input[2]:
        c = node.input[2]
        sc, rc = ins.get(c), w.need_rank(c)
        k = axes[0] - (2 - rc)
        if isinstance(sc, Batched) and sc.axis != k:
            raise _Refuse("its bias carries the batch on another axis")
        if sc is None and k >= 0:
            shp = w.shapes(c)
            if shp is None or shp[0][k] != 1:
                raise _Refuse(f"bias '{c}' has its own values along the batch axis")
    return Batched(axes[0])


def _einsum(w: _Walk, node: onnx.NodeProto, label: str):
    eq = _attr(node, "equation").decode() if isinstance(_attr(node, "equation"), bytes) else _attr(node, "equation")
    eq = eq.replace(" ", "")
    if "..." in eq:
        raise _Refuse("an equation with '...' has no rule")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if not _:
        letters = "".join(terms)
        rhs = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    ins = w.data(node, tuple(range(len(node.input))), label)
    letter = None
    for (n, s), term in zip(ins, terms):
        if isinstance(s, Batched):
            c = term[s.axis]
            if term.count(c) > 1 or letter not in (None, c):
                raise _Refuse("the batch is on two labels")
            letter = c
    for (n, s), term in zip(ins, terms):
        if s is None and letter in term:
            raise _Refuse(f"operand '{n}' has its own values along the batch label")
    if letter not in rhs:
        raise _Refuse("it sums over the batch label")
    return Batched(rhs.index(letter))


def _transpose(w: _Walk, node: onnx.NodeProto, label: str):
    a = w.only_first(node, label)
    perm = _attr(node, "perm") or list(range(w.need_rank(node.input[0])))[::-1]
    return Batched(list(perm).index(a))


def _squeeze(w: _Walk, node: onnx.NodeProto, label: str):
    a = w.only_first(node, label)
    r = w.need_rank(node.input[0])
    axes = w.axes_value(node, 1)
    if axes is None:
        raise _Refuse("Squeeze without axes drops the batch axis of a batch of 1")
    axes = {x % r for x in axes}
    if a in axes:
        raise _Refuse("it squeezes the batch axis")
    return Batched(a - sum(1 for x in axes if x < a))


def _unsqueeze(w: _Walk, node: onnx.NodeProto, label: str):
    a = w.only_first(node, label)
    r = w.need_rank(node.input[0])
    axes = w.axes_value(node, 1)
    out = r + len(axes)
    new = {x % out for x in axes}
    kept = [k for k in range(out) if k not in new]
    return Batched(kept[a])


def _relayout(w: _Walk, node: onnx.NodeProto, label: str):
    """Reshape / Flatten: the same rows before and after, checked at both batch sizes: exactly one output axis
    follows the batch, and the sizes of what comes before and after it are kept."""
    a = w.only_first(node, label)
    w.shape_operands_ok(node, (1,))
    src, dst = w.shapes(node.input[0]), w.shapes(node.output[0])
    if src is None or dst is None:
        raise _Refuse("its shapes are not known, so nothing shows the rows stay whole")
    moved = [k for k, (x, y) in enumerate(zip(*dst)) if x != y]
    if len(moved) != 1:
        raise _Refuse(f"the batch lands on axes {moved} of its output")
    k = moved[0]
    for s, d in zip(src, dst):
        if d[k] != s[a] or math.prod(s[:a]) != math.prod(d[:k]) or math.prod(s[a + 1 :]) != math.prod(d[k + 1 :]):
            raise _Refuse(f"it moves values between rows ({s} -> {d})")
    return Batched(k)


def _keeps_batch(w: _Walk, node: onnx.NodeProto, label: str):
    """Expand / Tile / Resize / Upsample / Pad / Slice on the batched data: the batch axis keeps its size at both
    batch sizes and its rows in place (no reversal, no shift): the operands must leave it alone."""
    a = w.only_first(node, label)
    w.shape_operands_ok(node, tuple(range(1, len(node.input))))
    r = w.need_rank(node.input[0])
    out_rank = w.need_rank(node.output[0])
    axis = a + out_rank - r  # Expand may add leading axes
    shp = w.shapes(node.output[0])
    if shp is not None and (shp[0][axis] != _B1 or shp[1][axis] != _B2):
        raise _Refuse(f"it changes the batch axis' size ({shp[0][axis]} at batch {_B1})")
    op = node.op_type
    if op == "Pad":
        pads = w.const(node.input[1]) if len(node.input) > 1 and node.input[1] else _attr(node, "pads")
        if pads is None:
            raise _Refuse("its pads are not constant")
        pads = [int(x) for x in np.asarray(pads).reshape(-1)]
        axes = w.axes_value(node, 3) or list(range(r))
        axes = [x % r for x in axes]
        if a in axes and (pads[axes.index(a)] or pads[axes.index(a) + len(axes)]):
            raise _Refuse("it pads or shifts along the batch axis")
    elif op == "Slice":
        if w.opset < 10:
            axes = _attr(node, "axes") or list(range(len(_attr(node, "starts", []))))
            steps = [1] * len(axes)
        else:
            starts_v = w.const(node.input[1])
            axes = w.axes_value(node, 3) or (list(range(len(starts_v))) if starts_v is not None else None)
            steps_v = w.const(node.input[4]) if len(node.input) > 4 and node.input[4] else None
            if axes is None or (len(node.input) > 4 and node.input[4] and steps_v is None):
                raise _Refuse("its axes or steps are not constant")
            steps = [int(x) for x in steps_v] if steps_v is not None else [1] * len(axes)
        axes = [x % r for x in axes]
        if a in axes:
            k = axes.index(a)
            if steps[k] != 1:
                raise _Refuse("it steps through the batch axis (reversed or strided rows)")
            if shp is None:  # with step 1, the batch axis' size kept at both batch sizes means every row, in order
                raise _Refuse("its output shapes are not known, so nothing shows it keeps every row")
    elif op == "Resize" and _attr(node, "coordinate_transformation_mode", b"half_pixel") in (
        b"tf_crop_and_resize",
        "tf_crop_and_resize",
    ):
        raise _Refuse("it crops by a region of interest, which can shift rows")
    elif op == "Tile":
        reps = w.const(node.input[1])
        if reps is None or int(np.asarray(reps).reshape(-1)[a]) != 1:
            raise _Refuse("it repeats along the batch axis")
    elif shp is None:
        raise _Refuse("its output shapes are not known")
    return Batched(axis)


def _split(w: _Walk, node: onnx.NodeProto, label: str):
    a = w.only_first(node, label)
    if _attr(node, "axis", 0) % w.need_rank(node.input[0]) == a:
        raise _Refuse("it splits the batch axis")
    return Batched(a)


def _concat(w: _Walk, node: onnx.NodeProto, label: str):
    ins = w.data(node, tuple(range(len(node.input))), label)
    axes = {s.axis for _, s in ins if isinstance(s, Batched)}
    if any(s is None for _, s in ins) or len(axes) != 1:
        raise _Refuse("it joins batched and unbatched tensors (or batches on different axes)")
    a = axes.pop()
    if _attr(node, "axis") % w.need_rank(node.input[0]) == a:
        raise _Refuse("it concatenates along the batch axis")
    return Batched(a)


def _gather(w: _Walk, node: onnx.NodeProto, label: str):
    (nd, sd), (ni, si) = w.data(node, (0, 1), label)[:2]
    r = w.need_rank(nd)
    axis = _attr(node, "axis", 0) % r
    if isinstance(sd, Batched) and isinstance(si, Batched):
        raise _Refuse("its indices and data are both batched (every row indexes every row)")
    if isinstance(sd, Batched):
        if sd.axis == axis:
            raise _Refuse("it indexes the batch axis")
        return Batched(sd.axis if sd.axis < axis else sd.axis + w.need_rank(ni) - 1)
    return Batched(axis + si.axis)


def _gather_elements(w: _Walk, node: onnx.NodeProto, label: str):
    (nd, sd), (ni, si) = w.data(node, (0, 1), label)[:2]
    if not (isinstance(sd, Batched) and isinstance(si, Batched) and sd.axis == si.axis):
        raise _Refuse("its data and indices do not carry the batch on one axis")
    if _attr(node, "axis", 0) % w.need_rank(nd) == sd.axis:
        raise _Refuse("it indexes along the batch axis")
    return Batched(sd.axis)


def _gather_nd(w: _Walk, node: onnx.NodeProto, label: str):
    (nd, sd), (ni, si) = w.data(node, (0, 1), label)[:2]
    if _attr(node, "batch_dims", 0) >= 1 and sd == Batched(0) and si == Batched(0):
        return Batched(0)
    raise _Refuse("it indexes the batch (batch_dims 0, or the batch not on axis 0 of both)")


def _onehot(w: _Walk, node: onnx.NodeProto, label: str):
    a = w.only_first(node, label)
    w.data(node, (0,), label)
    r = w.need_rank(node.input[0])
    axis = _attr(node, "axis", -1) % (r + 1)
    return Batched(a if a < axis else a + 1)


def _recurrent(w: _Walk, node: onnx.NodeProto, label: str):
    """RNN / GRU / LSTM: X [seq, batch, in] (layout 0) or [batch, seq, in] (layout 1); the states and
    sequence_lens carry the batch; the weights are free. Outputs Y, Y_h (and Y_c) carry it."""
    layout = _attr(node, "layout", 0)
    x_axis, state_axis = (1, 1) if layout == 0 else (0, 0)
    wants = {0: x_axis, 4: 0, 5: state_axis, 6: state_axis}
    for k, name in enumerate(node.input):
        if not name:
            continue
        s = w.state.get(name)
        if k in wants:
            if s is not None and s != Batched(wants[k]):
                raise _Refuse(f"input '{name}' is not batched on axis {wants[k]} (layout {layout})")
            if s is None and k != 0:
                raise _Refuse(f"input '{name}' is the same for every row but must have one row per batch row")
        elif s is not None:
            raise _Refuse(f"weight '{name}' is computed from the batch")
    if w.state.get(node.input[0]) is None:
        raise _Refuse("its sequence is not batched but its state is")
    return [Batched(2 if layout == 0 else 0)] + [Batched(state_axis)] * (len(node.output) - 1)


def _quantize(w: _Walk, node: onnx.NodeProto, label: str):
    a = w.only_first(node, label)
    w.data(node, (0,), label)
    r = w.need_rank(node.input[0])
    shp = w.shapes(node.input[1])
    per_axis = shp is None or math.prod(shp[0]) != 1
    if per_axis and _attr(node, "axis", 1) % r == a:
        raise _Refuse("each row along the batch axis has its own scale")
    return Batched(a)


def _reverse_sequence(w: _Walk, node: onnx.NodeProto, label: str):
    s, lens = w.state.get(node.input[0]), w.state.get(node.input[1])
    if s != Batched(_attr(node, "batch_axis", 1)) or lens != Batched(0):
        raise _Refuse("its batch_axis is not the batch, or sequence_lens is not batched")
    return s


def _maxpool(w: _Walk, node: onnx.NodeProto, label: str):
    a = _along(_pool_axes)(w, node, label)
    if len(node.output) > 1 and node.output[1]:  # indices count from the start of the whole tensor
        return [a, Mixed(label, "its indices count from the first row of the batch")]
    return a


def _layernorm(w: _Walk, node: onnx.NodeProto, label: str):
    return _along(_layernorm_axes)(w, node, label)


def _shape(w: _Walk, node: onnx.NodeProto, label: str):
    """Shape / Size of a batched tensor: the batch's size. Shape's vector carries it at the batch axis's position
    alone (free when ``start`` / ``end`` leave the batch axis out); Size as a whole."""
    s = w.state.get(node.input[0])
    rank = w.rank(node.input[0])
    if node.op_type != "Shape" or not isinstance(s, Batched) or rank is None:
        return Sized(label)
    start, end = int(_attr(node, "start", 0)), _attr(node, "end", None)
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = rank if end is None else max(0, min(rank, int(end) + rank if int(end) < 0 else int(end)))
    return Sized(label, (s.axis - start,)) if start <= s.axis < end else None


def _if(w: _Walk, node: onnx.NodeProto, label: str):
    """An If on a condition the same for every row: each output is batched where both branches' are, on one axis."""
    if w.state.get(node.input[0]) is not None:
        raise _Refuse("its condition is computed from the batch")
    found = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            sub = w.branch()
            for n in a.g.node:
                sub.node(n)
            found.append([sub.state.get(o.name) for o in a.g.output])
    out = []
    for k, (x, y) in enumerate(zip(*found)):
        if x != y or isinstance(x, Sized):
            bad = x if isinstance(x, Mixed) else y if isinstance(y, Mixed) else None
            out.append(bad or Mixed(label, f"its branches give output {k} different batch axes"))
        else:
            out.append(x)
    return out


def _dropout(w: _Walk, node: onnx.NodeProto, label: str):
    if len(node.input) > 2 and node.input[2] and (w.const(node.input[2]) is None or bool(w.const(node.input[2]))):
        raise _Refuse("dropout in training mode draws over the batch")
    return _elementwise(w, node, label) if len(node.input) == 1 else Batched(w.only_first(node, label))


_ELEMENTWISE = {
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "And",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "BitShift",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "Cast",
    "CastLike",
    "Ceil",
    "Celu",
    "Clip",
    "Cos",
    "Cosh",
    "Div",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "IsInf",
    "IsNaN",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "Max",
    "Mean",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pow",
    "PRelu",
    "Reciprocal",
    "Relu",
    "Round",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Sub",
    "Sum",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Where",
    "Xor",
    "Swish",
}
_RULES: dict = {op: _elementwise for op in _ELEMENTWISE}
_RULES.update(
    {
        "Softmax": _along(_softmax_axes),
        "LogSoftmax": _along(_softmax_axes),
        "Hardmax": _along(_softmax_axes),
        "CumSum": _along(_cumsum_axes),
        "LpNormalization": _along(lambda w, n, r: {_attr(n, "axis", -1)}),
        "LRN": _along(lambda w, n, r: {1}),
        "LayerNormalization": _layernorm,
        "MeanVarianceNormalization": _along(_mvn_axes),
        "BatchNormalization": _along(_batchnorm_axes),
        "InstanceNormalization": _along(lambda w, n, r: set(range(1, r))),
        "GroupNormalization": _along(lambda w, n, r: set(range(1, r))),
        "Conv": _along(_first_only),
        "ConvTranspose": _along(_first_only),
        "ConvInteger": _along(_first_only),
        "DepthToSpace": _along(_first_only),
        "SpaceToDepth": _along(_first_only),
        "MaxPool": _maxpool,
        "AveragePool": _along(_pool_axes),
        "LpPool": _along(_pool_axes),
        "GlobalAveragePool": _along(_pool_axes),
        "GlobalMaxPool": _along(_pool_axes),
        "GlobalLpPool": _along(_pool_axes),
        "Trilu": _along(lambda w, n, r: {r - 2, r - 1}),
        "Det": _along(lambda w, n, r: {r - 2, r - 1}),
        "ArgMax": _arg,
        "ArgMin": _arg,
        "TopK": _topk,
        "MatMul": _matmul,
        "MatMulInteger": _matmul,
        "Gemm": _gemm,
        "Einsum": _einsum,
        "Transpose": _transpose,
        "Squeeze": _squeeze,
        "Unsqueeze": _unsqueeze,
        "Reshape": _relayout,
        "Flatten": _relayout,
        "Expand": _keeps_batch,
        "Tile": _keeps_batch,
        "Pad": _keeps_batch,
        "Slice": _keeps_batch,
        "Resize": _keeps_batch,
        "Upsample": _keeps_batch,
        "Split": _split,
        "Concat": _concat,
        "Gather": _gather,
        "GatherElements": _gather_elements,
        "GatherND": _gather_nd,
        "OneHot": _onehot,
        "RNN": _recurrent,
        "GRU": _recurrent,
        "LSTM": _recurrent,
        "QuantizeLinear": _quantize,
        "DequantizeLinear": _quantize,
        "Shape": _shape,
        "Size": _shape,
        "ReverseSequence": _reverse_sequence,
        "Dropout": _dropout,
        "If": _if,
    }
)
for _op in (
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
):
    _RULES[_op] = _reduce
RULES = frozenset(_RULES)  # the operators with a row rule (docs/architecture.md lists them)
