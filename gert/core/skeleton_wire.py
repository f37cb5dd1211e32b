"""A model's skeleton cut from its serialized bytes: the large constants' data left out without parsing them.

``skeleton.skeleton`` of serialized bytes used to parse the whole model (every weight into protobuf's arena, after a
``bytes()`` copy of a lent buffer), strip it and serialize and parse it again: for PP-OCR rec (10.6 MB) that left
~16 MB more of the heap in use in every process that built one (the host NPU's provider builds one per model at its
first compile, gert.load one at load), as glibc keeps the freed blocks (issue 41). ``strip_bytes`` walks the
protobuf wire format instead and copies every field as it is, except the data fields of a constant that
``skeleton.strip`` would strip (more than ``KEPT_ELEMENTS`` elements, data not external), which it replaces by the
same marker: the bytes parse into the message ``strip`` makes of the whole model. Only the paths ``strip`` walks are
entered (ModelProto.graph; a graph's initializers and nodes; a node's attributes of type TENSOR, TENSORS, GRAPH,
GRAPHS); everything else, unknown fields included, is copied byte for byte. No onnx import: pure wire format.

Bytes this walker does not take as they are (malformed, or a message field given twice, which protobuf would merge)
raise ``Unsupported``: the caller parses the whole model instead, whose error (or result) stays ONNX's own.
"""

from __future__ import annotations

import re
from typing import Union

KEPT_ELEMENTS = 4096  # = gert.core.shape_infer._FOLD_ELEMENTS: the largest constant shape work reads the values of
STRIPPED = "gert-skeleton:weights-not-loaded"  # the location a stripped constant names (skeleton.is_skeleton_tensor)

# field numbers (onnx/onnx.proto)
_MODEL_GRAPH = 7
_GRAPH_NODE, _GRAPH_INITIALIZER = 1, 5
_NODE_ATTRIBUTE = 5
_ATTR_T, _ATTR_G, _ATTR_TENSORS, _ATTR_GRAPHS, _ATTR_TYPE = 5, 6, 10, 11, 20
_TYPE_TENSOR, _TYPE_GRAPH, _TYPE_TENSORS, _TYPE_GRAPHS = 4, 5, 9, 10  # AttributeProto.AttributeType
_TENSOR_DIMS, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 1, 13, 14
_TENSOR_DATA = frozenset((4, 5, 6, 7, 9, 10, 11))  # float, int32, string, int64, raw, double, uint64 data
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class Unsupported(ValueError):
    """Bytes the wire walker leaves to a full parse."""


def varint(buf: memoryview, pos: int, end: int) -> tuple:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise Unsupported("truncated or overlong varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _encode_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fields(buf: memoryview, start: int, end: int) -> list:
    """(field number, wire type, value start, value end, field start) of each field of the message in
    buf[start:end]; for a varint the value is decoded into ``value start`` (and ``value end`` is its end)."""
    out = []
    pos = start
    while pos < end:
        field_start = pos
        key, pos = varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Unsupported("field number 0")
        if wire == _VARINT:
            value, pos = varint(buf, pos, end)
            out.append((number, wire, value, pos, field_start))
            continue
        if wire == _I64:
            vstart, pos = pos, pos + 8
        elif wire == _I32:
            vstart, pos = pos, pos + 4
        elif wire == _LEN:
            n, vstart = varint(buf, pos, end)
            pos = vstart + n
        else:  # groups (3, 4) are not in ONNX's schema
            raise Unsupported(f"wire type {wire}")
        if pos > end:
            raise Unsupported("truncated field")
        out.append((number, wire, vstart, pos, field_start))
    return out


def _len_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | _LEN) + _encode_varint(len(payload)) + payload


_MARKER = (
    _len_field(  # external_data: [{key: "location", value: STRIPPED}], data_location: EXTERNAL
        _TENSOR_EXTERNAL_DATA,
        _len_field(1, b"location") + _len_field(2, STRIPPED.encode()),  # StringStringEntryProto key, value
    )
    + _encode_varint(_TENSOR_DATA_LOCATION << 3 | _VARINT)
    + _encode_varint(_EXTERNAL)
)


def _tensor(buf: memoryview, start: int, end: int, kept: int, out: list) -> int:
    """Append TensorProto buf[start:end] to ``out``, its data left out when ``strip`` would drop it; 1 if so."""
    found = fields(buf, start, end)
    elements, location = 1, 0
    for number, wire, a, b, _ in found:
        if number == _TENSOR_DIMS:
            if wire == _VARINT:
                elements *= a if a < 1 << 63 else a - (1 << 64)
            elif wire == _LEN:  # packed
                pos = a
                while pos < b:
                    d, pos = varint(buf, pos, b)
                    elements *= d if d < 1 << 63 else d - (1 << 64)
            else:
                raise Unsupported("dims of a wire type other than varint")
        elif number == _TENSOR_DATA_LOCATION:
            if wire != _VARINT:
                raise Unsupported("data_location of a wire type other than varint")
            location = a
    if location == _EXTERNAL or elements <= kept:
        out.append(_len_field_view(buf, start, end))
        return 0
    parts = [
        bytes(buf[f[4] : f[3]])
        for f in found
        if f[0] not in _TENSOR_DATA and f[0] not in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION)
    ]
    parts.append(_MARKER)
    out.append(b"".join(parts))
    return 1


def _len_field_view(buf: memoryview, start: int, end: int) -> bytes:
    return bytes(buf[start:end])


def _message(buf: memoryview, start: int, end: int, walk: dict, kept: int, counter: list) -> bytes:
    """Message buf[start:end] with the fields of ``walk`` ({field number: how to walk its value}) rewritten."""
    parts: list = []  # slices of ``buf`` copied as they are, and the rewritten fields (bytes)
    pos = start
    found = fields(buf, start, end)
    for number, wire, a, b, field_start in found:
        how = walk.get(number)
        if how is None or wire != _LEN:
            continue
        inner = how(buf, a, b, kept, counter)
        if inner is None:
            continue
        parts.append(buf[pos:field_start])
        parts.append(_len_field(number, inner))
        pos = b
    parts.append(buf[pos:end])
    return b"".join(parts)


def _walk_tensor(buf: memoryview, a: int, b: int, kept: int, counter: list):
    out: list = []
    counter[0] += _tensor(buf, a, b, kept, out)
    return out[0]


def _walk_graph(buf: memoryview, a: int, b: int, kept: int, counter: list):
    return _message(buf, a, b, {_GRAPH_NODE: _walk_node, _GRAPH_INITIALIZER: _walk_tensor}, kept, counter)


# AttributeProto.type (field 20, a varint) of TENSOR, GRAPH, TENSORS or GRAPHS: a node whose bytes hold none of
# these has no attribute strip walks and is copied as it is (a match elsewhere in its bytes only costs its walk)
_WALKED_TYPE = re.compile(b"\xa0\x01[\x04\x05\x09\x0a]")


def _walk_node(buf: memoryview, a: int, b: int, kept: int, counter: list):
    if _WALKED_TYPE.search(buf, a, b) is None:
        return None
    return _message(buf, a, b, {_NODE_ATTRIBUTE: _walk_attribute}, kept, counter)


_ATTR_WALK = {
    _TYPE_TENSOR: (_ATTR_T, _walk_tensor),
    _TYPE_TENSORS: (_ATTR_TENSORS, _walk_tensor),
    _TYPE_GRAPH: (_ATTR_G, _walk_graph),
    _TYPE_GRAPHS: (_ATTR_GRAPHS, _walk_graph),
}


def _walk_attribute(buf: memoryview, a: int, b: int, kept: int, counter: list):
    found = fields(buf, a, b)
    kind = 0
    for number, wire, value, _, _ in found:
        if number == _ATTR_TYPE and wire == _VARINT:
            kind = value
    entry = _ATTR_WALK.get(kind)
    if entry is None:
        return None  # nothing strip walks: copied as it is
    number, how = entry
    if number in (_ATTR_T, _ATTR_G) and sum(1 for f in found if f[0] == number) > 1:
        raise Unsupported("a singular message field given twice (protobuf merges them)")
    return _message(buf, a, b, {number: how}, kept, counter)


def strip_bytes(model: Union[bytes, bytearray, memoryview], kept: int) -> tuple:
    """(the serialized skeleton of the serialized ModelProto ``model``, how many constants were stripped): the
    bytes of every constant of more than ``kept`` elements left out as ``skeleton.strip`` leaves them out.
    ``Unsupported`` for bytes it leaves to a full parse."""
    buf = memoryview(model).cast("B")
    end = len(buf)
    if sum(1 for f in fields(buf, 0, end) if f[0] == _MODEL_GRAPH) > 1:
        raise Unsupported("ModelProto.graph given twice (protobuf merges them)")
    counter = [0]
    out = _message(buf, 0, end, {_MODEL_GRAPH: _walk_graph}, kept, counter)
    return out, counter[0]
