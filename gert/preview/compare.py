"""Precision A/B: each GE precision mode's outputs against fp32, and a small set of nodes to keep in fp32.

Both run the same graph rewrite the host NPU's provider compiles for a mode (gert/preview/precision.py), on ONNX
Runtime directly (no device needed): the numbers are those of the emulation model, not of a device.
"""

from __future__ import annotations

import html
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gert.preview import precision
from gert.preview.cann_ops import ModelLike, load_proto
from gert.preview.inputs import ort_run, random_inputs

DEFAULT_MODES = ("force_fp16", "allow_mix_precision", "allow_fp32_to_fp16", "must_keep_origin_dtype")
FP16_MAX = 65504.0


class RandomInputsWarning(UserWarning):
    """The comparison ran on random inputs: real inputs give real answers."""


@dataclass(frozen=True)
class OutputError:
    """One output under one mode against fp32 (must_keep_origin_dtype)."""

    mode: str
    output: str
    cosine: float
    max_abs: float
    max_rel: float
    nonfinite: int  # inf / NaN values in the mode's output (the fp32 output's own excluded)
    beyond_fp16: float  # share of the fp32 output's values above fp16's range (|x| > 65504)


def _errors(mode: str, name: str, ref: np.ndarray, got: np.ndarray) -> OutputError:
    if ref.dtype.kind != "f":
        same = float(np.mean(ref == got)) if ref.size else 1.0
        return OutputError(
            mode, name, same, float(np.max(np.abs(ref.astype(np.float64) - got))) if ref.size else 0.0, 0.0, 0, 0.0
        )
    a = ref.astype(np.float64).ravel()
    b = got.astype(np.float64).ravel()
    finite_ref = np.isfinite(a)
    nonfinite = int(np.count_nonzero(~np.isfinite(b) & finite_ref))
    beyond = float(np.mean(np.abs(a) > FP16_MAX)) if a.size else 0.0
    if not a.size:
        return OutputError(mode, name, 1.0, 0.0, 0.0, 0, 0.0)
    if nonfinite:
        cos = float("nan")
    else:
        m = finite_ref & np.isfinite(b)
        na, nb = np.linalg.norm(a[m]), np.linalg.norm(b[m])
        cos = 1.0 if na == 0 and nb == 0 else float(np.dot(a[m], b[m]) / (na * nb)) if na and nb else 0.0
    both = finite_ref & np.isfinite(b)  # inf/NaN are counted apart, not as errors
    d = np.abs(a[both] - b[both])
    max_abs = float(np.max(d)) if d.size else 0.0
    max_rel = float(np.max(d / np.maximum(np.abs(a[both]), 1e-6))) if d.size else 0.0
    return OutputError(mode, name, cos, max_abs, max_rel, nonfinite, beyond)


@dataclass
class PrecisionTable:
    """compare_precision's result: one row per (mode, output)."""

    rows: list
    random_inputs: bool = False

    def worst_cosine(self, mode: str) -> float:
        vals = [r.cosine for r in self.rows if r.mode == mode]
        return float("nan") if any(np.isnan(v) for v in vals) else min(vals, default=1.0)

    def to_dicts(self) -> list:
        return [r.__dict__.copy() for r in self.rows]

    def _cells(self) -> list:
        return [
            (
                r.mode,
                r.output,
                f"{r.cosine:.6f}",
                f"{r.max_abs:.3g}",
                f"{r.max_rel:.3g}",
                str(r.nonfinite),
                f"{r.beyond_fp16:.2%}",
            )
            for r in self.rows
        ]

    HEAD = ("mode", "output", "cosine", "max |d|", "max rel", "inf/NaN", "> fp16 range")

    def __str__(self) -> str:
        rows = [self.HEAD] + self._cells()
        widths = [max(len(r[i]) for r in rows) for i in range(len(self.HEAD))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        if self.random_inputs:
            lines.append("(random inputs: real inputs give real answers)")
        return "\n".join(lines)

    def markdown(self) -> str:
        out = ["| " + " | ".join(self.HEAD) + " |", "|" + "---|" * len(self.HEAD)]
        out += ["| " + " | ".join(r) + " |" for r in self._cells()]
        return "\n".join(out)

    def _repr_html_(self) -> str:
        e = html.escape
        head = "".join(f"<th>{e(h)}</th>" for h in self.HEAD)
        body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in self._cells())
        return f"<table><tr>{head}</tr>{body}</table>"

    def plot(self, path: str) -> None:
        """A bar chart of 1 - cosine per mode and output (log scale), saved to ``path`` (needs matplotlib)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(max(4, len(self.rows) * 0.6), 3))
        labels = [f"{r.mode}\n{r.output}" for r in self.rows]
        vals = [max(1e-12, 1 - r.cosine) if not np.isnan(r.cosine) else 1.0 for r in self.rows]
        ax.bar(range(len(vals)), vals)
        ax.set_yscale("log")
        ax.set_ylabel("1 - cosine vs fp32")
        ax.set_xticks(range(len(vals)), labels, rotation=60, fontsize=6)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)


def _feeds(proto, inputs: Mapping[str, np.ndarray] | None, stacklevel: int = 3) -> tuple:
    names = {v.name for v in proto.graph.input} - {t.name for t in proto.graph.initializer}
    missing = sorted(names - set(inputs or {}))
    if missing:
        warnings.warn(
            f"random values for input(s) {', '.join(missing)}: real inputs give real answers",
            RandomInputsWarning,
            stacklevel=stacklevel,
        )
    return random_inputs(proto, inputs), bool(missing)


def _run(proto, settings: precision.PrecisionSettings, feeds) -> dict:
    model = proto if settings.keeps_dtypes else precision.rewrite_proto(proto, settings)
    return ort_run(model.SerializeToString(), feeds)


def compare_precision(
    model: ModelLike,
    inputs: Mapping[str, np.ndarray] | None = None,
    modes: Sequence[str] = DEFAULT_MODES,
    keep_fp32: Iterable[str] = (),
) -> PrecisionTable:
    """Per mode x output: cosine similarity, max abs and max relative error against fp32 (must_keep_origin_dtype),
    inf/NaN count and the share of fp32 values beyond fp16's range. Missing inputs get random values (warned)."""
    proto = load_proto(model)
    feeds, rand = _feeds(proto, inputs)
    ref = _run(proto, precision.PrecisionSettings(), feeds)
    rows = []
    for mode in modes:
        settings = precision.normalise(mode, keep_fp32, what="modes")
        got = ref if settings.keeps_dtypes else _run(proto, settings, feeds)
        rows += [_errors(mode, name, ref[name], got[name]) for name in ref]
    return PrecisionTable(rows, rand)


@dataclass
class KeepFp32Result:
    """find_keep_fp32's answer: the nodes to keep, and the worst output cosine before and after keeping them (-1 where
    an output has inf/NaN that fp32 does not)."""

    nodes: list
    mode: str
    min_cosine: float
    before: float
    after: float
    runs: int = 0
    ranking: list = field(default_factory=list)  # (node, score) largest error first

    @property
    def met(self) -> bool:
        return self.after >= self.min_cosine

    def keep_dtype_file(self) -> str:
        """ATC's --keep_dtype file: one ``OpName:<name>`` line per node."""
        return "".join(f"OpName:{n}\n" for n in self.nodes)

    def __str__(self) -> str:
        verdict = "meets" if self.met else "does NOT meet"
        fmt = lambda c: "inf/NaN" if c < -0.5 else f"{c:.6f}"  # noqa: E731 - worst() gives -1 for inf/NaN outputs
        return (
            f"{self.mode}: worst cosine {fmt(self.before)} -> {fmt(self.after)} keeping {len(self.nodes)} node(s) in "
            f"fp32 ({verdict} {self.min_cosine}; {self.runs} runs): {', '.join(self.nodes) or '(none)'}"
        )

    def __iter__(self):
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)


def _named(proto):
    """The model with every node named (ATC's --keep_dtype and keep_fp32 name nodes)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(proto)
    used = {n.name for n in m.graph.node if n.name}
    for i, n in enumerate(m.graph.node):
        if not n.name:
            name = f"{n.op_type}_{i}"
            while name in used:
                name += "_"
            n.name = name
            used.add(name)
    return m


def _with_intermediates(proto):
    """The model with every float node output also a graph output (for the per-node error ranking)."""
    import onnx
    from onnx import TensorProto, helper

    m = onnx.ModelProto()
    m.CopyFrom(proto)
    try:
        inferred = onnx.shape_inference.infer_shapes(m).graph
        types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.value_info) + list(inferred.output)}
    except Exception:  # noqa: BLE001
        types = {}
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for t in n.output:
            if t and t not in have and types.get(t) == TensorProto.FLOAT:
                m.graph.output.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, None))
                have.add(t)
    return m


def _score(ref: np.ndarray, got: np.ndarray) -> float:
    """A node output's error: inf/NaN where fp32 is finite dominate, then relative L2 error."""
    a, b = ref.astype(np.float64).ravel(), got.astype(np.float64).ravel()
    if not a.size:
        return 0.0
    bad = np.count_nonzero(~np.isfinite(b) & np.isfinite(a))
    m = np.isfinite(a) & np.isfinite(b)
    rel = float(np.linalg.norm(a[m] - b[m]) / max(np.linalg.norm(a[m]), 1e-12)) if m.any() else 0.0
    return 1e6 * bad / a.size + rel


def find_keep_fp32(
    model: ModelLike,
    inputs: Mapping[str, np.ndarray] | None = None,
    precision_mode: str = "force_fp16",
    min_cosine: float = 0.999,
) -> KeepFp32Result:
    """A small set of node names that, kept in fp32, brings every output's cosine against fp32 to ``min_cosine``.

    Ranks the nodes the mode lowers by the error of their own output under the mode (inf/NaN first, then relative
    error; earlier nodes first among equals, so an overflow's origin leads its consumers), takes the shortest
    prefix of that ranking that meets the threshold (bisection), then drops each node the threshold does not need."""
    proto = _named(load_proto(model))
    feeds, _ = _feeds(proto, inputs)
    base = precision.normalise(precision_mode, what="precision_mode")
    outputs = [o.name for o in proto.graph.output]
    ref = _run(proto, precision.PrecisionSettings(), feeds)
    runs = 1

    def worst(keep: Sequence[str]) -> float:
        nonlocal runs
        runs += 1
        got = _run(proto, precision.PrecisionSettings(base.mode, tuple(sorted(keep)), base.option, base.given), feeds)
        vals = [_errors(base.given, o, ref[o], got[o]).cosine for o in outputs]
        return -1.0 if any(np.isnan(v) for v in vals) else min(vals)

    before = worst(())
    order = {n.name: i for i, n in enumerate(proto.graph.node)}
    candidates = [
        n
        for n in proto.graph.node
        if any(precision.lowered(base.mode, n.op_type)) and n.op_type not in ("Constant", "Cast", "Shape", "Size")
    ]
    if before >= min_cosine or not candidates:
        return KeepFp32Result([], precision_mode, min_cosine, before, before, runs)
    wide = _with_intermediates(proto)
    ref_all = ort_run(wide.SerializeToString(), feeds)
    low_all = _run(wide, base, feeds)
    runs += 2
    scores = {}
    for n in candidates:
        outs = [t for t in n.output if t in ref_all and t in low_all]
        scores[n.name] = max((_score(ref_all[t], low_all[t]) for t in outs), default=0.0)
    ranking = sorted(scores, key=lambda k: (-scores[k], order[k]))
    # shortest prefix meeting the threshold (bisection over its length)
    lo, hi = 1, len(ranking)
    if worst(ranking) < min_cosine:
        after = worst(ranking)
        return KeepFp32Result(
            list(ranking), precision_mode, min_cosine, before, after, runs, [(k, scores[k]) for k in ranking]
        )
    while lo < hi:
        mid = (lo + hi) // 2
        if worst(ranking[:mid]) >= min_cosine:
            hi = mid
        else:
            lo = mid + 1
    keep = list(ranking[:lo])
    for name in list(reversed(keep)):  # minimise: drop what the threshold does not need
        trial = [k for k in keep if k != name]
        if trial and worst(trial) >= min_cosine:
            keep = trial
    keep.sort(key=order.get)
    return KeepFp32Result(
        keep, precision_mode, min_cosine, before, worst(keep), runs, [(k, scores[k]) for k in ranking]
    )
