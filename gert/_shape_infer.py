"""Compile-time shape inference for the host NPU's GE, as GE does it: never by running the model.

GE's ``InferShapeForPreprocess`` repeats InferShape, DimensionCompute (Shape/Size of known shapes), ConstantFolding
and CondRemove until nothing changes (ge-shapes-and-cache.md, A1/A3). This is the same in one pass in topological
order: each node either folds (every input is a known constant, or it is Shape/Size of a tensor whose shape is
known) or has its output types inferred by ONNX's own per-node shape inference, given the constants it reads. An
``If`` whose condition folds is replaced by its branch; otherwise both branches are inferred and their shapes merged.

The result says, per graph output, whether its shape is known from the input shapes alone. A value-dependent
operator (NonZero, NonMaxSuppression, ...) or a shape operand that comes from an input's values leaves dims
unknown: the graph is then an unknown-shape graph, whose outputs GE allocates at execution.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np
import onnx
from onnx import defs, helper, numpy_helper, shape_inference

# Constants up to this many elements are folded and handed to shape inference (shape operands are small; weights
# are never needed to know a shape).
_FOLD_ELEMENTS = 1 << 16
# Never folded: their value is not a function of their inputs.
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


class ShapeError(ValueError):
    """The input shapes do not fit the graph (an operator's shape inference refused them)."""


@dataclass
class Inferred:
    """Per graph output its shape, or None where a dim is not known from the input shapes; ``all_known``: every
    tensor of the graph (intermediates too) has a known shape, i.e. GE would compile it static."""

    output_shapes: list
    all_known: bool
    unknown: list = field(default_factory=list)  # names of tensors whose shape is not known
    output_dims: list = field(default_factory=list)  # per output: dims (int, a dim_param str, or None), or None
    output_elem: list = field(default_factory=list)  # per output: ONNX element type (0: not known)


def _known_shape(t: Optional[onnx.TypeProto]) -> Optional[tuple]:
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    dims = t.tensor_type.shape.dim
    if not all(d.HasField("dim_value") and d.dim_value >= 0 for d in dims):
        return None
    return tuple(int(d.dim_value) for d in dims)


def _partial_dims(t: Optional[onnx.TypeProto]) -> Optional[tuple]:
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    return tuple(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
                 for d in t.tensor_type.shape.dim)


def _tensor_type(elem: int, shape: Optional[Sequence[int]]) -> onnx.TypeProto:
    return helper.make_tensor_type_proto(elem, None if shape is None else list(shape))


class _Scope:
    """Types and folded values of the names visible in one graph (a branch sees its parents' names)."""

    def __init__(self, parent: Optional["_Scope"] = None) -> None:
        self.parent = parent
        self.types: dict = {}
        self.values: dict = {}       # name -> np.ndarray (folded)
        self.protos: dict = {}       # name -> TensorProto (initializers, converted on demand)

    def type(self, name: str) -> Optional[onnx.TypeProto]:
        s = self
        while s is not None:
            if name in s.types:
                return s.types[name]
            s = s.parent
        return None

    def value(self, name: str) -> Optional[np.ndarray]:
        s = self
        while s is not None:
            if name in s.values:
                return s.values[name]
            p = s.protos.get(name)
            if p is not None:
                n = int(np.prod(p.dims)) if len(p.dims) else 1
                if n > _FOLD_ELEMENTS:
                    return None
                try:
                    v = numpy_helper.to_array(p)
                except Exception:  # noqa: BLE001 - an exotic encoding: just not folded
                    return None
                s.values[name] = v
                return v
            s = s.parent
        return None

    def set_value(self, name: str, v: np.ndarray) -> None:
        self.values[name] = v
        self.types[name] = _tensor_type(helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)


class _Inferer:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.opsets = {(o.domain or ""): o.version for o in model.opset_import}
        self.opset_protos = list(model.opset_import)
        self.ir_version = model.ir_version
        self.unknown: list = []

    # ---- one graph -------------------------------------------------------------------------------------------
    def graph(self, g: onnx.GraphProto, scope: _Scope) -> None:
        for init in g.initializer:
            scope.protos[init.name] = init
            scope.types[init.name] = _tensor_type(init.data_type, list(init.dims))
        for node in g.node:
            self.node(node, scope)

    def node(self, node: onnx.NodeProto, scope: _Scope) -> None:
        op, domain = node.op_type, node.domain or ""
        if domain in ("", "ai.onnx"):
            if op == "Constant":
                return self._fold(node, scope, [])
            if op == "If":
                return self._if(node, scope)
            if op in ("Shape", "Size") and self._shape_op(node, scope):
                return None
        ins = [scope.value(i) if i else None for i in node.input]
        if op not in _NO_FOLD and all(v is not None or not i for v, i in zip(ins, node.input)) and \
                not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            if self._fold(node, scope, ins):
                return None
        self._infer(node, scope)

    def _fold(self, node: onnx.NodeProto, scope: _Scope, ins: list) -> bool:
        from onnx.reference import ReferenceEvaluator

        try:
            ev = ReferenceEvaluator(node, opsets=self.opsets)
            feeds = {i: v for i, v in zip(node.input, ins) if i}
            outs = ev.run(None, feeds)
        except Exception:  # noqa: BLE001 - not evaluable here: fall back to inference
            return False
        for name, v in zip(node.output, outs):
            if name and isinstance(v, np.ndarray):
                scope.set_value(name, v)
        return all(not n or n in scope.values for n in node.output)

    def _shape_op(self, node: onnx.NodeProto, scope: _Scope) -> bool:
        shape = _known_shape(scope.type(node.input[0]))
        if shape is None:
            return False
        if node.op_type == "Size":
            scope.set_value(node.output[0], np.array(int(np.prod(shape, dtype=np.int64)), np.int64))
            return True
        attrs = {a.name: a.i for a in node.attribute}
        rank = len(shape)
        start, end = attrs.get("start", 0), attrs.get("end", rank)
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        scope.set_value(node.output[0], np.array(shape[start:end], np.int64))
        return True

    def _infer(self, node: onnx.NodeProto, scope: _Scope) -> None:
        domain = node.domain or ""
        version = self.opsets.get(domain, self.opsets.get("ai.onnx", 1) if domain == "" else 1)
        out: dict = {}
        try:
            schema = defs.get_schema(node.op_type, version, domain)
        except Exception:  # noqa: BLE001 - an operator ONNX does not define: its outputs stay unknown
            schema = None
        try:
            if schema is None:
                raise LookupError
            types = {i: scope.type(i) for i in node.input if i and scope.type(i) is not None}
            data = {}
            for i in node.input:
                if i and i not in data:
                    v = scope.value(i)
                    if v is not None:
                        data[i] = numpy_helper.from_array(np.asarray(v), i)
            out = shape_inference.infer_node_outputs(schema, node, types, data, opset_imports=self.opset_protos,
                                                     ir_version=self.ir_version)
        except shape_inference.InferenceError as e:  # GE's InferShape fails the compile
            raise ShapeError(f"shape inference failed at node '{node.name or node.op_type}' ({node.op_type}): "
                             f"{e}") from None
        except Exception:  # noqa: BLE001 - no schema or no inference function: the outputs stay unknown
            out = {}
        for name in node.output:
            if not name:
                continue
            t = out.get(name)
            if t is not None:
                scope.types[name] = t
            if _known_shape(t) is None:
                self.unknown.append(name)

    def _if(self, node: onnx.NodeProto, scope: _Scope) -> None:
        branches = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
        cond = scope.value(node.input[0])
        if cond is not None and cond.size == 1:  # CondRemovePass: a constant condition keeps one branch
            branch = branches["then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"]
            self.graph(branch, scope)
            for name, bout in zip(node.output, branch.output):
                t = scope.type(bout.name)
                if t is not None:
                    scope.types[name] = t
                v = scope.values.get(bout.name)
                if v is not None:
                    scope.values[name] = v
                if _known_shape(t) is None and name:
                    self.unknown.append(name)
            return
        results = []
        for key in ("then_branch", "else_branch"):
            child = _Scope(scope)
            self.graph(branches[key], child)
            results.append([child.type(o.name) for o in branches[key].output])
        for name, a, b in zip(node.output, *results):
            t = _merge(a, b)
            if t is not None:
                scope.types[name] = t
            if _known_shape(t) is None and name:
                self.unknown.append(name)


def _merge(a: Optional[onnx.TypeProto], b: Optional[onnx.TypeProto]) -> Optional[onnx.TypeProto]:
    """The type of an If output from its branches' types: equal dims stay, others become unknown."""
    if a is None or b is None or not a.HasField("tensor_type") or not b.HasField("tensor_type"):
        return None
    elem = a.tensor_type.elem_type or b.tensor_type.elem_type
    sa, sb = a.tensor_type, b.tensor_type
    if not sa.HasField("shape") or not sb.HasField("shape") or len(sa.shape.dim) != len(sb.shape.dim):
        return _tensor_type(elem, None)
    dims = []
    for da, db in zip(sa.shape.dim, sb.shape.dim):
        same = da.HasField("dim_value") and db.HasField("dim_value") and da.dim_value == db.dim_value
        dims.append(int(da.dim_value) if same else None)
    return _tensor_type(elem, dims)


def infer(model, input_dims: Mapping[str, Sequence]) -> Inferred:
    """Shapes of ``model`` (serialized bytes or a ModelProto) for inputs fixed at ``input_dims`` (name -> dims; a
    str dim is symbolic, a negative or None one unknown).
    Graph outputs' declared shapes and ``value_info`` are ignored, as GE's parser ignores them (A5)."""
    m = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(bytes(model))
    inf = _Inferer(m)
    scope = _Scope()
    inits = {i.name for i in m.graph.initializer}
    for i in m.graph.input:
        if i.name in inits:
            continue
        dims = input_dims.get(i.name)
        elem = i.type.tensor_type.elem_type
        scope.types[i.name] = _tensor_type(elem, None if dims is None else [
            d if isinstance(d, str) else (int(d) if d is not None and d >= 0 else None) for d in dims])
    inf.graph(m.graph, scope)
    types = [scope.type(o.name) for o in m.graph.output]
    outs = [_known_shape(t) for t in types]
    return Inferred(outs, not inf.unknown and all(s is not None for s in outs), inf.unknown,
                    [_partial_dims(t) for t in types],
                    [t.tensor_type.elem_type if t is not None and t.HasField("tensor_type") else 0 for t in types])
