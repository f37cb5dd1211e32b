"""Per-operator shape rules of gert's own, for the operators of the models it serves most (CNNs, PP-OCR's det, cls
and rec), so that compile-time shape inference (gert/core/shape_infer.py) needs no ONNX there.

Each rule gives what ONNX's own per-node inference (``onnx.shape_inference.infer_node_outputs``) gives for a node
whose input shapes are all known, or None where it is not sure: an input shape not known, an attribute or opset it
does not read, shapes that do not fit (ONNX's inference then reports the error in its own words). None is never
wrong: the node goes to ONNX's inference. tests/test_shape_rules.py checks every rule against ONNX's inference with
generated nodes, and against ONNX Runtime's output shapes.

A rule: ``rule(node, shapes, elems, value, opset) -> [(elem_type, dims)] per output, or None`` (a dim None: not known
from the input shapes, see _window): ``shapes`` the inputs'
known dims (a tuple of ints, None where not known or absent), ``elems`` their element types, ``value(i, limit)`` the
constant value of input ``i`` (None where not a constant of at most ``limit`` elements), ``opset`` the model's
version of the default domain.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

_OPERAND = 16  # the largest shape operand a rule reads (= shape_infer._OPERAND_ELEMENTS: what ONNX is handed)


def _attrs(node) -> dict:
    return {a.name: a for a in node.attribute}


def _int(attrs: dict, name: str, default: int) -> int:
    a = attrs.get(name)
    return default if a is None else int(a.i)


def _ints(attrs: dict, name: str) -> Optional[list]:
    a = attrs.get(name)
    return None if a is None else [int(x) for x in a.ints]


def _text(attrs: dict, name: str, default: str) -> str:
    a = attrs.get(name)
    return default if a is None else a.s.decode("utf-8", "replace")


def _operand(value: Callable, node, i: int) -> Optional[list]:
    """Input ``i`` as a list of ints, if it is a constant 1-d integer tensor; None otherwise."""
    if len(node.input) <= i or not node.input[i]:
        return None
    v = value(i, _OPERAND)
    if v is None or v.ndim != 1 or v.dtype.kind not in "iu":
        return None
    return [int(x) for x in v]


def _toward_zero(a: int, b: int) -> int:
    """a / b rounded toward zero (C++'s integer division, which ONNX's shape inference uses), for b > 0."""
    return -(-a // b) if a < 0 else a // b


def _window(
    x: tuple, kernel: list, channels: int, attrs: dict, dilated: bool, ceil: bool = False, opset: int = 0
) -> Optional[list]:
    """Conv's and the pools' output dims, [N, channels, spatial...], for explicit or VALID padding. ``ceil`` (a
    pool's ceil_mode): the window count rounded up, less a last window that would start in the end padding, as ONNX
    Runtime's kernels (what the host NPU runs) and PyTorch count them, and ONNX's inference from the pools' version
    22 (onnx/onnx#3314). Before it ONNX's inference counts that window, and ONNX Runtime checks an output it is handed
    against that count while its kernel writes the other, so there the axis is None (not known from the shapes: the
    graph is compiled with unknown shapes, its outputs allocated at execution, as for a value-dependent output)."""
    n = len(x) - 2
    if len(kernel) != n or any(k < 1 for k in kernel):
        return None
    strides = _ints(attrs, "strides") or [1] * n
    dilations = (_ints(attrs, "dilations") if dilated else None) or [1] * n
    pads = _ints(attrs, "pads")
    auto_pad = _text(attrs, "auto_pad", "NOTSET")
    if _int(attrs, "ceil_mode", 0) not in ((0, 1) if ceil else (0,)) or auto_pad not in ("NOTSET", "VALID"):
        return None
    rounded_up = _int(attrs, "ceil_mode", 0) == 1
    if pads is not None and auto_pad != "NOTSET":
        return None
    pads = pads if pads is not None else [0] * (2 * n)
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
        return None
    if min(strides) < 1 or min(dilations) < 1 or min(pads) < 0:
        return None
    out: list = [x[0], channels]
    short = False  # some axis shorter than its window: ONNX's inference decides, unless the output is unknown anyway
    unknown = False  # an axis whose ONNX count is not the kernel's (ceil_mode, below)
    for i in range(n):
        span = x[2 + i] + pads[i] + pads[i + n] - ((kernel[i] - 1) * dilations[i] + 1)
        if span < 0:
            short = True
            out.append(None)
            # ceil_mode from version 22: ONNX's inference rounds the negative window count toward zero (1 window),
            # ONNX Runtime's kernel up (none): MaxPool over 1 value, kernel 3, stride 2. Unknown then.
            if rounded_up and opset >= 22 and _toward_zero(span + strides[i] - 1, strides[i]) != -(-span // strides[i]):
                unknown = True
            continue
        if not rounded_up:
            out.append(span // strides[i] + 1)
            continue
        count = -(-span // strides[i]) + 1
        if (count - 1) * strides[i] >= x[2 + i] + pads[i]:  # the last window would start in the end padding
            out.append(count - 1 if opset >= 22 else None)
            unknown = unknown or opset < 22
            continue
        out.append(count)
    if short and not unknown:
        return None
    return out


def _conv(node, shapes, elems, value, opset):
    x, w = shapes[0], shapes[1] if len(shapes) > 1 else None
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return None
    attrs = _attrs(node)
    group = _int(attrs, "group", 1)
    if group < 1 or x[1] != w[1] * group or w[0] % group:
        return None
    kernel = _ints(attrs, "kernel_shape")
    if kernel is not None and list(kernel) != list(w[2:]):
        return None
    out = _window(x, list(w[2:]), w[0], attrs, True)
    return None if out is None else [(elems[0], tuple(out))]


def _conv_transpose(node, shapes, elems, value, opset):
    x, w = shapes[0], shapes[1] if len(shapes) > 1 else None
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return None
    attrs = _attrs(node)
    n = len(x) - 2
    group = _int(attrs, "group", 1)
    if group < 1 or x[1] != w[0] or "output_shape" in attrs or _text(attrs, "auto_pad", "NOTSET") != "NOTSET":
        return None
    kernel = _ints(attrs, "kernel_shape")
    if kernel is not None and list(kernel) != list(w[2:]):
        return None
    strides = _ints(attrs, "strides") or [1] * n
    dilations = _ints(attrs, "dilations") or [1] * n
    pads = _ints(attrs, "pads") or [0] * (2 * n)
    extra = _ints(attrs, "output_padding") or [0] * n
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n or len(extra) != n:
        return None
    if min(strides) < 1 or min(dilations) < 1 or min(pads) < 0 or min(extra) < 0:
        return None
    out = [x[0], w[1] * group]
    for i in range(n):
        d = strides[i] * (x[2 + i] - 1) + extra[i] + (w[2 + i] - 1) * dilations[i] + 1 - pads[i] - pads[i + n]
        if d < 1:
            return None
        out.append(d)
    return [(elems[0], tuple(out))]


def _pool(node, shapes, elems, value, opset):
    x = shapes[0]
    if x is None or len(x) < 3 or len([o for o in node.output if o]) != 1 or node.output[0] == "":
        return None
    attrs = _attrs(node)
    kernel = _ints(attrs, "kernel_shape")
    if kernel is None:
        return None
    dilated = node.op_type == "MaxPool" and opset >= 10 or node.op_type == "AveragePool" and opset >= 19
    if not dilated and "dilations" in attrs:
        return None
    out = _window(x, kernel, x[1], attrs, dilated, ceil=opset >= 10, opset=opset)
    return None if out is None else [(elems[0], tuple(out))]


def _global_pool(node, shapes, elems, value, opset):
    x = shapes[0]
    if x is None or len(x) < 2:
        return None
    return [(elems[0], (x[0], x[1], *([1] * (len(x) - 2))))]


def _concat(node, shapes, elems, value, opset):
    axis = _attrs(node).get("axis")
    if axis is None or not shapes or any(s is None for s in shapes):
        return None
    rank = len(shapes[0])
    axis = int(axis.i)
    if rank == 0 or not -rank <= axis < rank or any(len(s) != rank for s in shapes):
        return None
    axis %= rank
    if any(s[:axis] + s[axis + 1 :] != shapes[0][:axis] + shapes[0][axis + 1 :] for s in shapes):
        return None
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [(elems[0], tuple(out))]


def _reshape(node, shapes, elems, value, opset):
    x = shapes[0]
    target = _operand(value, node, 1)
    if x is None or target is None or opset < 5:
        return None
    allowzero = opset >= 14 and _int(_attrs(node), "allowzero", 0) == 1
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(x):
                return None
            d = x[i]
        out.append(d)
    if out.count(-1) > 1 or any(d < -1 for d in out):
        return None
    total = math.prod(x)
    if -1 in out:
        rest = math.prod(d for d in out if d != -1)
        if rest == 0 or total % rest:
            return None
        out[out.index(-1)] = total // rest
    if math.prod(out) != total:
        return None
    return [(elems[0], tuple(out))]


def _transpose(node, shapes, elems, value, opset):
    x = shapes[0]
    if x is None:
        return None
    perm = _ints(_attrs(node), "perm")
    perm = list(range(len(x)))[::-1] if perm is None else perm
    if sorted(perm) != list(range(len(x))):
        return None
    return [(elems[0], tuple(x[p] for p in perm))]


def _matmul(node, shapes, elems, value, opset):
    a, b = shapes[0], shapes[1] if len(shapes) > 1 else None
    if a is None or b is None or not a or not b:
        return None
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        return None
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        return None
    out = [*batch, a2[-2], b2[-1]]
    if len(b) == 1:
        out.pop(-1)
    if len(a) == 1:
        out.pop(-2 if len(b) > 1 else -1)
    return [(elems[0], tuple(out))]


# the version from which a reduction takes its axes as an input (ReduceSum's is 13, the others' 18)
_AXES_INPUT = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18}


def _reduce(node, shapes, elems, value, opset):
    x = shapes[0]
    if x is None:
        return None
    attrs = _attrs(node)
    keep = _int(attrs, "keepdims", 1)
    if opset >= _AXES_INPUT[node.op_type]:
        if "axes" in attrs:
            return None
        given = len(node.input) > 1 and bool(node.input[1])
        axes = _operand(value, node, 1) if given else []
        if axes is None:
            return None
        if not axes and _int(attrs, "noop_with_empty_axes", 0):
            return [(elems[0], tuple(x))]
    else:
        axes = _ints(attrs, "axes") or []
    rank = len(x)
    if any(not -rank <= a < rank for a in axes):
        return None
    reduced = {a % rank for a in axes} if axes else set(range(rank))
    if node.op_type in ("ReduceMax", "ReduceMin") and any(x[a] == 0 for a in reduced):
        return None
    out = [1 if i in reduced else d for i, d in enumerate(x) if keep or i not in reduced]
    return [(elems[0], tuple(out))]


def _squeeze_axes(node, value, opset, attrs) -> Optional[list]:
    """Squeeze's / Unsqueeze's axes ([] where none given), or None where not a constant."""
    if opset < 13:
        return _ints(attrs, "axes") or []
    if len(node.input) < 2 or not node.input[1]:
        return []
    return _operand(value, node, 1)


def _squeeze(node, shapes, elems, value, opset):
    x = shapes[0]
    attrs = _attrs(node)
    axes = _squeeze_axes(node, value, opset, attrs)
    if x is None or axes is None:
        return None
    rank = len(x)
    if any(not -rank <= a < rank for a in axes):
        return None
    drop = {a % rank for a in axes} if axes else {i for i, d in enumerate(x) if d == 1}
    if len(drop) != len(axes) and axes or any(x[a] != 1 for a in drop):
        return None
    return [(elems[0], tuple(d for i, d in enumerate(x) if i not in drop))]


def _unsqueeze(node, shapes, elems, value, opset):
    x = shapes[0]
    attrs = _attrs(node)
    axes = _squeeze_axes(node, value, opset, attrs)
    if x is None or not axes:
        return None
    rank = len(x) + len(axes)
    if any(not -rank <= a < rank for a in axes):
        return None
    new = {a % rank for a in axes}
    if len(new) != len(axes):
        return None
    rest = iter(x)
    return [(elems[0], tuple(1 if i in new else next(rest) for i in range(rank)))]


def _slice(node, shapes, elems, value, opset):
    x = shapes[0]
    if x is None:
        return None
    rank = len(x)
    if opset < 10:
        attrs = _attrs(node)
        starts, ends, axes = _ints(attrs, "starts"), _ints(attrs, "ends"), _ints(attrs, "axes")
        steps = None
    else:
        starts, ends = _operand(value, node, 1), _operand(value, node, 2)
        axes = _operand(value, node, 3) if len(node.input) > 3 and node.input[3] else None
        steps = _operand(value, node, 4) if len(node.input) > 4 and node.input[4] else None
        if (len(node.input) > 3 and node.input[3] and axes is None) or (
            len(node.input) > 4 and node.input[4] and steps is None
        ):
            return None
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if len(axes) != len(starts) or len(steps) != len(starts) or any(not -rank <= a < rank for a in axes):
        return None
    axes = [a % rank for a in axes]
    if len(set(axes)) != len(axes) or 0 in steps:
        return None
    out = list(x)
    for a, s, e, st in zip(axes, starts, ends, steps):
        d = x[a]
        s, e = s + d if s < 0 else s, e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
            out[a] = max(0, -(-(e - s) // st))
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
            out[a] = max(0, -(-(s - e) // -st))
    return [(elems[0], tuple(out))]


def _cast(node, shapes, elems, value, opset):
    to = _attrs(node).get("to")
    if shapes[0] is None or to is None or int(to.i) in (0, 8):
        return None
    return [(int(to.i), tuple(shapes[0]))]


def _resize(node, shapes, elems, value, opset):
    x = shapes[0]
    attrs = _attrs(node)
    if x is None or opset < 11 or "axes" in attrs or "keep_aspect_ratio_policy" in attrs:
        return None
    sizes = _operand(value, node, 3) if len(node.input) > 3 and node.input[3] else None
    if sizes:
        return [(elems[0], tuple(sizes))] if len(sizes) == len(x) and min(sizes) >= 0 else None
    if len(node.input) < 3 or not node.input[2] or (len(node.input) > 3 and node.input[3] and sizes is None):
        return None
    scales = value(2, _OPERAND)
    if scales is None or scales.ndim != 1 or scales.dtype != np.float32 or len(scales) != len(x):
        return None
    if min(scales) <= 0:
        return None
    return [(elems[0], tuple(int(np.floor(np.float32(d) * s)) for d, s in zip(x, scales)))]


def _gather(node, shapes, elems, value, opset):
    x, idx = shapes[0], shapes[1] if len(shapes) > 1 else None
    if x is None or idx is None or not x:
        return None
    axis = _int(_attrs(node), "axis", 0)
    if not -len(x) <= axis < len(x):
        return None
    axis %= len(x)
    return [(elems[0], (*x[:axis], *idx, *x[axis + 1 :]))]


def _flatten(node, shapes, elems, value, opset):
    x = shapes[0]
    if x is None:
        return None
    axis = _int(_attrs(node), "axis", 1)
    if not -len(x) <= axis <= len(x):
        return None
    axis = axis + len(x) if axis < 0 else axis
    return [(elems[0], (math.prod(x[:axis]), math.prod(x[axis:])))]


RULES: dict = {
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "Concat": _concat,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "MatMul": _matmul,
    **dict.fromkeys(_AXES_INPUT, _reduce),
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Slice": _slice,
    "Cast": _cast,
    "Resize": _resize,
    "Gather": _gather,
    "Flatten": _flatten,
}


def output_types(node, shapes: list, elems: list, value: Callable, opset: Optional[int]) -> Optional[list]:
    """[(elem_type, dims)] per output of ``node`` by gert's rule for it, or None: ONNX's inference decides."""
    if (node.domain or "") not in ("", "ai.onnx") or opset is None:
        return None
    rule = RULES.get(node.op_type)
    if rule is None or not node.input or not node.output:
        return None
    if any(e == 0 for e, s in zip(elems, shapes) if s is not None):
        return None
    out = rule(node, shapes, elems, value, opset)
    if out is None or len(out) != len(node.output) or any(d is not None and d < 0 for _, dims in out for d in dims):
        return None
    return out
