"""The one ONNX I/O reader: what a model takes and gives, read once at load.

``read(data)`` gives the inputs and outputs (``gert._cann.read_onnx_io``'s form, outputs without a shape in the file
completed by shape inference) and the value-dependent outputs (gert.core.valuedep). ``output_dims`` decides, by ONNX shape
inference and not by dim names, which output axis carries which dynamic dim of the inputs: every input axis of one
dim gets one fresh symbol, the model is inferred, and an output axis carries that dim where its symbol lands. An
unnamed batch dim ("?" in the file) is found like a named one; a reduction over the batch shows as an output without
the symbol (docs/architecture.md, "output batch axis").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import onnx

from gert import _cann
from gert.core import external_data, valuedep
from gert.core.skeleton import KEPT_ELEMENTS, skeleton
from gert.errors import GertError

_SYMBOL = "__gert_dim_{}__"
UNKNOWN = None  # an output dim that inference could not tell


@dataclass
class ModelIO:
    """A model's I/O as gert reads it: ``io`` in read_onnx_io's form ({"inputs": [(name, elem, dims)], "outputs":
    ...}), the names of the value-dependent outputs, and the parsed model (for shape inference)."""

    io: dict
    value_dependent: list
    proto: onnx.ModelProto
    external: bool = False  # some of its data is in external files (gert/core/external_data.py)


def read(data: bytes, model_dir: Optional[str] = None) -> ModelIO:
    """Read a serialized ONNX model's I/O (the only place gert parses a model's inputs and outputs). The ModelProto
    kept is the model's skeleton (gert/core/skeleton.py): the shape work at load reads no weights. ``model_dir``: the
    directory of the model file (None for bytes); its external data's locations are checked as ONNX Runtime checks
    them, and the small external constants shape work folds are read from there."""
    io = _cann.read_onnx_io(data)  # first: a file that is no ONNX model fails here, with a GertError saying why
    try:
        proto = skeleton(data)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and the like
        raise GertError(f"the ONNX model cannot be parsed: {type(e).__name__}: {e}") from None
    external = external_data.has_external(proto)
    if external and model_dir is not None:
        external_data.check(proto, model_dir)
        external_data.load_small(proto, model_dir, KEPT_ELEMENTS)
    io = valuedep.complete_outputs(proto, io)
    return ModelIO(io, valuedep.value_dependent_outputs(proto), proto, external)


def output_dims(proto: onnx.ModelProto, input_axes: Mapping[tuple, str]) -> dict:
    """Per graph output: a tuple with, per axis, the dim name of ``input_axes`` ({(input, axis): dim name}) whose
    symbol inference put there, an int for a fixed size, or UNKNOWN; None for an output whose rank inference could
    not tell. Declared output shapes and value_info are set aside: they are the exporter's claim, not inference."""
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    names = sorted(set(input_axes.values()))
    symbol = {n: _SYMBOL.format(i) for i, n in enumerate(names)}
    by_symbol = {s: n for n, s in symbol.items()}
    inits = {i.name for i in m.graph.initializer}
    for value in m.graph.input:
        if value.name in inits or not value.type.tensor_type.HasField("shape"):
            continue
        for axis, d in enumerate(value.type.tensor_type.shape.dim):
            dim = input_axes.get((value.name, axis))
            if dim is not None:
                d.Clear()
                d.dim_param = symbol[dim]
    for value in m.graph.output:
        if value.type.WhichOneof("value") == "tensor_type":
            value.type.tensor_type.ClearField("shape")
    del m.graph.value_info[:]
    found = [_read_dims(g, by_symbol) for g in (_onnx_inference(m),) if g is not None]
    out: dict = {}
    for value in proto.graph.output:
        out[value.name] = next((f[value.name] for f in found if _placed(f.get(value.name))), None) or next(
            (f[value.name] for f in found if f.get(value.name) is not None), None
        )
    if not all(_placed(d) for d in out.values()):  # symbols lost on the way: sizes that differ per dim tell
        probed = _probe(m, input_axes)
        for name, dims in probed.items():
            cur = out.get(name)
            if dims is None or _placed(cur):
                continue
            if cur is None or len(cur) != len(dims):
                out[name] = dims
            else:  # axis by axis: what inference could not tell, the probe may
                out[name] = tuple(p if c is UNKNOWN else c for c, p in zip(cur, dims))
    return out


def _placed(dims: Optional[tuple]) -> bool:
    """Inference told where every dim is: a known rank, and no unknown dim."""
    return dims is not None and UNKNOWN not in dims


_SIZES = (64, 48, 32, 96, 128, 16, 224, 320)  # probe sizes of a non-batch dim, in the order tried
_BATCH, _BATCH2 = 3, 5  # probe sizes of the batch


def _probe(m: onnx.ModelProto, input_axes: Mapping[tuple, str]) -> dict:
    """Output dims by inference at fixed sizes: once at base sizes, then once per dim with that dim changed; an
    output axis whose size follows the dim (and nothing else) carries it. For models whose shape computations
    (Shape -> Gather -> Concat -> Reshape) defeat symbolic inference but fold at fixed sizes."""
    names = sorted(set(input_axes.values()))

    def shapes(sizes: dict) -> Optional[dict]:
        from gert.core import (
            shape_infer as _shape_infer,
        )  # GE's way: folds Shape -> Cast -> Slice -> Concat at fixed sizes

        dims = {}
        for value in m.graph.input:
            t = value.type.tensor_type
            if value.type.WhichOneof("value") != "tensor_type" or not t.HasField("shape"):
                continue
            dims[value.name] = [
                sizes[input_axes[(value.name, a)]]
                if (value.name, a) in input_axes
                else (d.dim_value if d.HasField("dim_value") else None)
                for a, d in enumerate(t.shape.dim)
            ]
        try:
            got = _shape_infer.infer(m, dims)
        except Exception:  # noqa: BLE001 - these sizes do not fit the model: nothing learnt
            return None
        return {
            o.name: (tuple(d) if d is not None and all(type(x) is int for x in d) else None)
            for o, d in zip(m.graph.output, got.output_dims)
        }

    at_base = None
    for size in _SIZES:  # a base at which the whole model infers (a height the model fixes, e.g. 48)
        base = {n: _BATCH if n == "batch" else size for n in names}
        at_base = shapes(base)
        if at_base is not None:
            break
    if at_base is None:
        return {}
    out = {k: (list(v) if v is not None else None) for k, v in at_base.items()}
    for n in names:
        for size in (_BATCH2,) if n == "batch" else tuple(x for x in _SIZES if x != base[n]):
            moved = shapes({**base, n: size})
            if moved is not None:
                break
        if moved is None:  # no other size fits this dim alone (the model ties it to another): what follows it is
            if n == "batch":  # unknown, so an axis at its base size may be it (the batch always varies)
                return {}
            for k, dims in out.items():
                if dims is not None:
                    out[k] = [
                        UNKNOWN if type(d) is int and d == base[n] and at_base[k][a] == base[n] else d
                        for a, d in enumerate(dims)
                    ]
            continue
        for k, dims in list(out.items()):
            now = moved.get(k)
            if dims is None or now is None or len(now) != len(dims):
                out[k] = None
                continue
            for axis, (a, b) in enumerate(zip(at_base[k], now)):
                if a != b:  # follows n exactly, or some function of it (a flatten): unknown
                    dims[axis] = n if (a, b) == (base[n], size) and isinstance(dims[axis], int) else UNKNOWN
    return {k: (tuple(v) if v is not None else None) for k, v in out.items()}


def _onnx_inference(m: onnx.ModelProto) -> Optional[onnx.GraphProto]:
    try:
        return onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True).graph
    except Exception:  # noqa: BLE001 - inference failed as a whole: every output unknown (the load decides)
        return None


def _read_dims(graph: onnx.GraphProto, by_symbol: dict) -> dict:
    out: dict = {}
    for value in graph.output:
        t = value.type.tensor_type if value.type.WhichOneof("value") == "tensor_type" else None
        if t is None or not t.HasField("shape"):
            out[value.name] = None
            continue
        dims = []
        for d in t.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param in by_symbol:
                dims.append(by_symbol[d.dim_param])
            else:
                dims.append(UNKNOWN)
        out[value.name] = tuple(dims)
    return out


def depends_on(proto: onnx.ModelProto, inputs: set) -> set:
    """Names of the graph outputs computed from (the values or the shape of) any of ``inputs``: an output that
    depends on no batched input is the same for every request of a batch."""
    reached = set(inputs)
    for node in proto.graph.node:
        used = [i for i in node.input if i]
        for a in node.attribute:  # a subgraph reads outer names too
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                used += [i for n in all_nodes(g) for i in n.input if i]
        if any(i in reached for i in used):
            reached.update(o for o in node.output if o)
    return {o.name for o in proto.graph.output if o.name in reached}


def all_nodes(graph: onnx.GraphProto):
    """Every node of ``graph``, its subgraphs' (If branches, Loop bodies) included."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                yield from all_nodes(g)
