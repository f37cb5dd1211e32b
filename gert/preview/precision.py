"""GE's precision modes, emulated on the host NPU as an ONNX graph rewrite the provider compiles.

A model of what a device does, not a measurement of one: where a mode puts a node in fp16 (bf16), its float inputs
are rounded to fp16 (IEEE round-to-nearest-even; |x| > 65504 becomes +-inf, as fp16 does) and so are its float
outputs; the op itself computes in fp32 on the rounded values (fp16 storage, fp32 accumulation). The rounding is a
Cast pair (float -> float16 -> float) that ONNX Runtime runs; nodes kept in fp32 and the graph's own declared I/O
dtypes are untouched. A mode that keeps dtypes (must_keep_origin_dtype / origin, the host NPU's default) returns the
model bytes unchanged: no cost.

Which nodes a mode lowers (after the documented mode meanings; the lists are this model's, not a chip's):
- force_fp16 / fp16: every node with float tensors.
- allow_fp32_to_fp16: cube (matrix) ops only: Conv, ConvTranspose, MatMul, Gemm, LSTM, GRU, RNN, Einsum.
- allow_mix_precision(_fp16) / mixed_float16: every node except a black list that keeps fp32 (reductions,
  exp/log/pow, softmax, normalizations): a stand-in for the per-chip list CANN ships in aic-<soc>-ops-info.json.
- *_bf16 / mixed_bfloat16: the same node sets, rounded to bfloat16.
- force_fp32 / cube_fp16in_fp32out: cube ops take fp16 inputs and write fp32 (inputs rounded, outputs not).
``keep_fp32`` (node names or op types) keeps nodes in their original dtype: on a real CANN, op types go in a
``ge.exec.modify_mixlist`` JSON (black list; mixed modes only), node names in ATC's ``--keep_dtype`` file
(offline conversion only: GE's online Session has no per-node switch).

The provider finds the settings of the compile it is running in ``current()``: gert.core.compile_cache.compile_graph
sets them (``compiling``) from the graph's GE options for the compile on its thread; a compile through the GE API
itself (gert.Session with the option) gets them from the host NPU (gert.hostnpu.compile_option).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

PRECISION_MODE = "ge.exec.precision_mode"
PRECISION_MODE_V2 = "ge.exec.precision_mode_v2"
KEEP_FP32_OPTION = "gert.keep_fp32"  # gert's own: moved into the compile-cache key, never handed to GE
DEFAULT_MODE = "must_keep_origin_dtype"

V1_MODES = (
    "force_fp16",
    "allow_fp32_to_fp16",
    "allow_mix_precision",
    "allow_mix_precision_fp16",
    "allow_mix_precision_bf16",
    "allow_fp32_to_bf16",
    "must_keep_origin_dtype",
    "force_fp32",
    "cube_fp16in_fp32out",
)
V2_TO_V1 = {
    "fp16": "force_fp16",
    "origin": "must_keep_origin_dtype",
    "cube_fp16in_fp32out": "cube_fp16in_fp32out",
    "mixed_float16": "allow_mix_precision_fp16",
    "mixed_bfloat16": "allow_mix_precision_bf16",
}

CUBE_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM", "GRU", "RNN", "Einsum"})
MIX_BLACK_LIST = frozenset(
    {
        "Softmax",
        "LogSoftmax",
        "Exp",
        "Log",
        "Pow",
        "Sqrt",
        "Reciprocal",
        "Div",
        "ReduceSum",
        "ReduceMean",
        "ReduceProd",
        "ReduceLogSumExp",
        "ReduceLogSum",
        "ReduceSumSquare",
        "ReduceL1",
        "ReduceL2",
        "LayerNormalization",
        "BatchNormalization",
        "InstanceNormalization",
        "GroupNormalization",
        "LpNormalization",
        "Erf",
        "SoftmaxCrossEntropyLoss",
        "CumSum",
        "Range",
    }
)
# Float inputs that are parameters of the op rather than data, never rounded: scales / roi (read on the host), and
# the normalizations' statistics and affine parameters, which CANN's BatchNorm / BNInference kernels take in fp32 in
# every mode (and ATC folds into the preceding Conv in fp32). PP-OCRv4 det has BatchNormalization variances up to
# 9.8e7: rounded to fp16 they would be inf and zero the whole output.
_PARAM_INPUTS = {
    "Resize": {1, 2},
    "Upsample": {1},
    "RoiAlign": {1},
    "NonMaxSuppression": {2, 3, 4},
    "Range": {0, 1, 2},
    "ConstantOfShape": {0},
    "BatchNormalization": {1, 2, 3, 4},
    "InstanceNormalization": {1, 2},
}


@dataclass(frozen=True)
class PrecisionSettings:
    """A precision mode (normalised to its ge.exec.precision_mode name) and the nodes kept in fp32."""

    mode: str = DEFAULT_MODE
    keep_fp32: tuple = ()
    option: str = PRECISION_MODE  # which GE key the user set (for display)
    given: str = DEFAULT_MODE  # the value as given

    @property
    def keeps_dtypes(self) -> bool:
        return self.mode == DEFAULT_MODE

    @property
    def low_dtype(self) -> str:
        return "bfloat16" if self.mode.endswith("bf16") else "float16"

    def ge_options(self) -> dict:
        """The GE graph options that ask a real CANN for this mode (keep_fp32 rides along under gert's own key)."""
        out = {self.option: self.given}
        if self.keep_fp32:
            out[KEEP_FP32_OPTION] = ",".join(self.keep_fp32)
        return out

    def describe(self) -> str:
        keep = f", keep_fp32={list(self.keep_fp32)}" if self.keep_fp32 else ""
        return f"{self.given}{keep}"


def normalise(mode: str | None, keep_fp32: Iterable[str] = (), what: str = "precision_mode") -> PrecisionSettings:
    """Settings from a mode name of either GE key (None: the host NPU's default, must_keep_origin_dtype)."""
    from gert.errors import GertError

    if isinstance(keep_fp32, str):
        keep_fp32 = [s for s in keep_fp32.split(",")]
    keep = tuple(sorted({str(k).strip() for k in keep_fp32 if str(k).strip()}))
    if mode is None or str(mode) == "":
        return PrecisionSettings(DEFAULT_MODE, keep)
    m = str(mode).strip()
    if m in V1_MODES:
        v1 = "allow_mix_precision_fp16" if m == "allow_mix_precision" else m
        return PrecisionSettings(v1, keep, PRECISION_MODE, m)
    if m in V2_TO_V1:
        return PrecisionSettings(V2_TO_V1[m], keep, PRECISION_MODE_V2, m)
    raise GertError(
        f"{what}: {m!r} is not a GE precision mode; expected one of {', '.join(V1_MODES)} "
        f"(ge.exec.precision_mode) or {', '.join(V2_TO_V1)} (ge.exec.precision_mode_v2)"
    )


def from_options(*levels: Mapping[str, str]) -> PrecisionSettings:
    """The settings a compile sees from its GE options, later levels overriding earlier (session, then graph)."""
    merged: dict = {}
    for level in levels:
        merged.update(level or {})
    mode = merged.get(PRECISION_MODE_V2) or merged.get(PRECISION_MODE)
    try:
        return normalise(mode, merged.get(KEEP_FP32_OPTION, ""))
    except Exception:  # noqa: BLE001 - a mode GE refuses fails in GE's option check, with GE's message
        return PrecisionSettings()


def lowered(mode: str, op_type: str) -> tuple:
    """(round inputs, round outputs) for a node of ``op_type`` under ``mode``."""
    if mode == DEFAULT_MODE:
        return False, False
    if mode in ("force_fp16",):
        return True, True
    if mode in ("allow_fp32_to_fp16", "allow_fp32_to_bf16"):
        return (True, True) if op_type in CUBE_OPS else (False, False)
    if mode in ("allow_mix_precision_fp16", "allow_mix_precision_bf16"):
        return (False, False) if op_type in MIX_BLACK_LIST else (True, True)
    if mode in ("force_fp32", "cube_fp16in_fp32out"):
        return (True, False) if op_type in CUBE_OPS else (False, False)
    return False, False


def rewrite_proto(proto, settings: PrecisionSettings):
    """A copy of the ModelProto with the Cast pairs of ``settings`` inserted (the root graph; If branches are left as
    they are). Node names/op types in ``settings.keep_fp32`` are untouched."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - types of inputs/initializers/outputs still tell most float tensors
        inferred = model
    g = inferred.graph
    dtype = {v.name: v.type.tensor_type.elem_type for v in list(g.input) + list(g.value_info) + list(g.output)}
    dtype.update({t.name: t.data_type for t in g.initializer})
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    dtype[n.output[0]] = a.t.data_type
    low = TensorProto.BFLOAT16 if settings.low_dtype == "bfloat16" else TensorProto.FLOAT16
    keep = set(settings.keep_fp32)
    graph = model.graph
    names = {t for n in graph.node for t in list(n.input) + list(n.output)} | {i.name for i in graph.input}
    rounded: dict = {}  # fp32 tensor -> its rounded copy
    exact: set = set()  # tensors whose values are low-precision values already (outputs of rounded nodes)
    new_nodes = []

    def fresh(base: str) -> str:
        name, i = base, 0
        while name in names:
            i += 1
            name = f"{base}_{i}"
        names.add(name)
        return name

    def cast_pair(src: str, dst: str, tag: str):
        mid = fresh(f"{src}__{tag}_low")
        return [
            helper.make_node("Cast", [src], [mid], name=fresh(f"{tag}_to_low"), to=low),
            helper.make_node("Cast", [mid], [dst], name=fresh(f"{tag}_to_fp32"), to=TensorProto.FLOAT),
        ]

    for i, n in enumerate(graph.node):
        name = n.name or f"{n.op_type}_{i}"
        r_in, r_out = lowered(settings.mode, n.op_type)
        if (
            n.op_type in ("Constant", "Cast", "Shape", "Size")
            or name in keep
            or n.op_type in keep
            or n.domain not in ("", "ai.onnx")
        ):
            r_in = r_out = False
        if r_in:
            params = _PARAM_INPUTS.get(n.op_type, set())
            for k, t in enumerate(n.input):
                if not t or k in params or dtype.get(t) != TensorProto.FLOAT or t in exact:
                    continue
                if t not in rounded:
                    rounded[t] = fresh(f"{t}__rounded")
                    new_nodes.extend(cast_pair(t, rounded[t], f"{name}_in{k}"))
                n.input[k] = rounded[t]
        new_nodes.append(n)
        if r_out:
            for k, t in enumerate(n.output):
                if not t or dtype.get(t) != TensorProto.FLOAT:
                    continue
                raw = fresh(f"{t}__fp32")
                n.output[k] = raw
                new_nodes.extend(cast_pair(raw, t, f"{name}_out{k}"))
                exact.add(t)
    del graph.node[:]
    graph.node.extend(new_nodes)
    return model


def rewrite(model: bytes, settings: PrecisionSettings) -> bytes:
    """The model bytes with ``settings`` applied (the same object when the mode keeps dtypes)."""
    if settings.keeps_dtypes:
        return model
    import onnx

    return rewrite_proto(onnx.load_from_string(model), settings).SerializeToString()


# ---- the compile's settings, for the provider ------------------------------------------------------------------------
_tls = threading.local()
_REWRITTEN_KEPT = 8
_rewritten: OrderedDict[tuple, bytes] = OrderedDict()
_rewritten_lock = threading.Lock()


def current() -> PrecisionSettings:
    """The settings of the compile running on this thread: compiling()'s (gert's own compiles), else the GE options
    the host NPU reports for the graph it is compiling (a Session or add_graph option set through the GE API)."""
    settings = getattr(_tls, "settings", None)
    if settings is not None:
        return settings
    from gert import hostnpu

    if not hostnpu.available():
        return PrecisionSettings()
    try:
        opts = {k: hostnpu.compile_option(k) or "" for k in (PRECISION_MODE, PRECISION_MODE_V2, KEEP_FP32_OPTION)}
    except Exception:  # noqa: BLE001 - a host NPU build without compile_option: the default
        return PrecisionSettings()
    return from_options({k: v for k, v in opts.items() if v})


@contextlib.contextmanager
def compiling(settings: PrecisionSettings) -> Iterator[None]:
    """Within the block, compiles on this thread use ``settings``."""
    before = getattr(_tls, "settings", None)
    _tls.settings = settings
    try:
        yield
    finally:
        _tls.settings = before


def split_options(session_options: Mapping[str, str], graph_options: Mapping[str, str]) -> tuple:
    """(settings, session options for the cache key, graph options for GE): gert's keep_fp32 key leaves the graph
    options (GE does not know it) and joins the key's session options, so the cache key still covers it."""
    settings = from_options(session_options, graph_options)
    if KEEP_FP32_OPTION not in graph_options:
        return settings, session_options, graph_options
    graph = {k: v for k, v in graph_options.items() if k != KEEP_FP32_OPTION}
    return settings, {**session_options, KEEP_FP32_OPTION: graph_options[KEEP_FP32_OPTION]}, graph


def for_compile(model: bytes) -> bytes:
    """The model the host NPU's provider compiles for the current settings: ``model`` itself when they keep dtypes,
    else its rewrite (one bytes object per (model, settings), so the provider's per-object digests hold)."""
    settings = current()
    if settings.keeps_dtypes:
        return model
    key = (hashlib.blake2b(model, digest_size=16).digest(), settings.mode, settings.keep_fp32)
    with _rewritten_lock:
        out = _rewritten.get(key)
        if out is not None:
            _rewritten.move_to_end(key)
            return out
    out = rewrite(model, settings)
    with _rewritten_lock:
        _rewritten[key] = out
        while len(_rewritten) > _REWRITTEN_KEPT:
            _rewritten.popitem(last=False)
    return out


def model_settings(
    precision_mode: str | None,
    keep_fp32: Iterable[str],
    session_options: Mapping[str, str],
    graph_options: Mapping[str, str],
) -> tuple:
    """gert.load's precision_mode / keep_fp32 with its GE options: (settings, graph options carrying them). The mode
    may come from either (options={"ge.exec.precision_mode": ...}), not from both."""
    from gert.errors import GertError

    set_in = [k for k in (PRECISION_MODE, PRECISION_MODE_V2) if k in session_options or k in graph_options]
    if precision_mode is not None and set_in:
        raise GertError(
            f"precision_mode={precision_mode!r} and options {set_in[0]!r} both set the precision mode; set one"
        )
    keep = list(keep_fp32) if not isinstance(keep_fp32, str) else [keep_fp32]
    if precision_mode is None and not keep:
        return from_options(session_options, graph_options), graph_options
    if precision_mode is None:
        base = from_options(session_options, graph_options)
        settings = PrecisionSettings(base.mode, normalise(None, keep).keep_fp32, base.option, base.given)
    else:
        settings = normalise(precision_mode, keep)
    extra = settings.ge_options() if precision_mode is not None else {KEEP_FP32_OPTION: ",".join(settings.keep_fp32)}
    return settings, {**graph_options, **extra}
