"""Compile-time shape inference for the host NPU's GE, as GE does it: never by running the model.

GE's ``InferShapeForPreprocess`` repeats InferShape, DimensionCompute (Shape/Size of known shapes), ConstantFolding
and CondRemove until nothing changes (ge-shapes-and-cache.md, A1/A3). This is the same in one pass in topological
order: each node either folds (every input is a known constant, or it is Shape/Size of a tensor whose shape is
known) or has its output types inferred, given the constants it reads: by gert's rule for its operator
(gert/core/shape_rules.py, the operators of common CNNs, checked against ONNX's), else by ONNX's own per-node shape
inference. An ``If`` whose condition folds is replaced by its branch; otherwise both branches are inferred and their
shapes merged.

``infer`` of serialized bytes reads the graph without ONNX (gert/core/wire_graph.py) and imports ``onnx`` only for a
node no rule of gert's covers, a fold numpy does not compute, or a model the wire reader leaves to ONNX: a Triton stub
serving a CNN keeps no ``onnx`` in memory (~15 MB per process; issue 41).

The result says, per graph output, whether its shape is known from the input shapes alone. A value-dependent
operator (NonZero, NonMaxSuppression, ...) or a shape operand that comes from an input's values leaves dims
unknown: the graph is then an unknown-shape graph, whose outputs GE allocates at execution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np

from gert.core import folds, shape_rules, wire_graph
from gert.core.skeleton_wire import Unsupported

# Constants up to this many elements are folded and handed to shape inference (shape operands are small; weights
# are never needed to know a shape).
_FOLD_ELEMENTS = 4096
# Constant inputs up to this many elements are handed to an operator's shape inference.
_OPERAND_ELEMENTS = 16
# What one fold may produce, in bytes (ONNX Runtime's constant folding has such a limit too, 1 GB by default): a
# fold's output is predicted by shape inference first and a larger one is not folded, only inferred. A value above
# _FOLD_ELEMENTS is never read again by a fold, so the bound loses nothing but the memory: a 207-byte model with
# Range(0, 62.5M, 1) made loading allocate 500 MB.
_FOLD_OUTPUT_BYTES = 1 << 20
# Operators whose output can be far larger than their inputs: folded only when the output size is predicted.
_GROWS = {
    "Constant",
    "Range",
    "ConstantOfShape",
    "Expand",
    "Tile",
    "Resize",
    "Upsample",
    "Pad",
    "OneHot",
    "EyeLike",
    "CenterCropPad",
    "Col2Im",
    "MatMul",
    "Gemm",
    "Einsum",
    "Gather",
    "GatherElements",
    "GatherND",
    "DFT",
    "STFT",
    "MelWeightMatrix",
    "HannWindow",
    "HammingWindow",
    "BlackmanWindow",
    "ConvTranspose",
    "MaxUnpool",
    "StringSplit",
    "TfIdfVectorizer",
    "RoiAlign",
    "MaxRoiPool",
    "AffineGrid",
    "ImageDecoder",
}
# Operators whose output has at most prod(input size + 1) elements (broadcasting, reshaping, selecting, reducing:
# the nodes of shape subgraphs): their folds are not sized by inference first while that bound is small.
_BOUNDED = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Mod",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Not",
    "Where",
    "Cast",
    "CastLike",
    "Identity",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Concat",
    "Slice",
    "Gather",
    "GatherElements",
    "Transpose",
    "Shape",
    "Size",
    "Neg",
    "Abs",
    "Floor",
    "Ceil",
    "Round",
    "Sqrt",
    "Reciprocal",
    "Sign",
    "Exp",
    "Log",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Clip",
    "ReduceProd",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceMean",
    "ArgMax",
    "ArgMin",
    "Split",
    "Unique",
    "CumSum",
    "IsNaN",
    "IsInf",
    "Softmax",
    "MatMul",
}
# Elementwise operators whose output has the (broadcast) shape and element type of their inputs.
_UNARY = {
    "Relu",
    "Sigmoid",
    "Tanh",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Softplus",
    "Softsign",
    "Neg",
    "Abs",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "Erf",
    "Sin",
    "Cos",
    "Identity",
    "Softmax",
    "LogSoftmax",
    "Mish",
    "Gelu",
    "Sign",
    "Clip",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
}  # (X, parameters...) -> X's
_BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"}
# Never folded: their value is not a function of their inputs.
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


class ShapeError(ValueError):
    """The input shapes do not fit the graph (an operator's shape inference refused them)."""


class _Refused(Exception):
    """ONNX's inference refused a node's inputs (its InferenceError)."""


@dataclass
class Inferred:
    """Per graph output its shape, or None where a dim is not known from the input shapes; ``all_known``: every
    tensor of the graph (intermediates too) has a known shape, i.e. GE would compile it static."""

    output_shapes: list
    all_known: bool
    unknown: list = field(default_factory=list)  # names of tensors whose shape is not known
    output_dims: list = field(default_factory=list)  # per output: dims (int, a dim_param str, or None), or None
    output_elem: list = field(default_factory=list)  # per output: ONNX element type (0: not known)


@dataclass(frozen=True)
class _T:
    """A tensor's type as the pass keeps it: ONNX element type and dims (int, a dim_param str, or None when not
    known), ``dims`` None for an unknown rank; ``proto`` keeps a non-tensor type (sequence, optional) as ONNX gave
    it. Plain Python: reading protobuf fields per node would cost more than the inference."""

    elem: int
    dims: Optional[tuple]
    proto: Optional[object] = None  # onnx.TypeProto

    @property
    def known(self) -> Optional[tuple]:
        """The shape if every dim is a known size."""
        d = self.dims
        return d if d is not None and all(type(x) is int for x in d) else None

    def to_proto(self):
        """The type as onnx.TypeProto (imports onnx)."""
        if self.proto is not None:
            return self.proto
        from onnx import helper

        return helper.make_tensor_type_proto(self.elem, None if self.dims is None else list(self.dims))

    @staticmethod
    def of(t) -> "_T":
        """From an onnx.TypeProto."""
        if t.WhichOneof("value") != "tensor_type":
            return _T(0, None, t)
        tt = t.tensor_type
        if not tt.HasField("shape"):
            return _T(tt.elem_type, None)
        return _T(
            tt.elem_type,
            tuple(
                int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or None)
                for d in tt.shape.dim
            ),
        )


def _known(t: Optional[_T]) -> Optional[tuple]:
    return None if t is None else t.known


class _Scope:
    """Types and folded values of the names visible in one graph (a branch sees its parents' names)."""

    def __init__(self, parent: Optional["_Scope"] = None) -> None:
        self.parent = parent
        self.types: dict = {}
        self.values: dict = {}  # name -> np.ndarray (folded)
        self.protos: dict = {}  # name -> TensorProto (initializers, converted on demand)

    def type(self, name: str) -> Optional[_T]:
        s = self
        while s is not None:
            t = s.types.get(name)
            if t is not None:
                return t
            p = s.protos.get(name)
            if p is not None:  # a constant's type, built when first asked for
                t = s.types[name] = _T(p.data_type, tuple(p.dims))
                return t
            s = s.parent
        return None

    def size(self, name: str) -> Optional[int]:
        """Element count of a constant (folded value or initializer / Constant tensor), None if not a constant."""
        s = self
        while s is not None:
            if name in s.values:
                return int(s.values[name].size)
            p = s.protos.get(name)
            if p is not None:
                return math.prod(p.dims)
            s = s.parent
        return None

    def value(self, name: str, limit: int = _FOLD_ELEMENTS) -> Optional[np.ndarray]:
        s = self
        while s is not None:
            if name in s.values:
                v = s.values[name]
                return v if v.size <= limit else None
            p = s.protos.get(name)
            if p is not None:
                if math.prod(p.dims) > limit:
                    return None
                try:
                    v = _to_array(p)
                except Exception:  # noqa: BLE001 - an exotic encoding: just not folded
                    return None
                s.values[name] = v
                return v
            s = s.parent
        return None

    def set_value(self, name: str, v: np.ndarray) -> None:
        self.values[name] = v
        self.types[name] = _T(_elem_of(v.dtype), tuple(int(d) for d in v.shape))


class _Inferer:
    def __init__(self, model, rules: bool = True) -> None:
        self.opsets = {(o.domain or ""): o.version for o in model.opset_import}
        self.opset_ids = list(model.opset_import)
        self.ir_version = model.ir_version
        self.unknown: list = []
        self.rules = rules  # False: ONNX's inference for every node (the reference the rules are tested against)

    def _onnx_inference(self, node, types: dict, data: dict) -> dict:
        """ONNX's per-node shape inference of ``node`` (types and constant operands as numpy values), imported here."""
        from onnx import defs, helper, numpy_helper, shape_inference

        domain = node.domain or ""
        version = self.opsets.get(domain, self.opsets.get("ai.onnx", 1) if domain == "" else 1)
        schema = defs.get_schema(node.op_type, version, domain)
        try:
            return shape_inference.infer_node_outputs(
                schema,
                _proto(node),
                {i: t.to_proto() for i, t in types.items()},
                {i: numpy_helper.from_array(np.asarray(v), i) for i, v in data.items()},
                opset_imports=[helper.make_opsetid(o.domain, o.version) for o in self.opset_ids],
                ir_version=self.ir_version,
            )
        except shape_inference.InferenceError as e:
            raise _Refused(str(e)) from None

    def _ruled(self, node, types: dict, value) -> Optional[list]:
        """shape_rules.output_types of ``node``, its inputs' types ``types`` ({name: _T}) and constants ``value``."""
        return shape_rules.output_types(
            node,
            [_known(types.get(i)) if i else None for i in node.input],
            [types[i].elem if i in types else 0 for i in node.input],
            value,
            self.opsets.get("", self.opsets.get("ai.onnx")),
        )

    def _rule(self, node, scope: _Scope) -> bool:
        """The node's output types by gert's rule for its operator (shape_rules), if it has one that is sure."""
        if not self.rules:
            return False
        types = {i: t for i in node.input if i for t in [scope.type(i)] if t is not None}
        out = self._ruled(node, types, lambda i, limit: scope.value(node.input[i], limit))
        if out is None:
            return False
        for name, (elem, dims) in zip(node.output, out):
            scope.types[name] = _T(elem, tuple(dims))
            if any(d is None for d in dims):
                self.unknown.append(name)
        return True

    # ---- one graph -------------------------------------------------------------------------------------------
    def graph(self, g, scope: _Scope) -> None:
        for init in g.initializer:
            scope.protos[init.name] = init
        for node in g.node:
            self.node(node, scope)

    def node(self, node, scope: _Scope) -> None:
        op, domain = node.op_type, node.domain or ""
        if domain in ("", "ai.onnx"):
            if op == "Constant":
                return self._constant(node, scope)
            if op == "If":
                return self._if(node, scope)
            if op in ("Shape", "Size") and self._shape_op(node, scope):
                return None
        sizes = [scope.size(i) if i else 0 for i in node.input]
        if (
            op not in _NO_FOLD
            and all(n is not None and n <= _FOLD_ELEMENTS for n in sizes)
            and not any(a.type in (wire_graph.GRAPH, wire_graph.GRAPHS) for a in node.attribute)
        ):
            ins = [scope.value(i) if i else None for i in node.input]
            if self._fold_fits(node, scope, ins, sizes) and self._fold(node, scope, ins):
                return None
        self._infer(node, scope)

    def _fold_fits(self, node, scope: _Scope, ins: list, sizes: list) -> bool:
        """Whether folding ``node`` stays within _FOLD_OUTPUT_BYTES per output, as ONNX's shape inference predicts
        it given the constant inputs' values. An output it cannot size is allowed, except of an operator that can
        grow (_GROWS): _fold checks the actual size afterwards, as ONNX Runtime's folding does."""
        domain = node.domain or ""
        if (
            domain in ("", "ai.onnx")
            and node.op_type in _BOUNDED
            and math.prod(n + 1 for n in sizes) * 16 <= _FOLD_OUTPUT_BYTES
        ):
            return True  # cannot outgrow the bound, whatever inference would say (most folds: no call into ONNX)
        if (
            domain in ("", "ai.onnx")
            and node.op_type == "Range"
            and len(ins) == 3
            and all(v is not None and np.size(v) == 1 for v in ins)
        ):
            # its size from its operands (ONNX's inference refuses 1-element operands that are not 0-d, which
            # ONNX Runtime's kernel takes: AffineGrid's expansion writes them)
            start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in ins)
            count = max(math.ceil((limit - start) / delta), 0) if delta else 0
            return count * np.asarray(ins[0]).dtype.itemsize <= _FOLD_OUTPUT_BYTES
        out = self._fold_types(node, scope, ins)
        largest = max(sizes, default=1)
        for name in node.output:
            t = out.get(name)
            if t is None or t.dims is None:
                if name and node.op_type in _GROWS:
                    return False
                continue
            # a dim inference leaves open (NonZero's count, Unique's) taken as the largest input's size
            elements = math.prod(d if type(d) is int else largest for d in t.dims)
            if elements * _itemsize(t.elem) > _FOLD_OUTPUT_BYTES:
                return False
        return True

    def _fold_types(self, node, scope: _Scope, ins: list) -> dict:
        """{output: _T} of a node about to fold, given its constant inputs ``ins``: by gert's rule, else ONNX's
        inference ({} where neither tells)."""
        types = {i: t for i in node.input if i for t in [scope.type(i)] if t is not None}
        if self.rules:
            known = [np.asarray(v) if v is not None else None for v in ins]

            def value(k: int, limit: int) -> Optional[np.ndarray]:
                v = known[k]
                return v if v is not None and v.size <= limit else None

            ruled = self._ruled(node, types, value)
            if ruled is not None:
                return {n: _T(e, tuple(d)) for n, (e, d) in zip(node.output, ruled) if n}
        try:
            data = {i: v for i, v in zip(node.input, ins) if i and v is not None}
            return {n: _T.of(t) for n, t in self._onnx_inference(node, types, data).items()}
        except Exception:  # noqa: BLE001 - no schema or inference, or inputs it refuses: sized after the fold
            return {}

    def _constant(self, node, scope: _Scope) -> None:
        """A Constant's tensor is kept as it is (converted only if a fold needs it); other forms are evaluated."""
        name = node.output[0]
        for a in node.attribute:
            if a.name == "value" and a.type == wire_graph.TENSOR:
                scope.protos[name] = a.t
                return
        if not (self._fold_fits(node, scope, [], []) and self._fold(node, scope, [])):  # a sparse_value may be huge
            self._infer(node, scope)

    def _fold(self, node, scope: _Scope, ins: list) -> bool:
        try:
            direct = folds.fold(node, ins, self.opsets.get(""))  # the common folds, without onnx.reference (12 MB)
            if direct is None:
                from onnx.reference import ReferenceEvaluator

                ev = ReferenceEvaluator(_proto(node), opsets=self.opsets)
                feeds = {i: v for i, v in zip(node.input, ins) if i}
                outs = list(ev.run(None, feeds))
            else:
                outs = direct
        except Exception:  # noqa: BLE001 - not evaluable here: fall back to inference
            return False
        if any(isinstance(v, np.ndarray) and v.nbytes > _FOLD_OUTPUT_BYTES for v in outs):
            return False  # an output inference could not size beforehand: not kept (inferred instead)
        for name, v in zip(node.output, outs):
            if name and isinstance(v, np.ndarray):
                scope.set_value(name, v)
        return all(not n or n in scope.values for n in node.output)

    def _shape_op(self, node, scope: _Scope) -> bool:
        shape = _known(scope.type(node.input[0]))
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

    def _elementwise(self, node, scope: _Scope) -> bool:
        """The shape rule of the elementwise operators that make up most of a CNN, without a call into ONNX: one
        output, the first input's element type, the inputs' known shapes broadcast (numpy rules)."""
        if not self.rules or (node.domain or "") not in ("", "ai.onnx") or len(node.output) != 1 or not node.input:
            return False
        unary = node.op_type in _UNARY
        if not unary and (node.op_type not in _BROADCAST or len(node.input) != 2):
            return False
        types = [scope.type(i) for i in (node.input[:1] if unary else node.input)]
        shapes = [_known(t) for t in types]
        if any(sh is None for sh in shapes):
            return False
        if len(shapes) == 1 or shapes[0] == shapes[1]:
            shape = shapes[0]
        else:
            try:
                shape = tuple(int(d) for d in np.broadcast_shapes(*shapes))
            except ValueError:
                return False  # ONNX's inference reports it
        scope.types[node.output[0]] = _T(types[0].elem, shape)
        return True

    def _infer(self, node, scope: _Scope) -> None:
        if self._elementwise(node, scope) or self._rule(node, scope):
            return
        out: dict = {}
        try:
            types = {i: t for i in node.input if i for t in [scope.type(i)] if t is not None}
            data = {}
            for i in node.input:  # constant shape operands (shapes, axes, scales, pads: a handful of elements)
                if i and i not in data:
                    v = scope.value(i, _OPERAND_ELEMENTS)
                    if v is not None:
                        data[i] = v
            out = self._onnx_inference(node, types, data)
        except _Refused as e:  # GE's InferShape fails the compile
            raise ShapeError(
                f"shape inference failed at node '{node.name or node.op_type}' ({node.op_type}): {e}"
            ) from None
        except Exception:  # noqa: BLE001 - no schema or no inference function: the outputs stay unknown
            out = {}
        for name in node.output:
            if not name:
                continue
            t = out.get(name)
            t = _T.of(t) if t is not None else None
            if t is not None:
                scope.types[name] = t
            if _known(t) is None:
                self.unknown.append(name)

    def _if(self, node, scope: _Scope) -> None:
        branches = {a.name: a.g for a in node.attribute if a.type == wire_graph.GRAPH}
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
                if _known(t) is None and name:
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
            if _known(t) is None and name:
                self.unknown.append(name)


def _itemsize(elem: int) -> int:
    """Bytes per element of an ONNX element type (8 for strings and types numpy does not know: an estimate)."""
    try:
        if not elem:
            return 1
        known = wire_graph.NUMPY_DTYPES.get(elem)
        if known is not None:
            return np.dtype(known).itemsize
        from onnx import helper

        return max(1, np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize)
    except Exception:  # noqa: BLE001 - a type without a numpy dtype
        return 8


def _merge(a: Optional[_T], b: Optional[_T]) -> Optional[_T]:
    """The type of an If output from its branches' types: equal dims stay, others become unknown."""
    if a is None or b is None or a.proto is not None or b.proto is not None:
        return None
    elem = a.elem or b.elem
    if a.dims is None or b.dims is None or len(a.dims) != len(b.dims):
        return _T(elem, None)
    return _T(elem, tuple(x if x == y and type(x) is int else None for x, y in zip(a.dims, b.dims)))


def _elem_of(dtype) -> int:
    """The ONNX element type of a numpy dtype."""
    known = wire_graph.ONNX_TYPES.get(np.dtype(dtype))
    if known is not None:
        return known
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(dtype)


def _to_array(p) -> np.ndarray:
    """A constant's values: a wire_graph.WireTensor's own conversion, else ONNX's numpy_helper."""
    if isinstance(p, wire_graph.WireTensor):
        v = p.to_array()
        if v is None:
            raise ValueError(f"constant '{p.name}' holds no data here")
        return v
    from onnx import numpy_helper

    return numpy_helper.to_array(p)


def _proto(node):
    """``node`` as onnx.NodeProto (a wire_graph.WireNode parsed from its bytes)."""
    return node.to_proto() if isinstance(node, wire_graph.WireNode) else node


def _elem_type(value) -> int:
    """A graph input's element type (wire_graph.WireValue or onnx.ValueInfoProto)."""
    if isinstance(value, wire_graph.WireValue):
        return value.elem_type
    return value.type.tensor_type.elem_type


def _run(m, input_dims: Mapping[str, Sequence], rules: bool = True) -> tuple:
    """(the inferer, the top-level scope) of one pass over ``m`` (an onnx.ModelProto or a wire_graph.WireModel)
    with its inputs fixed at ``input_dims``."""
    inf = _Inferer(m, rules)
    scope = _Scope()
    inits = {i.name for i in m.graph.initializer}
    for i in m.graph.input:
        if i.name in inits:
            continue
        dims = input_dims.get(i.name)
        scope.types[i.name] = _T(
            _elem_type(i),
            None
            if dims is None
            else tuple(d if isinstance(d, str) else (int(d) if d is not None and d >= 0 else None) for d in dims),
        )
    inf.graph(m.graph, scope)
    return inf, scope


def infer(model, input_dims: Mapping[str, Sequence], rules: bool = True) -> Inferred:
    """Shapes of ``model`` (serialized bytes, a wire_graph.WireModel or a ModelProto) for inputs fixed at
    ``input_dims`` (name -> dims; a str dim is symbolic, a negative or None one unknown). Bytes are read without
    ONNX where the wire reader takes them (else parsed by ONNX). ``rules=False``: ONNX's inference for every node.
    Graph outputs' declared shapes and ``value_info`` are ignored, as GE's parser ignores them (A5)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            return _inferred(wire_graph.parse(model), input_dims, rules)
        except Unsupported:
            import onnx

            model = onnx.load_from_string(bytes(model))
    return _inferred(model, input_dims, rules)


def _inferred(m, input_dims: Mapping[str, Sequence], rules: bool) -> Inferred:
    inf, scope = _run(m, input_dims, rules)
    types = [scope.type(o.name) for o in m.graph.output]
    outs = [_known(t) for t in types]
    return Inferred(
        outs,
        not inf.unknown and all(s is not None for s in outs),
        inf.unknown,
        [None if t is None else t.dims for t in types],
        [0 if t is None else t.elem for t in types],
    )


@dataclass
class Traced:
    """Every tensor of a graph (its top level) at fixed input sizes: ``dims`` per name (as ``_T.dims``: ints, a
    dim_param str or None; None for an unknown rank) and ``values`` of the constants folded (at most
    ``_FOLD_ELEMENTS`` elements). What gert.core.row_proof reads to check a layout op at two batch sizes."""

    dims: dict
    values: dict

    def shape(self, name: str) -> Optional[tuple]:
        """The known sizes of ``name``, or None."""
        d = self.dims.get(name)
        return d if d is not None and all(type(x) is int for x in d) else None


def trace(model, input_dims: Mapping[str, Sequence]) -> Traced:
    """As ``infer`` of a parsed model (onnx.ModelProto), keeping every top-level tensor's dims and folded value
    (ShapeError if the sizes do not fit)."""
    _, scope = _run(model, input_dims)
    names = set(scope.types) | set(scope.protos)
    dims = {}
    for n in names:
        t = scope.type(n)
        if t is not None and t.proto is None:
            dims[n] = t.dims
    values = {}
    for n in names:
        v = scope.value(n)
        if v is not None:
            values[n] = v
    return Traced(dims, values)
