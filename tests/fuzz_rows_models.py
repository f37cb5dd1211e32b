"""Random small ONNX models, gert.load options and requests for the differential row fuzzer (issue 36, item 6).

A ``Case`` is plain data (its repr is a literal: paste it into tests/test_fuzz_rows.py's REGRESSIONS): the model's
inputs, nodes, initializers and outputs, the load options, the front door, the requests. ``model_code`` and
``feeds_code`` turn it into Python source built on onnx.helper and numpy; the fuzzer executes exactly that source,
so the repro script printed for a failure builds the same model and the same inputs.

The generator tracks, for every tensor, its layout (per axis: ``"B"`` the batch rows, ``"T"`` a second dynamic
dim, ``"M"`` a size derived from them (2N, N-1, N*4, k from an input), or a fixed int) and tags saying why its
rows may not be a function of the same input rows alone (``rows_mixed:<op>``: mixes rows along the batch;
``t_mixed:<op>``: the same along T; ``glob:<op>``: computed from every row without carrying the batch). The tags
say which known defect class a failure belongs to; they never decide what the right answer is (ONNX Runtime does).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st

OPSET = 18
FIXED = (1, 2, 3, 4)
FAMILIES = ("elementwise", "matmul", "conv", "shape", "reduce", "softmax", "topk", "rnn", "shapeval")
DOORS = ("run", "run_list", "run_batch", "threads_run", "submit", "run_async", "session")
LIST_DOORS = ("run_list", "run_batch")
UNARY = ("Relu", "Tanh", "Sigmoid", "Neg", "Abs", "Sin")
BINARY = ("Add", "Sub", "Mul", "Max", "Min")
RNN_OPS = {"RNN": 1, "GRU": 3, "LSTM": 4}


@dataclasses.dataclass
class Case:
    """One fuzz example: model, options, front door and requests (plain literals: its repr rebuilds it)."""

    inputs: list  # [(name, "float32" | "int64", layout, high)]: layout of "B" | "T" | int; high: int range
    nodes: list  # [(op_type, [inputs], [outputs], {attrs})]
    inits: list  # [(name, dtype, shape, values)]: values a flat list, or ("randn", seed, scale)
    outputs: list  # [(name, dtype, dims)]: dims of "B" | "T" | int | None (no size, no name)
    bname: str | None  # the batch axis's ONNX dim name (None: unnamed)
    tname: str | None  # the second dynamic dim's name (None: unnamed)
    options: dict  # gert.load keyword arguments ("nan" stands for float("nan"))
    door: str
    requests: list  # [(rows, tsize, bad)]: bad None | "dtype" | "fixed_dim" | "rank" | "missing"
    seed: int
    shared_params: bool  # inputs without the batch axis: the same values in every request
    tags: dict  # output name -> [tags]; "*" -> the model's own tags ("rnn")
    families: list  # op families used
    repeat: int = 1  # the door called this many times with the same requests (then: hot path, static graphs)
    # seconds a run takes per batch gear, seeded as if measured, so that merged batches get cut into gear-sized
    # groups of whole requests (gert/core/gear_pieces.py) as a slow model's would; None: as measured
    gear_costs: dict | None = None


# ---- source code of a case ---------------------------------------------------------------------------------------

_DT = {"float32": "TensorProto.FLOAT", "int64": "TensorProto.INT64"}


def _dim(kind, case: Case):
    if kind == "B":
        return case.bname
    if kind == "T":
        return case.tname
    return kind if isinstance(kind, int) else None


def model_code(case: Case) -> str:
    """Python source that builds the case's model with onnx.helper into ``model_bytes``."""
    lines = ["nodes = ["]
    for op, ins, outs, attrs in case.nodes:
        extra = "".join(f", {k}={v!r}" for k, v in attrs.items())
        lines.append(f"    helper.make_node({op!r}, {list(ins)!r}, {list(outs)!r}{extra}),")
    lines.append("]")
    lines.append("inits = [")
    for name, dtype, shape, values in case.inits:
        if isinstance(values, tuple) and values and values[0] == "randn":
            _, seed, scale = values
            arr = f"(np.random.default_rng({seed}).standard_normal({tuple(shape)!r}) * {scale}).astype(np.{dtype})"
        else:
            arr = f"np.array({list(values)!r}, np.{dtype}).reshape({tuple(shape)!r})"
        lines.append(f"    numpy_helper.from_array({arr}, {name!r}),")
    lines.append("]")
    lines.append("inputs = [")
    for name, dtype, layout, _ in case.inputs:
        lines.append(f"    helper.make_tensor_value_info({name!r}, {_DT[dtype]}, {[_dim(k, case) for k in layout]!r}),")
    lines.append("]")
    lines.append("outputs = [")
    for name, dtype, dims in case.outputs:
        lines.append(f"    helper.make_tensor_value_info({name!r}, {_DT[dtype]}, {[_dim(k, case) for k in dims]!r}),")
    lines.append("]")
    lines.append('graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)')
    lines.append(f'model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", {OPSET})])')
    lines.append("model.ir_version = 8")
    lines.append("model_bytes = model.SerializeToString()")
    return "\n".join(lines)


def _array_code(name: str, dtype: str, layout, high, rows: int, tsize: int, bad: str | None) -> str:
    shape = [rows if k == "B" else tsize if k == "T" else k for k in layout]
    if bad == "fixed_dim":
        i = next(i for i, k in enumerate(layout) if isinstance(k, int))
        shape[i] += 1
    if bad == "rank":
        shape = [1] + shape
    if dtype == "float32":
        code = f"rng.standard_normal({tuple(shape)!r}).astype(np.float32)"
    elif high is not None and name.startswith("k"):
        code = f"np.array([rng.integers(1, {high + 1})], np.int64)"
    else:
        code = f"rng.integers(-{high}, {high}, {tuple(shape)!r}).astype(np.int64)"
    if bad == "dtype":
        code += ".astype(np.float64)" if dtype == "float32" else ".astype(np.int32)"
    return code


def feeds_code(case: Case) -> str:
    """Python source that makes the case's requests into ``requests`` (a list of input name -> array)."""
    lines = [f"rng = np.random.default_rng({case.seed})"]
    batched = [i for i in case.inputs if "B" in i[2] or "T" in i[2]]
    params = [i for i in case.inputs if i not in batched]
    if case.shared_params and params:
        lines.append(
            "P = {" + ", ".join(f"{n!r}: {_array_code(n, d, lay, h, 0, 0, None)}" for n, d, lay, h in params) + "}"
        )
    lines.append("requests = [")
    for rows, tsize, bad in case.requests:
        bad_input = _bad_target(case, bad)
        parts = []
        for n, d, lay, h in case.inputs:
            if case.shared_params and (n, d, lay, h) in params and n != bad_input:
                continue
            if bad == "missing" and n == bad_input:
                continue
            parts.append(f"{n!r}: {_array_code(n, d, lay, h, rows, tsize, bad if n == bad_input else None)}")
        if case.shared_params and params:
            rest = [n for n, *_ in params if n != bad_input]
            parts += [f"{n!r}: P[{n!r}]" for n in rest]
        lines.append("    {" + ", ".join(parts) + "},")
    lines.append("]")
    return "\n".join(lines)


def _bad_target(case: Case, bad: str | None) -> str | None:
    """The input a bad request spoils: the first with a fixed dim for "fixed_dim", else the first input."""
    if bad is None:
        return None
    if bad == "fixed_dim":
        return next(n for n, _, lay, _ in case.inputs if any(isinstance(k, int) for k in lay))
    return case.inputs[0][0]


def options_code(case: Case) -> str:
    text = repr(case.options)
    return text.replace("'nan'", 'float("nan")')


def load_options(case: Case) -> dict:
    """The case's gert.load options as Python values."""
    return eval(options_code(case), {})  # noqa: S307 - our own literal


# ---- the generator -------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _T:
    name: str
    layout: tuple
    dtype: str
    tags: frozenset

    @property
    def plain(self) -> bool:
        """Only B, T and fixed axes, each dynamic one at most once: any block may take it."""
        return (
            len(self.layout) > 0
            and "M" not in self.layout
            and self.layout.count("B") <= 1
            and self.layout.count("T") <= 1
            and self.dtype == "float32"
        )


def _mix(t: _T, axes) -> set:
    """Tags of an op on ``t`` that combines values along ``axes``."""
    tags = set()
    for a in axes:
        if t.layout[a] == "B":
            tags.add("rows_mixed")
        elif t.layout[a] == "T":
            tags.add("t_mixed")
    return tags


class Builder:
    """Draws a random model: a few blocks of op families on tensors of known layout."""

    def __init__(self, draw):
        self.draw = draw
        self.n = 0
        self.inputs: list = []
        self.nodes: list = []
        self.inits: list = []
        self.pool: list = []
        self.families: list = []
        self.model_tags: set = set()

    # ---- helpers
    def pick(self, options):
        return uniform(self.draw, list(options))

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def node(self, op: str, ins: list, outs: list, **attrs) -> None:
        self.nodes.append((op, list(ins), list(outs), attrs))

    def const_i(self, values, shape=None) -> str:
        name = self.fresh("c")
        values = list(values)
        self.inits.append((name, "int64", list(shape if shape is not None else [len(values)]), values))
        return name

    def const_f(self, shape, scale: float = 0.5) -> str:
        name = self.fresh("w")
        self.inits.append((name, "float32", list(shape), ("randn", self.draw(st.integers(0, 999)), scale)))
        return name

    def add(self, layout, tags, dtype="float32", name=None) -> _T:
        t = _T(name or self.fresh("t"), tuple(layout), dtype, frozenset(tags))
        self.pool.append(t)
        return t

    def tags_of(self, t: _T, op: str, kinds: set) -> set:
        tags = set(t.tags)
        for k in kinds:
            tags.add(f"{k}:{op}")
        return tags

    # ---- inputs
    def make_inputs(self) -> None:
        rank = self.draw(st.integers(2, 4))
        bpos = self.pick([0, 0, 0, 1, 1, rank - 1])
        tpos = self.pick([None, None] + [a for a in range(rank) if a != bpos])
        layout = tuple("B" if a == bpos else "T" if a == tpos else self.pick(FIXED) for a in range(rank))
        self.inputs.append(("x", "float32", layout, None))
        self.add(layout, set(), name="x")
        if chance(self.draw, 0.25):
            self.inputs.append(("x2", "float32", layout, None))
            self.add(layout, set(), name="x2")

    def param(self, shape) -> str:
        name = self.fresh("p")
        self.inputs.append((name, "float32", tuple(shape), None))
        return name

    # ---- blocks
    def block(self) -> None:
        for _ in range(8):
            family = self.pick(FAMILIES + ("rnn", "conv", "matmul", "shape"))
            plain = [t for t in self.pool if t.plain]
            recent = plain[-3:] if plain else []
            if not recent:
                return
            t = self.pick(recent)
            if getattr(self, "b_" + family)(t):
                self.families.append(family)
                return

    def b_elementwise(self, t: _T) -> bool:
        kind = self.pick(["unary", "const", "param", "tensor"])
        if kind == "unary":
            out = self.fresh("t")
            self.node(self.pick(UNARY), [t.name], [out])
            self.add(t.layout, t.tags, name=out)
            return True
        op = self.pick(BINARY)
        if kind == "const":
            k = self.draw(st.integers(0, len(t.layout)))
            shape = [a if isinstance(a, int) else 1 for a in t.layout[len(t.layout) - k :]]
            other = self.const_f(shape)
            out = self.fresh("t")
            self.node(op, [t.name, other] if self.draw(st.booleans()) else [other, t.name], [out])
            self.add(t.layout, t.tags, name=out)
            return True
        if kind == "param":
            last = t.layout[-1]
            shape = [last] if isinstance(last, int) and self.draw(st.booleans()) else []
            other = self.param(shape)
            out = self.fresh("t")
            self.node(op, [t.name, other], [out])
            self.add(t.layout, t.tags, name=out)
            return True
        others = [u for u in self.pool if u.plain and u.name != t.name and _broadcast(t.layout, u.layout) is not None]
        if not others:
            return False
        u = self.pick(others)
        layout = _broadcast(t.layout, u.layout)
        tags = set(t.tags) | set(u.tags)
        if layout.count("B") > 1:
            tags.add("batch_two_axes:broadcast")
        if layout.count("T") > 1:
            tags.add("t_mixed:broadcast_two_axes")
        for a, _b in ((t, u), (u, t)):  # a reduction over the batch broadcast back onto rows mixes them
            if any(x.startswith("glob:") for x in a.tags) and "B" in layout:
                tags.add("rows_mixed:broadcast_batch_reduction")
            if any(x.startswith("tglob:") for x in a.tags) and "T" in layout:
                tags.add("t_mixed:broadcast_t_reduction")
        out = self.fresh("t")
        self.node(op, [t.name, u.name], [out])
        self.add(layout, tags, name=out)
        return True

    def b_matmul(self, t: _T) -> bool:
        lay = t.layout
        kind = self.pick(["matmul", "gemm", "self"])
        if kind == "matmul" and isinstance(lay[-1], int):
            g = self.pick([1, 2, 3])
            w = self.const_f([lay[-1], g])
            out = self.fresh("t")
            self.node("MatMul", [t.name, w], [out])
            self.add(lay[:-1] + (g,), t.tags, name=out)
            return True
        if kind == "gemm" and len(lay) == 2 and (isinstance(lay[0], int) or isinstance(lay[1], int)):
            trans_a = 0 if isinstance(lay[1], int) else 1
            k, rows = (lay[1], lay[0]) if trans_a == 0 else (lay[0], lay[1])
            g = self.pick([1, 2, 3])
            trans_b = self.pick([0, 1])
            w = self.const_f([g, k] if trans_b else [k, g])
            ins = [t.name, w] + ([self.const_f([g])] if self.draw(st.booleans()) else [])
            out = self.fresh("t")
            self.node("Gemm", ins, [out], transA=trans_a, transB=trans_b, alpha=self.pick([1.0, 0.5]))
            self.add((rows, g), t.tags, name=out)
            return True
        if kind == "self" and len(lay) == 2:
            tr = self.fresh("t")
            self.node("Transpose", [t.name], [tr], perm=[1, 0])
            out = self.fresh("t")
            if self.draw(st.booleans()):  # t @ t^T: [a, a], contracted over lay[1]
                self.node("MatMul", [t.name, tr], [out])
                a, c = lay[0], lay[1]
            else:  # t^T @ t: [b, b], contracted over lay[0]
                self.node("MatMul", [tr, t.name], [out])
                a, c = lay[1], lay[0]
            tags = set(t.tags)
            if a == "B":
                tags.add("batch_two_axes:MatMul")
            if a == "T":
                tags.add("t_mixed:MatMul_two_axes")
            if c == "B":
                tags.add("glob:MatMul_contracts_batch")
            if c == "T":
                tags.add("tglob:MatMul_contracts_t")
            self.add((a, a), tags, name=out)
            return True
        return False

    def b_conv(self, t: _T) -> bool:
        lay = t.layout
        if len(lay) not in (3, 4) or not isinstance(lay[1], int):
            return False
        spatial = list(range(2, len(lay)))
        op = self.pick(["Conv", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
        out = self.fresh("t")
        if op.startswith("Global"):
            self.node(op, [t.name], [out])
            tags = set(t.tags)
            for a in spatial:
                if lay[a] == "B":
                    tags.add("glob:" + op)
                if lay[a] == "T":
                    tags.add("tglob:" + op)
            self.add(lay[:2] + (1,) * len(spatial), tags, name=out)
            return True
        k = self.pick([1, 3]) if op == "Conv" else 3
        attrs = dict(kernel_shape=[k] * len(spatial), pads=[k // 2] * (2 * len(spatial)))
        mixed = _mix(t, spatial) if k > 1 else set()
        if op == "Conv":
            cout = self.pick([1, 2, 3])
            ins = [t.name, self.const_f([cout, lay[1]] + [k] * len(spatial))]
            if self.draw(st.booleans()):
                ins.append(self.const_f([cout]))
            self.node("Conv", ins, [out], **attrs)
            self.add((lay[0], cout) + lay[2:], self.tags_of(t, op, mixed), name=out)
        else:
            self.node(op, [t.name], [out], **attrs)
            self.add(lay, self.tags_of(t, op, mixed), name=out)
        return True

    def b_shape(self, t: _T) -> bool:
        lay = t.layout
        r = len(lay)
        op = self.pick(
            [
                "Transpose",
                "Reshape",
                "Flatten",
                "Squeeze",
                "Unsqueeze",
                "Split",
                "Concat",
                "Slice",
                "Gather",
                "Tile",
                "Expand",
                "Pad",
            ]
        )
        out = self.fresh("t")
        fixed = [a for a in range(r) if isinstance(lay[a], int)]
        if op == "Transpose":
            perm = self.draw(st.permutations(range(r)))
            self.node("Transpose", [t.name], [out], perm=list(perm))
            self.add(tuple(lay[p] for p in perm), t.tags, name=out)
            return True
        if op == "Reshape":
            return self._reshape(t, out)
        if op == "Flatten":
            axis = self.draw(st.integers(0, r))
            left, right = lay[:axis], lay[axis:]
            self.node("Flatten", [t.name], [out], axis=axis)
            tags = set(t.tags)
            self.add((_merged(left, tags, "Flatten"), _merged(right, tags, "Flatten")), tags, name=out)
            return True
        if op == "Squeeze":
            ones = [a for a in fixed if lay[a] == 1]
            if not ones:
                return False
            axes = sorted(self.draw(st.lists(st.sampled_from(ones), min_size=1, unique=True)))
            self.node("Squeeze", [t.name, self.const_i(axes)], [out])
            self.add(tuple(k for a, k in enumerate(lay) if a not in axes), t.tags, name=out)
            return True
        if op == "Unsqueeze":
            if r >= 5:
                return False
            axis = self.draw(st.integers(-r - 1, r))
            self.node("Unsqueeze", [t.name, self.const_i([axis])], [out])
            pos = axis if axis >= 0 else axis + r + 1
            self.add(lay[:pos] + (1,) + lay[pos:], t.tags, name=out)
            return True
        if op == "Split":
            axis = self.pick(range(r))
            o1, o2 = out, self.fresh("t")
            if isinstance(lay[axis], int):
                if lay[axis] < 2:
                    return False
                a = self.draw(st.integers(1, lay[axis] - 1))
                self.node("Split", [t.name, self.const_i([a, lay[axis] - a])], [o1, o2], axis=axis)
                self.add(lay[:axis] + (a,) + lay[axis + 1 :], t.tags, name=o1)
                self.add(lay[:axis] + (lay[axis] - a,) + lay[axis + 1 :], t.tags, name=o2)
                return True
            tags = self.tags_of(t, "Split", _mix(t, [axis]))
            self.node("Split", [t.name], [o1, o2], axis=axis, num_outputs=2)
            m = lay[:axis] + ("M",) + lay[axis + 1 :]
            self.add(m, tags, name=o1)
            self.add(m, tags, name=o2)
            return True
        if op == "Concat":
            same = [u for u in self.pool if u.layout == lay and u.dtype == "float32"]
            u = self.pick(same)
            axis = self.pick(range(r))
            tags = set(t.tags) | set(u.tags)
            if isinstance(lay[axis], int):
                new = lay[:axis] + (2 * lay[axis],) + lay[axis + 1 :]
            else:
                tags |= {f"{k}:Concat" for k in _mix(t, [axis])}
                new = lay[:axis] + ("M",) + lay[axis + 1 :]
            self.node("Concat", [t.name, u.name], [out], axis=axis - r if self.draw(st.booleans()) else axis)
            self.add(new, tags, name=out)
            return True
        if op == "Slice":
            return self._slice(t, out)
        if op == "Gather":
            return self._gather(t, out)
        if op == "Tile":
            reps = [self.pick([1, 1, 2]) for _ in range(r)]
            tags = self.tags_of(t, "Tile", _mix(t, [a for a in range(r) if reps[a] > 1]))
            new = tuple(k * n if isinstance(k, int) else (k if n == 1 else "M") for k, n in zip(lay, reps))
            self.node("Tile", [t.name, self.const_i(reps)], [out])
            self.add(new, tags, name=out)
            return True
        if op == "Expand":
            ones = [a for a in fixed if lay[a] == 1]
            if not ones:
                return False
            a = self.pick(ones)
            size = self.pick([2, 3])
            shape = [size if i == a else (k if isinstance(k, int) else 1) for i, k in enumerate(lay)]
            self.node("Expand", [t.name, self.const_i(shape)], [out])
            self.add(lay[:a] + (size,) + lay[a + 1 :], t.tags, name=out)
            return True
        if op == "Pad":
            axis = self.pick(range(r))
            before, after = self.pick([0, 1, 2]), self.pick([1, 2])
            dynamic = not isinstance(lay[axis], int)
            mode = "constant" if dynamic or lay[axis] <= 2 else self.pick(["constant", "reflect", "edge"])
            pads = [0] * (2 * r)
            pads[axis], pads[r + axis] = before, after
            ins = [t.name, self.const_i(pads)]
            if mode == "constant" and self.draw(st.booleans()):
                ins.append(self.fresh("c"))
                self.inits.append((ins[-1], "float32", [], [float(self.pick([0.0, 1.5, -2.0]))]))
            self.node("Pad", ins, [out], mode=mode)
            tags = self.tags_of(t, "Pad", _mix(t, [axis]))
            self.add(
                lay[:axis] + (("M",) if dynamic else (lay[axis] + before + after,)) + lay[axis + 1 :], tags, name=out
            )
            return True
        return False

    def _reshape(self, t: _T, out: str) -> bool:
        lay = t.layout
        r = len(lay)
        kind = self.pick(["merge", "split", "roundtrip"])
        if kind == "roundtrip":  # flatten everything, then back to t's shape through Shape(t)
            flat, back, shape = self.fresh("t"), self.fresh("t"), self.fresh("s")
            self.node("Reshape", [t.name, self.const_i([-1])], [flat])
            self.node(self.pick(UNARY), [flat], [back])
            self.node("Shape", [t.name], [shape])
            self.node("Reshape", [back, shape], [out])
            self.add(lay, t.tags, name=out)
            return True
        if kind == "split":
            fours = [a for a in range(r) if lay[a] == 4]
            if not fours or r >= 5:
                return False
            a = self.pick(fours)
            new = lay[:a] + (2, 2) + lay[a + 1 :]
        else:
            pairs = [a for a in range(r - 1) if isinstance(lay[a], int) and isinstance(lay[a + 1], int)]
            if not pairs:
                return False
            a = self.pick(pairs)
            new = lay[:a] + (lay[a] * lay[a + 1],) + lay[a + 2 :]
        dyn_after = [i for i in range(a + 1, len(new)) if not isinstance(new[i], int)]
        if len(dyn_after) > 1:
            return False
        target = [(0 if i < a else -1) if not isinstance(k, int) else k for i, k in enumerate(new)]
        self.node("Reshape", [t.name, self.const_i(target)], [out])
        self.add(new, t.tags, name=out)
        return True

    def _slice(self, t: _T, out: str) -> bool:
        lay = t.layout
        axis = self.pick(range(len(lay)))
        step = self.pick([1, 1, 2, -1, -2])
        if isinstance(lay[axis], int):
            n = lay[axis]
            start = self.draw(st.integers(-n, n - 1))
            end = self.pick([n, -n - 5, 2**62, -(2**62), self.draw(st.integers(-n, n))])
            size = len(range(n)[slice(start, end, step)])
            if size == 0:
                return False
            new = lay[:axis] + (size,) + lay[axis + 1 :]
            tags = set(t.tags)
        else:
            start, end = (0, 2**62) if step > 0 else (-1, -(2**62))
            start = self.pick([start, start, 1 if step > 0 else -2])
            identity = step == 1 and start == 0
            tags = set(t.tags) if identity else self.tags_of(t, "Slice", _mix(t, [axis]))
            new = lay if identity or (step == -1 and start == -1) else lay[:axis] + ("M",) + lay[axis + 1 :]
        ins = [
            t.name,
            self.const_i([start]),
            self.const_i([end]),
            self.const_i([axis - len(lay) if self.draw(st.booleans()) else axis]),
        ]
        ins.append(self.const_i([step]))
        self.node("Slice", ins, [out])
        self.add(new, tags, name=out)
        return True

    def _gather(self, t: _T, out: str) -> bool:
        lay = t.layout
        axis = self.pick(range(len(lay)))
        scalar = self.draw(st.booleans())
        if isinstance(lay[axis], int):
            n = lay[axis]
            if self.draw(st.booleans()):
                shape = [] if scalar else [self.pick([1, 2, 3])]
                name = self.fresh("i")
                self.inputs.append((name, "int64", tuple(shape), n))
                idx = name
            else:
                vals = [self.draw(st.integers(-n, n - 1)) for _ in range(1 if scalar else self.pick([1, 2, 3]))]
                idx = self.const_i(vals, [] if scalar else None)
                shape = [] if scalar else [len(vals)]
            self.node("Gather", [t.name, idx], [out], axis=axis)
            self.add(lay[:axis] + tuple(shape) + lay[axis + 1 :], t.tags, name=out)
            return True
        idx = self.const_i([0], [] if scalar else None)  # the first row: every row's output is row 0's
        tags = set(t.tags) | {("glob:" if lay[axis] == "B" else "tglob:") + "Gather"}
        self.node("Gather", [t.name, idx], [out], axis=axis)
        self.add(lay[:axis] + (() if scalar else (1,)) + lay[axis + 1 :], tags, name=out)
        return True

    def b_reduce(self, t: _T) -> bool:
        lay = t.layout
        op = self.pick(
            ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"]
        )
        axes = sorted(self.draw(st.lists(st.sampled_from(range(len(lay))), min_size=0, max_size=len(lay), unique=True)))
        keep = self.pick([0, 1])
        ins = [t.name]
        if axes:
            ins.append(self.const_i([a - len(lay) if self.draw(st.booleans()) else a for a in axes]))
        out = self.fresh("t")
        self.node(op, ins, [out], keepdims=keep)
        red = axes or list(range(len(lay)))
        tags = set(t.tags)
        for a in red:
            if lay[a] == "B":
                tags.add("glob:" + op)
            if lay[a] == "T":
                tags.add("tglob:" + op)
        new = (
            tuple((1 if a in red else k) for a, k in enumerate(lay))
            if keep
            else tuple(k for a, k in enumerate(lay) if a not in red)
        )
        self.add(new, tags, name=out)
        return True

    def b_softmax(self, t: _T) -> bool:
        lay = t.layout
        op = self.pick(["Softmax", "LogSoftmax", "Hardmax", "CumSum"])
        axis = self.draw(st.integers(-len(lay), len(lay) - 1))
        out = self.fresh("t")
        if op == "CumSum":
            self.node(
                "CumSum",
                [t.name, self.const_i([axis], [])],
                [out],
                exclusive=self.pick([0, 1]),
                reverse=self.pick([0, 1]),
            )
        else:
            self.node(op, [t.name], [out], axis=axis)
        self.add(lay, self.tags_of(t, op, _mix(t, [axis % len(lay)])), name=out)
        return True

    def b_topk(self, t: _T) -> bool:
        lay = t.layout
        r = len(lay)
        axis = self.draw(st.integers(0, r - 1))
        op = self.pick(["TopK", "TopK", "ArgMax", "ArgMin"])
        out = self.fresh("t")
        g = {"B": "glob:", "T": "tglob:"}.get(lay[axis])
        if op != "TopK":
            keep = self.pick([0, 1])
            self.node(op, [t.name], [out], axis=axis, keepdims=keep, select_last_index=self.pick([0, 1]))
            tags = set(t.tags) | ({g + op} if g else set())
            idx = self.add(lay[:axis] + ((1,) if keep else ()) + lay[axis + 1 :], tags, dtype="int64", name=out)
            self._maybe_cast(idx)
            return True
        vals = out
        idxs = self.fresh("t")
        tags = set(t.tags)
        if isinstance(lay[axis], int) and self.draw(st.booleans()):  # k from an input: value-dependent shape
            name = self.fresh("k")
            self.inputs.append((name, "int64", (1,), lay[axis]))
            k, size = name, "M"
            tags.add("value_dependent:TopK")
        else:
            kv = self.pick(range(1, lay[axis] + 1)) if isinstance(lay[axis], int) else 1
            k, size = self.const_i([kv]), kv
            if g:
                tags.add(g + "TopK")
        self.node("TopK", [t.name, k], [vals, idxs], axis=axis, largest=self.pick([0, 1]))
        new = lay[:axis] + (size,) + lay[axis + 1 :]
        self.add(new, tags, name=vals)
        idx = self.add(new, tags, dtype="int64", name=idxs)
        self._maybe_cast(idx)
        return True

    def _maybe_cast(self, t: _T) -> None:
        if self.draw(st.booleans()):
            out = self.fresh("t")
            self.node("Cast", [t.name], [out], to=1)
            self.add(t.layout, t.tags, name=out)

    def b_rnn(self, t: _T) -> bool:
        lay = t.layout
        if len(lay) != 3 or not isinstance(lay[2], int):
            return False
        op = self.pick(list(RNN_OPS))
        layout = self.pick([0, 1])
        seq, rows = (lay[0], lay[1]) if layout == 0 else (lay[1], lay[0])
        direction = self.pick(["forward", "reverse", "bidirectional"])
        dirs = 2 if direction == "bidirectional" else 1
        hid = self.pick([2, 3])
        gates = RNN_OPS[op]
        ins = [t.name, self.const_f([dirs, gates * hid, lay[2]]), self.const_f([dirs, gates * hid, hid])]
        if self.draw(st.booleans()):
            ins.append(self.const_f([dirs, 2 * gates * hid]))
        outs = [self.fresh("t") for _ in range(3 if op == "LSTM" else 2)]
        attrs: dict = dict(hidden_size=hid, direction=direction)
        if op == "GRU":
            attrs["linear_before_reset"] = self.pick([0, 1])
        if layout == 0:
            self.node(op, ins, outs, **attrs)
        else:  # batch-first (layout=1): ONNX Runtime's CPU kernels refuse the attribute ("Batchwise recurrent
            # operations (layout == 1) are not supported"), so it is written as exporters do: transposes around
            ins[0], inner = self.fresh("t"), [self.fresh("t") for _ in outs]
            self.node("Transpose", [t.name], [ins[0]], perm=[1, 0, 2])
            self.node(op, ins, inner, **attrs)
            self.node("Transpose", [inner[0]], [outs[0]], perm=[2, 0, 1, 3])
            for i, o in zip(inner[1:], outs[1:]):
                self.node("Transpose", [i], [o], perm=[1, 0, 2])
        tags = self.tags_of(t, op, _mix(t, [0 if layout == 0 else 1]))
        self.model_tags.add("rnn")
        y = (seq, dirs, rows, hid) if layout == 0 else (rows, seq, dirs, hid)
        h = (dirs, rows, hid) if layout == 0 else (rows, dirs, hid)
        self.add(y, tags, name=outs[0])
        for o in outs[1:]:
            self.add(h, tags, name=o)
        return True

    def b_shapeval(self, t: _T) -> bool:
        lay = t.layout
        if not lay:
            return False
        kind = self.pick(["range", "size", "flatten_rest", "expand"])
        if kind == "flatten_rest" and (len(lay) < 2 or not all(isinstance(k, int) for k in lay[1:])):
            return False
        shape = self.fresh("s")
        self.node("Shape", [t.name], [shape])
        out = self.fresh("t")
        if kind == "range":  # Range(0, Shape(t)[axis]) as a float row index along that axis
            axis = self.draw(st.integers(0, len(lay) - 1))
            n, rng, f = self.fresh("s"), self.fresh("s"), self.fresh("t")
            self.node("Gather", [shape, self.const_i([axis], [])], [n])
            self.node("Range", [self.const_i([0], []), n, self.const_i([1], [])], [rng])
            self.node("Cast", [rng], [f], to=1)
            k = lay[axis]
            tags = {"rows_mixed:Range_of_batch_size"} if k == "B" else {"t_mixed:Range_of_t"} if k == "T" else set()
            self.add((k,), tags, name=f)
            red = self.fresh("t")  # t summed over its other axes, plus the index
            others = [a for a in range(len(lay)) if a != axis]
            if others:
                self.node("ReduceSum", [t.name, self.const_i(others)], [red], keepdims=0)
                tt = set(t.tags) | {
                    ("glob:" if lay[a] == "B" else "tglob:") + "ReduceSum" for a in others if lay[a] in ("B", "T")
                }
                self.add((k,), tt, name=red)
                self.node("Add", [red, f], [out])
                tags = tags | tt
                if any(x.startswith("glob:") for x in tt) and k == "B":
                    tags.add("rows_mixed:broadcast_batch_reduction")
                if any(x.startswith("tglob:") for x in tt) and k == "T":
                    tags.add("t_mixed:broadcast_t_reduction")
                self.add((k,), tags, name=out)
            return True
        if kind == "size":  # t * Size(t): every value depends on the sizes of all axes
            sz, f = self.fresh("s"), self.fresh("t")
            self.node("Size", [t.name], [sz])
            self.node("Cast", [sz], [f], to=1)
            self.node("Mul", [t.name, f], [out])
            tags = set(t.tags) | {f"{k}:Size" for k in _mix(t, range(len(lay)))}
            self.add(lay, tags, name=out)
            return True
        if kind == "flatten_rest":  # Reshape(t, Concat(Shape(t)[0:1], [-1])): PP-OCR's exporters' pattern
            head, target = self.fresh("s"), self.fresh("s")
            self.node("Slice", [shape, self.const_i([0]), self.const_i([1])], [head])
            self.node("Concat", [head, self.const_i([-1])], [target], axis=0)
            self.node("Reshape", [t.name, target], [out])
            self.add((lay[0], int(np.prod(lay[1:]))), t.tags, name=out)
            return True
        c = self.const_f([1] * (len(lay) - 1) + [lay[-1] if isinstance(lay[-1], int) else 1])
        self.node("Expand", [c, shape], [out])  # constant rows in t's shape
        self.add(lay, set(), name=out)
        return True

    # ---- outputs
    def outputs(self) -> tuple:
        used = {i for _, ins, _, _ in self.nodes for i in ins}
        inputs = {i[0] for i in self.inputs}
        produced = [t for t in self.pool if t.name not in inputs]
        leaves = [t for t in produced if t.name not in used]
        extra = [t for t in produced if t.name in used and t.name.startswith("t")]
        chosen = leaves[:5]
        if extra and chance(self.draw, 0.25):
            chosen.append(self.pick(extra))
        tags = {t.name: sorted(t.tags) for t in chosen}
        if chance(self.draw, 0.1):  # a graph input handed on as an output
            chosen.append(self.pool[0])
            tags["x"] = ["passthrough"]
        outs = []
        for t in chosen:
            declare = self.draw(st.booleans())  # else every axis without a size or name (rank only)
            outs.append((t.name, t.dtype, tuple(k if declare and k != "M" else None for k in t.layout)))
        return outs, tags, {t.name: t.layout for t in chosen}


def _merged(kinds: tuple, tags: set, op: str):
    """One axis made of ``kinds``: a fixed size, the axis itself, or "M" (a product with a dynamic dim)."""
    if all(isinstance(k, int) for k in kinds):
        return int(np.prod(kinds)) if kinds else 1
    if len(kinds) == 1:
        return kinds[0]
    if "B" in kinds:
        tags.add(f"rows_mixed:{op}_merges_batch")
    if "T" in kinds:
        tags.add(f"t_mixed:{op}_merges_t")
    return "M"


def _broadcast(a: tuple, b: tuple):
    """The broadcast layout of ``a`` and ``b``, or None when they do not broadcast for every request."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == y:
            out.append(x)
        elif x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        else:
            return None
    return tuple(reversed(out))


# ---- options, requests, cases --------------------------------------------------------------------------------------


def uniform(draw, options):
    """One of ``options`` about evenly (hypothesis's own choices lean to the first; shrinking still goes there)."""
    return options[draw(st.integers(0, 2**16)) % len(options)]


def chance(draw, p: float) -> bool:
    """True with probability about ``p`` (shrinks to False)."""
    return draw(st.integers(0, 2**16)) % 1000 >= 1000 - p * 1000


def _gears(draw) -> list:
    return sorted(draw(st.lists(st.sampled_from([1, 2, 3, 4, 6, 8]), min_size=1, max_size=3, unique=True)))


def _options(draw, b: Builder, bname: str | None, tname: str | None, layouts: dict) -> dict:
    """Random gert.load options for the model ``b`` built (some are refused at load: that is an allowed outcome)."""
    x = b.inputs[0][2]
    bpos = x.index("B")
    tpos = x.index("T") if "T" in x else None
    data = [(n, lay) for n, _, lay, _ in b.inputs if "B" in lay]
    tagged = {tag for tags in layouts["tags"].values() for tag in tags}
    opts: dict = {}
    dims = [[f"{n}:{lay.index('B')}" for n, lay in data]] + ([bname] if bname else [])
    needed = bpos != 0 or (len(data) > 1 and not bname)  # else gert finds no batch axis (a load option naming it
    if chance(draw, 0.9 if needed else 0.5):  # is then refused)
        opts["batch_dim"] = uniform(draw, dims)
    max_batch = uniform(draw, [None, None, None, 1, 2, 3, 4, 8])
    if max_batch is not None:
        opts["max_batch"] = max_batch
    gears: dict = {}
    policy: dict = {}
    if draw(st.booleans()):
        g = _gears(draw)
        if max_batch is not None and chance(draw, 0.8):
            g = [v for v in g if v <= max_batch] or [max_batch]
        gears[uniform(draw, ["batch"] + ([bname] if bname and "batch_dim" in opts else []))] = g
    if draw(st.booleans()):
        policy["batch"] = uniform(draw, ["pad", "pad", "exact", "dynamic", "auto"])
    if tpos is not None:
        tkey = tname or f"x:{tpos}"
        if draw(st.booleans()):
            gears[tkey] = _gears(draw)
        if draw(st.booleans()):
            t_mixing = any(t.startswith(("t_mixed", "tglob")) for t in tagged)
            policy[tkey] = uniform(draw, ["exact", "dynamic", "auto"] + ([] if t_mixing else ["pad", "pad"]))
    if gears:
        opts["gears"] = gears
    if policy:
        opts["shape_policy"] = policy
    batched = [n for n, lay in layouts["layout"].items() if "B" in lay]
    if batched and ("batch_dim" in opts or not needed) and chance(draw, 0.15):
        name = uniform(draw, batched)
        opts["output_dims"] = {name: {a: "batch" for a, k in enumerate(layouts["layout"][name]) if k == "B"}}
    if chance(draw, 0.2):
        opts["hot_after"] = 1  # auto: a size's static graph compiled in the background after its first request
    if draw(st.booleans()):
        opts["streams"] = 2
    if draw(st.booleans()):
        opts["split_batch"] = True
    db = uniform(
        draw, [None, None, False, {"max_queue_delay_ms": 5}, {"max_queue_delay_ms": 20, "preferred_batch_size": 4}]
    )
    if db is not None:
        opts["dynamic_batching"] = db
    pv = uniform(draw, [None, None, 3.0, "nan"])
    if pv is not None:
        opts["pad_value"] = pv
    return opts


def _gear_costs(draw) -> dict | None:
    """Run times per batch size for the 1..32 gears: none (as measured), a row's cost dominating (cuts), or random."""
    kind = uniform(draw, [None, None, "rows", "random"])
    if kind is None:
        return None
    if kind == "rows":
        return {g: 0.001 + 0.01 * g for g in (1, 2, 3, 4, 6, 8, 16, 32)}
    return {g: round(draw(st.floats(0.0, 1.0)), 3) for g in (1, 2, 3, 4, 6, 8, 16, 32)}


def _sizes(draw, gears: list, low: int, high: int) -> st.SearchStrategy:
    """Sizes for a dim: mostly its gears when it has some (exact gears refuse the others), else any."""
    anything = st.sampled_from([v for v in (3, 5, 1, 2, 4, 6, 7, 8, 9, 10, 0) if low <= v <= high])
    taken = [g for g in gears if g >= low]
    return st.sampled_from(taken) if taken and chance(draw, 0.75) else anything


def _requests(draw, b: Builder, door: str, opts: dict) -> tuple:
    # no 0 rows into RNN / GRU / LSTM: ONNX Runtime itself aborts the process on a 0-sized batch or sequence
    # ("terminate called without an active exception"), so the reference cannot be computed in process
    rnn = "rnn" in b.model_tags
    n = draw(st.integers(1, 6 if door not in ("run", "run_list", "run_batch") else 4))
    shared_t = door == "run_batch" or chance(draw, 0.6)
    gears = opts.get("gears", {})
    bgears = [g for k, g in gears.items() if not k.startswith("T") and not k.endswith(f":{_tpos(b)}")]
    tgears = [g for k, g in gears.items() if k.startswith("T") or k.endswith(f":{_tpos(b)}")]
    row_sizes = _sizes(draw, bgears[0] if bgears else [], 1 if rnn else 0, 10)
    t_sizes = _sizes(draw, tgears[0] if tgears else [], 1, 5)
    t0 = draw(t_sizes)
    has_fixed = any(isinstance(k, int) for _, _, lay, _ in b.inputs for k in lay)
    bad_at = draw(st.integers(0, n - 1)) if chance(draw, 0.12) else None
    bad_kinds = ["dtype", "rank", "missing"] + (["fixed_dim"] if has_fixed else [])
    reqs = []
    for i in range(n):
        rows = draw(row_sizes)
        t = t0 if shared_t else draw(t_sizes)
        reqs.append((rows, t, uniform(draw, bad_kinds) if i == bad_at else None))
    return reqs, door == "run_batch" or chance(draw, 0.75)


def _tpos(b: Builder) -> int | None:
    x = b.inputs[0][2]
    return x.index("T") if "T" in x else None


@st.composite
def cases(draw) -> Case:
    """A random Case: a model of 1-4 op blocks, options, a front door, requests."""
    b = Builder(draw)
    b.make_inputs()
    for _ in range(draw(st.integers(1, 5))):
        b.block()
    if not b.nodes:
        b.node("Relu", ["x"], ["t0"])
        b.add(b.inputs[0][2], set(), name="t0")
        b.families.append("elementwise")
    outs, tags, layouts = b.outputs()
    bname = uniform(draw, ["N", None])
    tname = uniform(draw, ["T", None])
    if b.model_tags:
        tags["*"] = sorted(b.model_tags)
    opts = _options(draw, b, bname, tname, {"tags": tags, "layout": layouts})
    door = uniform(draw, DOORS)
    reqs, shared = _requests(draw, b, door, opts)
    return Case(
        inputs=b.inputs,
        nodes=b.nodes,
        inits=b.inits,
        outputs=outs,
        bname=bname,
        tname=tname,
        options=opts,
        door=door,
        requests=reqs,
        seed=draw(st.integers(0, 2**20)),
        shared_params=shared,
        tags=tags,
        families=sorted(set(b.families)),
        repeat=uniform(draw, [1, 2, 3]),
        gear_costs=_gear_costs(draw),
    )


def output_layouts(case: Case) -> dict:
    """Output name -> its layout as the generator tracked it (declared dims, else None)."""
    return {name: dims for name, _, dims in case.outputs}
