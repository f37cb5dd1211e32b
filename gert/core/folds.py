"""The constant folds GE's shape inference (gert/core/shape_infer.py) computes itself, in numpy.

Two kinds:

- ``SPEC``: where ``onnx.reference`` differs from ONNX's spec and ONNX Runtime (Slice with a negative step, GlobalMaxPool);
- ``DIRECT``: the operators of exporters' shape computations (Shape -> Cast -> Slice -> Concat -> Reshape, Gather,
  Unsqueeze, integer arithmetic), computed as ``onnx.reference`` computes them, so that a model whose folds are all
  of these never imports ``onnx.reference``: importing it costs ~12 MB of resident memory per process (its operator
  table), which a serving process (a Triton stub) would keep for good (issue 41). Every other operator still folds
  with ``onnx.reference`` (shape_infer imports it then). tests/test_shape_infer_folds.py checks each direct fold
  against ``onnx.reference`` and ONNX Runtime.

A fold returns its outputs (numpy arrays), or None where it does not handle the node as given (an opset, attribute or
dtype it leaves to ``onnx.reference``); it raises where ``onnx.reference`` raises (the node is then inferred, not
folded). One difference, on purpose: ``onnx.reference`` runs a lone node at the latest opset whatever the model
imports, so Squeeze / Unsqueeze of opset < 13 (axes an attribute) lost their axes there (Squeeze squeezed every axis
of size 1, Unsqueeze did not fold); here they take the attribute, as ONNX Runtime does.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

# a node: onnx.NodeProto, or gert.core.wire_graph.WireNode (the same fields, read without onnx)
NodeProto = Any
Fold = Callable[[NodeProto, list, int], Optional[list]]  # (node, input values, opset of "") -> outputs or None
_INT, _INTS = 2, 7  # AttributeProto.AttributeType
# TensorProto.DataType
_FLOAT, _UINT8, _INT8, _UINT16, _INT16, _INT32, _INT64, _BOOL, _FLOAT16, _DOUBLE, _UINT32, _UINT64 = (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    9,
    10,
    11,
    12,
    13,
)


def _attrs(node: NodeProto) -> dict:
    """The node's int and ints attributes by name (the only kinds the direct folds read); others map to None."""
    out: dict = {}
    for a in node.attribute:
        if a.type == _INT:
            out[a.name] = int(a.i)
        elif a.type == _INTS:
            out[a.name] = [int(x) for x in a.ints]
        else:
            out[a.name] = None
    return out


# ---- where onnx.reference differs from the spec ----------------------------------------------------------------------
def _slice(node: NodeProto, ins: list, opset: int) -> Optional[list]:
    """Slice (opset >= 10) as ONNX's spec and ONNX Runtime clamp it: with a negative step, starts are clamped to
    [0, dim - 1] and ends to [-1, dim - 1]. onnx.reference slices with numpy's rules, which differ there (a start
    below the axis gives nothing instead of its first element): GE's shapes would not be ONNX Runtime's."""
    if opset < 10:
        return None
    data, starts, ends = ins[0], ins[1], ins[2]
    axes = ins[3] if len(ins) > 3 and ins[3] is not None else np.arange(len(starts))
    steps = ins[4] if len(ins) > 4 and ins[4] is not None else np.ones(len(starts), np.int64)
    index = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts.tolist(), ends.tolist(), axes.tolist(), steps.tolist()):
        a = a + data.ndim if a < 0 else a
        d = data.shape[a]
        s, e = s + d if s < 0 else s, e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        index[a] = slice(s, None if e < 0 else e, st)
    return [data[tuple(index)]]


def _global_max_pool(node: NodeProto, ins: list, opset: int) -> list:
    """GlobalMaxPool keeps N and C and makes every spatial axis 1 (onnx.reference drops or adds axes)."""
    x = ins[0]
    return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]


SPEC: dict = {"Slice": _slice, "GlobalMaxPool": _global_max_pool}


# ---- as onnx.reference computes them ---------------------------------------------------------------------------------
# ONNX element types Cast folds here: the plain numpy ones (float8, bfloat16, 4-bit and string casts go to onnx.reference)
_CAST_TO = {
    _FLOAT: np.float32,
    _DOUBLE: np.float64,
    _FLOAT16: np.float16,
    _BOOL: np.bool_,
    _INT8: np.int8,
    _INT16: np.int16,
    _INT32: np.int32,
    _INT64: np.int64,
    _UINT8: np.uint8,
    _UINT16: np.uint16,
    _UINT32: np.uint32,
    _UINT64: np.uint64,
}


def _plain(x) -> bool:
    """A numpy array of bool, int, uint or float (not float8 / bfloat16, which ml_dtypes defines)."""
    return isinstance(x, np.ndarray) and x.dtype.kind in "biuf" and x.dtype.type.__module__ == "numpy"


def _cast(node: NodeProto, ins: list, opset: int) -> Optional[list]:
    to = _attrs(node).get("to")
    if to not in _CAST_TO or not _plain(ins[0]):
        return None
    return [ins[0].astype(_CAST_TO[to])]


def _concat(node: NodeProto, ins: list, opset: int) -> Optional[list]:
    axis = _attrs(node).get("axis")
    if axis is None or any(v is None for v in ins):
        return None
    for a in ins:
        rank = a.ndim
        if rank == 0:
            raise ValueError("Concat: one input has an empty shape")
        if not -rank <= axis < rank:
            raise ValueError(f"Concat: axis {axis} is out of range for input rank {rank}")
    return [np.concatenate(tuple(ins), axis)]


def _reshape(node: NodeProto, ins: list, opset: int) -> Optional[list]:
    if opset < 5 or len(ins) < 2 or ins[0] is None or ins[1] is None:
        return None
    data, shape = ins[0], ins[1]
    allowzero = _attrs(node).get("allowzero", 0) == 1 if opset >= 14 else 0
    new_shape = np.copy(shape)
    if not allowzero:
        zeros = np.where(shape == 0)
        new_shape[zeros] = np.array(data.shape)[zeros]
    return [np.reshape(data, new_shape)]


def _axes(node: NodeProto, ins: list, opset: int):
    """Squeeze's / Unsqueeze's axes as a tuple: the attribute before opset 13, the second input since; None where
    not given; False where not a 1-d list (left to onnx.reference)."""
    if opset < 13:
        axes = _attrs(node).get("axes")
        return tuple(axes) if axes else None
    axes = ins[1] if len(ins) > 1 else None
    if axes is None:
        return None
    return tuple(int(a) for a in axes) if axes.ndim == 1 else False


def _unsqueeze(node: NodeProto, ins: list, opset: int) -> Optional[list]:
    axes = _axes(node, ins, opset)
    if not axes:  # none given: onnx.reference raises (not folded)
        return None
    return [np.expand_dims(ins[0], axis=axes)]  # axes index the output, in any order (ONNX's spec, numpy's rule)


def _squeeze(node: NodeProto, ins: list, opset: int) -> Optional[list]:
    axes = _axes(node, ins, opset)
    if axes is False:
        return None
    return [np.squeeze(ins[0], axis=axes)]  # None: every axis of size 1


def _gather(node: NodeProto, ins: list, opset: int) -> Optional[list]:
    x, indices = ins[0], ins[1]
    axis = _attrs(node).get("axis", 0)
    if axis is None or x is None or indices is None:
        return None
    if not x.flags["C_CONTIGUOUS"]:  # (np.ascontiguousarray makes a 0-d array 1-d: only where needed)
        x = np.ascontiguousarray(x)
    if not indices.flags["C_CONTIGUOUS"]:
        indices = np.ascontiguousarray(indices)
    try:
        return [np.take(x, indices, axis=axis)]
    except TypeError:  # indices numpy does not take as they are (floats): truncated, as onnx.reference does
        return [np.take(x, indices.astype(int), axis=axis)]


def _identity(node: NodeProto, ins: list, opset: int) -> Optional[list]:
    return None if ins[0] is None else [ins[0].copy()]


def _binary(fn: Callable) -> Fold:
    """An arithmetic operator as onnx.reference's binary operators run it: both inputs of one dtype, the result of
    that dtype (else it raises), numpy scalars made 0-d arrays."""

    def fold(node: NodeProto, ins: list, opset: int) -> Optional[list]:
        if len(ins) != 2 or not _plain(ins[0]) or not _plain(ins[1]):
            return None
        x, y = ins
        if x.dtype != y.dtype:
            raise TypeError(f"input type mismatch: {x.dtype} != {y.dtype}")
        out = np.asarray(fn(x, y))
        if out.dtype != x.dtype:
            raise TypeError(f"output type mismatch: {x.dtype} != {out.dtype}")
        return [out]

    return fold


DIRECT: dict = {
    "Cast": _cast,
    "Concat": _concat,
    "Reshape": _reshape,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Gather": _gather,
    "Identity": _identity,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
}


def fold(node: NodeProto, ins: list, opset: Optional[int]) -> Optional[list]:
    """``node``'s outputs from its constant inputs ``ins`` (None for an input left out), by SPEC or DIRECT, or None:
    fold it with onnx.reference. ``opset``: the model's version of the default domain "" (None: the model imports
    none; then only SPEC folds, taking version 1)."""
    if (node.domain or "") not in ("", "ai.onnx"):
        return None
    spec = SPEC.get(node.op_type)
    if spec is not None:
        return spec(node, ins, 1 if opset is None else opset)
    direct = DIRECT.get(node.op_type) if not node.domain and opset is not None else None
    outs = None if direct is None else direct(node, ins, opset)
    return None if outs is None else [np.array(v) if np.isscalar(v) else v for v in outs]  # as onnx.reference's
