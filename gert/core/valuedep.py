"""Models whose output shapes depend on input values (NonZero, NonMaxSuppression, Resize by input scales, an If on
an input, ...): what gert.Model does differently for them.

GE compiles such a model as an unknown-shape graph even with every input dim fixed, and allocates those outputs at
execution (ge-shapes-and-cache.md, A1/A2); the executor's unknown-shape path then copies each one once, from GE's
buffer into the result. What Model decides up front lives here:

- which outputs are value-dependent, by a taint analysis of the ONNX graph: an output is value-dependent when an
  operator that decides its shape from data (NonZero, NMS, ...) or a shape operand (Reshape's shape, Resize's
  scales, Slice's starts, an If's condition, ...) computed from input *values* lies on its path. Shape-derived
  operands (Shape -> Gather -> Concat -> Reshape, as exporters write) do not count: GE folds them.
- (the batch policy that follows, ``exact`` by default for such models, is gert.core.shapes'.)
- graph outputs without a shape or type in the ONNX file (legal: ONNX leaves them to inference) get them from
  shape inference, with the input dims' symbolic names where they carry through.
"""

from __future__ import annotations


import onnx


# Operators whose output shape is decided by input data.
_DATA_SHAPED = {"NonZero", "NonMaxSuppression", "Compress", "Unique"}
# Inputs (by position) whose values decide the output shape.
_SHAPE_OPERANDS: dict = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "Slice": (1, 2, 3, 4),
    "Pad": (1, 3),
    "Resize": (2, 3),
    "Upsample": (1,),
    "Range": (0, 1, 2),
    "ConstantOfShape": (0,),
    "OneHot": (1,),
    "TopK": (1,),
    "Split": (1,),
    "Unsqueeze": (1,),
    "Squeeze": (1,),
    "CenterCropPad": (1,),
    "Col2Im": (1, 2),
    "DFT": (1,),
    "STFT": (1, 3),
    "HannWindow": (0,),
    "HammingWindow": (0,),
    "BlackmanWindow": (0,),
    "MelWeightMatrix": (0, 1),
    "MaxUnpool": (2,),
    "AffineGrid": (1,),
    "If": (0,),
}
_REDUCE = {
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
}


def _taint(graph: onnx.GraphProto, value: dict, shape: dict) -> None:
    """Marks, per tensor name, ``value``: its value depends on input values; ``shape``: its shape does."""
    for init in graph.initializer:
        value[init.name] = shape[init.name] = False
    for node in graph.node:
        op = node.op_type if node.domain in ("", "ai.onnx") else None
        ins = [i for i in node.input if i]
        in_shape = any(shape.get(i, False) for i in ins)
        operands = _SHAPE_OPERANDS.get(op, (1,) if op in _REDUCE else ())
        from_values = any(value.get(node.input[k], False) for k in operands if k < len(node.input) and node.input[k])
        sub_value = False
        for a in node.attribute:  # subgraphs (If branches) see the outer names
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                _taint(g, value, shape)
                in_shape = in_shape or any(shape.get(o.name, False) for o in g.output)
                sub_value = sub_value or any(value.get(o.name, False) for o in g.output)
        out_shape = op in _DATA_SHAPED or in_shape or from_values
        if op in ("Shape", "Size"):
            out_value = in_shape
        elif op == "Constant":
            out_value = False
        else:
            out_value = any(value.get(i, False) for i in ins) or out_shape or sub_value
        for o in node.output:
            value[o], shape[o] = out_value, out_shape


def value_dependent_outputs(model: onnx.ModelProto) -> list:
    """Names of the graph outputs whose shape depends on input values."""
    value, shape = {}, {}
    inits = {i.name for i in model.graph.initializer}
    for i in model.graph.input:
        if i.name not in inits:
            value[i.name], shape[i.name] = True, False
    _taint(model.graph, value, shape)
    return [o.name for o in model.graph.output if shape.get(o.name, False)]


def complete_outputs(model: onnx.ModelProto, io: dict) -> dict:
    """``io`` (gert._cann.read_onnx_io) with each output that has no shape or no type in the file given what shape
    inference finds for the declared inputs: symbolic dims keep their names, unknown dims are None."""
    todo = [k for k, (_, elem, dims) in enumerate(io["outputs"]) if dims is None or not elem]
    if not todo:
        return io
    from gert.core import shape_infer as _shape_infer

    inferred = _shape_infer.infer(model, {name: dims for name, _, dims in io["inputs"] if dims is not None})
    outputs = list(io["outputs"])
    for k in todo:
        name, elem, dims = outputs[k]
        outputs[k] = (name, elem or inferred.output_elem[k], dims if dims is not None else inferred.output_dims[k])
    return dict(io, outputs=outputs)
