"""A model's skeleton: its graph without the bytes of its large constants, for the shape work done at load.

gert reads a model's structure at load (which output axis carries which input dim: gert/core/onnx_io.py; GE's
compile-time shape inference of a static graph: gert/core/shape_infer.py), and none of it needs a weight's values:
shape inference reads a constant's dims, and its values only for shape operands (a handful of elements; gert's
inference folds constants of at most ``shape_infer._FOLD_ELEMENTS``). A ModelProto with the weights costs their bytes
once more per copy, and ONNX's shape inference copies a model three times more (serialized, parsed in C++,
serialized and parsed back): for PP-OCR det (4.7 MB) that was ~27 MB of resident memory at load, against ~24 MB
for ONNX Runtime's whole session (issue 28). The skeleton keeps every tensor's name, element type and dims; a
constant of more than ``KEPT_ELEMENTS`` elements keeps no data and is marked as external data at ``STRIPPED``, so a
reader that wants its values fails saying so (ONNX: "cannot parse data from external tensors") instead of reading
an empty tensor. Serialized bytes are cut at the wire level (gert/core/skeleton_wire.py), never parsed whole.
"""

from __future__ import annotations

from typing import Iterator, Union

import onnx

from gert.core.skeleton_wire import KEPT_ELEMENTS, STRIPPED, Unsupported, strip_bytes

_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def skeleton(model: Union[bytes, memoryview, onnx.ModelProto]) -> onnx.ModelProto:
    """The skeleton of ``model`` (serialized bytes, a buffer of them, or a ModelProto, which is left as it is), a
    ModelProto of its own that holds no memory of the full model. Bytes are cut without parsing their weights
    (skeleton_wire.strip_bytes: no copy of the model's bytes, no parse of its weights); a ModelProto, or bytes the
    wire walker leaves to protobuf, are copied or parsed whole and stripped, and that parse is dropped before this
    returns."""
    if not isinstance(model, onnx.ModelProto):
        try:
            small, _ = strip_bytes(model, KEPT_ELEMENTS)
        except Unsupported:
            pass  # parsed whole below: ONNX's own result or error
        else:
            return onnx.load_from_string(small)
    full = onnx.load_from_string(bytes(model)) if not isinstance(model, onnx.ModelProto) else _copy(model)
    if not strip(full):
        return full
    # A parsed message keeps the memory of the fields cleared in it (protobuf's upb arenas free only with the whole
    # message): a fresh parse of the stripped bytes holds only the skeleton.
    small = full.SerializeToString()
    del full
    return onnx.load_from_string(small)


def strip(model: onnx.ModelProto) -> int:
    """Drop the data of every constant larger than KEPT_ELEMENTS in ``model`` (initializers and Constant nodes'
    tensors, subgraphs included), in place; returns how many were stripped."""
    n = 0
    for t in tensors(model.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL or _elements(t) <= KEPT_ELEMENTS:
            continue
        for name in _DATA_FIELDS:
            t.ClearField(name)
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        entry = t.external_data.add()
        entry.key, entry.value = "location", STRIPPED
        n += 1
    return n


def is_skeleton_tensor(t: onnx.TensorProto) -> bool:
    """Whether ``t`` is a constant whose data the skeleton dropped."""
    return t.data_location == onnx.TensorProto.EXTERNAL and any(
        e.key == "location" and e.value == STRIPPED for e in t.external_data
    )


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def _elements(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n


def tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every constant tensor of ``graph`` and its subgraphs: initializers and tensor attributes."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t
            elif a.type == onnx.AttributeProto.TENSORS:
                yield from a.tensors
            elif a.type == onnx.AttributeProto.GRAPH:
                yield from tensors(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from tensors(g)
