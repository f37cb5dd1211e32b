"""A model's graph read from its serialized bytes without ONNX: what compile-time shape inference reads, and no more.

A Triton stub serving a gert model infers shapes at its compiles (gert/core/shape_infer.py: a static graph's output
shapes, the output shapes predicted at new input sizes). Parsing the model with ``onnx`` there costs every serving
process ~15 MB of resident memory for good (the module, protobuf's descriptors and, at the first per-node inference,
ONNX's operator schema registry; issue 41). This reads the skeleton of the model (gert/core/skeleton_wire.py: the
large constants' data left out) into plain objects that carry the fields shape inference reads, named as ONNX's
messages name them (``node.op_type``, ``attribute.ints``, ``initializer.dims``, ...), so shape_infer walks either.

Only what this reader knows for certain is read: a subgraph attribute (If, Loop, Scan), a sparse initializer, a
model-local function, a non-tensor graph input, a singular message field given twice (which protobuf merges), a
constant encoded in a way ``to_array`` does not convert, or malformed bytes raise ``Unsupported``, and the caller
parses the model with ONNX instead, whose result (or error) stays ONNX's own. Each node keeps its serialized bytes
(from the skeleton: small), so an operator gert has no shape rule for can still be handed to ONNX's inference.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Optional, Union

import numpy as np

from gert.core.skeleton_wire import KEPT_ELEMENTS, STRIPPED, Unsupported, fields, strip_bytes, varint

# AttributeProto.AttributeType
FLOAT, INT, STRING, TENSOR, GRAPH, FLOATS, INTS, STRINGS, TENSORS, GRAPHS = range(1, 11)
# ONNX element type -> numpy dtype, for the types whose values this reader converts (TensorProto.DataType)
NUMPY_DTYPES = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    4: np.uint16,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
    12: np.uint32,
    13: np.uint64,
}
ONNX_TYPES = {np.dtype(v): k for k, v in NUMPY_DTYPES.items()}
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
# TensorProto's typed data fields -> the element types they hold (onnx.proto's comments; numpy_helper.to_array)
_FLOAT_DATA, _INT32_DATA, _INT64_DATA, _RAW_DATA, _DOUBLE_DATA, _UINT64_DATA = 4, 5, 7, 9, 10, 11
_TYPED = {
    _FLOAT_DATA: {1},
    _INT32_DATA: {2, 3, 4, 5, 6, 9, 10},
    _INT64_DATA: {7},
    _DOUBLE_DATA: {11},
    _UINT64_DATA: {12, 13},
}


@dataclass
class WireTensor:
    """A constant: ``name``, ``data_type`` (ONNX element type), ``dims``; its values through ``to_array`` (None
    where the data is not in the bytes: external, or left out by the skeleton)."""

    name: str = ""
    data_type: int = 0
    dims: tuple = ()
    data: Optional[tuple] = None  # (TensorProto field number, the field's bytes or its values as a list)
    external: bool = False  # the data is not in the bytes: in a file, or left out by the skeleton (``stripped``)
    stripped: bool = False

    def to_array(self) -> Optional[np.ndarray]:
        """The values as numpy_helper.to_array gives them, or None for data held elsewhere (ONNX's conversion fails
        there too). parse() has checked that they convert."""
        if self.external:
            return None
        dtype = NUMPY_DTYPES[self.data_type]
        number, payload = self.data if self.data is not None else (_RAW_DATA, b"")
        if number == _RAW_DATA:
            flat = np.frombuffer(payload, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
        elif self.data_type == 10:  # float16 bits in int32_data
            flat = np.asarray(payload, dtype=np.int64).astype(np.uint16).view(np.float16)
        else:
            flat = np.asarray(payload, dtype=_field_dtype(number)).astype(dtype)
        return flat.reshape(self.dims)

    def check(self) -> None:
        """Unsupported unless to_array converts the data as ONNX's numpy_helper would."""
        if self.external:
            return
        dtype = NUMPY_DTYPES.get(self.data_type)
        if dtype is None:
            raise Unsupported(f"constant '{self.name}' of element type {self.data_type}")
        count = 1
        for d in self.dims:
            if d < 0:
                raise Unsupported(f"constant '{self.name}' with dims {self.dims}")
            count *= d
        number, payload = self.data if self.data is not None else (_RAW_DATA, b"")
        got = len(payload) // np.dtype(dtype).itemsize if number == _RAW_DATA else len(payload)
        if got != count or number == _RAW_DATA and len(payload) % np.dtype(dtype).itemsize:
            raise Unsupported(f"constant '{self.name}': {got} values for dims {self.dims}")


def _field_dtype(number: int):
    return {_FLOAT_DATA: np.float32, _INT32_DATA: np.int64, _INT64_DATA: np.int64}.get(
        number, np.float64 if number == _DOUBLE_DATA else np.uint64
    )


@dataclass
class WireAttribute:
    name: str = ""
    type: int = 0
    f: float = 0.0
    i: int = 0
    s: bytes = b""
    t: Optional[WireTensor] = None
    g: None = None  # a graph attribute: never (the reader leaves subgraphs to ONNX)
    floats: list = field(default_factory=list)
    ints: list = field(default_factory=list)
    strings: list = field(default_factory=list)


@dataclass
class WireNode:
    op_type: str = ""
    domain: str = ""
    name: str = ""
    input: list = field(default_factory=list)
    output: list = field(default_factory=list)
    attribute: list = field(default_factory=list)
    raw: bytes = b""  # the node's serialized bytes (its large constants left out), for ONNX's inference

    def to_proto(self):
        """The node as onnx.NodeProto (imports onnx: for an operator without a rule of gert's)."""
        import onnx

        return onnx.NodeProto.FromString(self.raw)


@dataclass
class WireValue:
    """A graph input or output: its name, element type and declared dims (int, dim name or None per axis; None:
    no shape)."""

    name: str = ""
    elem_type: int = 0
    dims: Optional[tuple] = None


@dataclass
class WireGraph:
    node: list = field(default_factory=list)
    initializer: list = field(default_factory=list)
    input: list = field(default_factory=list)
    output: list = field(default_factory=list)


@dataclass(frozen=True)
class WireOpset:
    domain: str = ""
    version: int = 1


@dataclass
class WireModel:
    ir_version: int = 0
    opset_import: list = field(default_factory=list)  # [WireOpset]
    graph: WireGraph = field(default_factory=WireGraph)
    wire_bytes: int = 0  # the size of the skeleton's bytes it was read from

    def ByteSize(self) -> int:  # noqa: N802 - protobuf's name, as the ModelProto it stands for answers it
        """The serialized size of the skeleton this graph was read from (what a skeleton ModelProto answers)."""
        return self.wire_bytes

    def has_external(self) -> bool:
        """Whether some constant has its data in a file (the skeleton's stripped weights are not):
        gert.core.external_data.has_external of the parsed model."""
        tensors = list(self.graph.initializer)
        tensors += [a.t for n in self.graph.node for a in n.attribute if a.t is not None]
        return any(t.external and not t.stripped for t in tensors)


def parse(model: Union[bytes, bytearray, memoryview]) -> WireModel:
    """The graph of the serialized ONNX model ``model`` (Unsupported for what it leaves to ONNX)."""
    small, _ = strip_bytes(model, KEPT_ELEMENTS)
    buf = memoryview(small)
    out = WireModel(wire_bytes=len(small))
    for number, wire, a, b, _ in fields(buf, 0, len(buf)):
        if number == 1 and wire == _VARINT:
            out.ir_version = _signed(a)
        elif number == 8 and wire == _LEN:
            domain, version = "", 1
            for n, w, x, y, _ in fields(buf, a, b):
                if n == 1 and w == _LEN:
                    domain = _text(buf, x, y)
                elif n == 2 and w == _VARINT:
                    version = _signed(x)
            out.opset_import.append(WireOpset(domain, version))
        elif number == 7 and wire == _LEN:
            out.graph = _graph(buf, a, b)
        elif number == 25:
            raise Unsupported("model-local functions")
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _text(buf: memoryview, a: int, b: int) -> str:
    try:
        return bytes(buf[a:b]).decode("utf-8")
    except UnicodeDecodeError:
        raise Unsupported("a name that is not UTF-8") from None


def _graph(buf: memoryview, a: int, b: int) -> WireGraph:
    g = WireGraph()
    for number, wire, x, y, _ in fields(buf, a, b):
        if wire != _LEN:
            continue
        if number == 1:
            g.node.append(_node(buf, x, y))
        elif number == 5:
            g.initializer.append(_tensor(buf, x, y))
        elif number in (11, 12):
            (g.input if number == 11 else g.output).append(_value(buf, x, y, number == 11))
        elif number == 15:
            raise Unsupported("sparse initializers")
    return g


def _node(buf: memoryview, a: int, b: int) -> WireNode:
    n = WireNode(raw=bytes(buf[a:b]))
    for number, wire, x, y, _ in fields(buf, a, b):
        if wire != _LEN:
            continue
        if number == 1:
            n.input.append(_text(buf, x, y))
        elif number == 2:
            n.output.append(_text(buf, x, y))
        elif number == 3:
            n.name = _text(buf, x, y)
        elif number == 4:
            n.op_type = _text(buf, x, y)
        elif number == 5:
            n.attribute.append(_attribute(buf, x, y))
        elif number == 7:
            n.domain = _text(buf, x, y)
        elif number == 8:
            raise Unsupported("a node naming a function overload")
    return n


def _attribute(buf: memoryview, a: int, b: int) -> WireAttribute:
    at = WireAttribute()
    for number, wire, x, y, _ in fields(buf, a, b):
        if number == 1 and wire == _LEN:
            at.name = _text(buf, x, y)
        elif number == 2 and wire == _I32:
            at.f = struct.unpack_from("<f", buf, x)[0]
        elif number == 3 and wire == _VARINT:
            at.i = _signed(x)
        elif number == 4 and wire == _LEN:
            at.s = bytes(buf[x:y])
        elif number == 5 and wire == _LEN:
            if at.t is not None:
                raise Unsupported("an attribute's tensor given twice")
            at.t = _tensor(buf, x, y)
        elif number == 7:
            at.floats.extend(_floats(buf, wire, x, y))
        elif number == 8:
            at.ints.extend(_ints(buf, wire, x, y))
        elif number == 9 and wire == _LEN:
            at.strings.append(bytes(buf[x:y]))
        elif number == 20 and wire == _VARINT:
            at.type = x
        elif number in (6, 10, 11, 14, 15, 21, 22, 23):
            raise Unsupported(f"attribute field {number} (a graph, tensors, types, a reference or sparse data)")
    return at


def _floats(buf: memoryview, wire: int, x: int, y: int) -> list:
    if wire == _I32:
        return [struct.unpack_from("<f", buf, x)[0]]
    if wire == _LEN and (y - x) % 4 == 0:
        return list(struct.unpack_from(f"<{(y - x) // 4}f", buf, x))
    raise Unsupported("floats of an unexpected wire type")


def _doubles(buf: memoryview, wire: int, x: int, y: int) -> list:
    if wire == _I64:
        return [struct.unpack_from("<d", buf, x)[0]]
    if wire == _LEN and (y - x) % 8 == 0:
        return list(struct.unpack_from(f"<{(y - x) // 8}d", buf, x))
    raise Unsupported("doubles of an unexpected wire type")


def _ints(buf: memoryview, wire: int, x: int, y: int, signed: bool = True) -> list:
    if wire == _VARINT:
        return [_signed(x) if signed else x]
    if wire != _LEN:
        raise Unsupported("integers of an unexpected wire type")
    out, pos = [], x
    while pos < y:
        v, pos = varint(buf, pos, y)
        out.append(_signed(v) if signed else v)
    return out


def _tensor(buf: memoryview, a: int, b: int) -> WireTensor:
    t = WireTensor()
    dims: list = []
    typed: dict = {}
    raw = None
    location = 0
    stripped = False
    for number, wire, x, y, _ in fields(buf, a, b):
        if number == 1:
            dims.extend(_ints(buf, wire, x, y))
        elif number == 2 and wire == _VARINT:
            t.data_type = x
        elif number == 3:
            raise Unsupported("a segmented tensor")
        elif number == 8 and wire == _LEN:
            t.name = _text(buf, x, y)
        elif number == _RAW_DATA and wire == _LEN:
            raw = bytes(buf[x:y])
        elif number == _FLOAT_DATA:
            typed.setdefault(number, []).extend(_floats(buf, wire, x, y))
        elif number == _DOUBLE_DATA:
            typed.setdefault(number, []).extend(_doubles(buf, wire, x, y))
        elif number in (_INT32_DATA, _INT64_DATA, _UINT64_DATA):
            typed.setdefault(number, []).extend(_ints(buf, wire, x, y, signed=number != _UINT64_DATA))
        elif number == 6:
            typed.setdefault(number, []).append(b"")
        elif number == 13 and wire == _LEN:
            stripped = stripped or STRIPPED.encode() in bytes(buf[x:y])
        elif number == 14 and wire == _VARINT:
            location = x
    t.dims = tuple(dims)
    t.external = location == 1 or stripped
    t.stripped = stripped
    if raw is not None:
        if typed:
            raise Unsupported(f"constant '{t.name}' with raw and typed data")
        t.data = (_RAW_DATA, raw)
    elif typed:
        if len(typed) > 1 or t.data_type not in _TYPED.get(next(iter(typed)), ()):
            raise Unsupported(f"constant '{t.name}': data fields {sorted(typed)} for element type {t.data_type}")
        t.data = next(iter(typed.items()))
    t.check()
    return t


def _value(buf: memoryview, a: int, b: int, is_input: bool) -> WireValue:
    v = WireValue()
    types = 0
    for number, wire, x, y, _ in fields(buf, a, b):
        if number == 1 and wire == _LEN:
            v.name = _text(buf, x, y)
        elif number == 2 and wire == _LEN:
            types += 1
            v.elem_type, v.dims, tensor = _type(buf, x, y)
            if is_input and not tensor:
                raise Unsupported(f"graph input '{v.name}' is not a tensor")
    if types > 1:
        raise Unsupported(f"value '{v.name}' with its type given twice")
    return v


def _type(buf: memoryview, a: int, b: int) -> tuple:
    """(elem_type, dims or None, whether a tensor type) of TypeProto buf[a:b] (its ``value`` is a oneof: the last
    one given counts)."""
    elem, dims, tensor = 0, None, False
    for number, wire, x, y, _ in fields(buf, a, b):
        if number in (4, 5, 8, 9):  # sequence, map, sparse tensor, optional
            elem, dims, tensor = 0, None, False
        elif number == 1 and wire == _LEN:
            elem, dims, tensor = 0, None, True
            for n, w, p, q, _ in fields(buf, x, y):
                if n == 1 and w == _VARINT:
                    elem = p
                elif n == 2 and w == _LEN:
                    if dims is not None:
                        raise Unsupported("a tensor type's shape given twice")
                    dims = tuple(_dim(buf, d[2], d[3]) for d in fields(buf, p, q) if d[0] == 1 and d[1] == _LEN)
    return elem, dims, tensor


def _dim(buf: memoryview, a: int, b: int):
    """A Dimension's dim_value, else its dim_param, else None (a oneof: the last one given counts)."""
    out: Union[int, str, None] = None
    for n, w, x, y, _ in fields(buf, a, b):
        if n == 1 and w == _VARINT:
            out = _signed(x)
        elif n == 2 and w == _LEN:
            out = _text(buf, x, y) or None
    return out
