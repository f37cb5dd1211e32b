"""GE graphs on the host NPU: results equal ONNX Runtime run directly on the same inputs.

- PP-OCR det / rec / cls (the rapidocr-onnxruntime wheel) through static graphs (input_shape fixed), dynamic graphs
  (GE allocates the outputs, or the caller does), and RunGraph.
- Generated graphs: every dtype gert supports, several inputs and outputs of mixed dtypes, symbolic axes, 0-d and
  size-0 tensors, output selection by ge.outputNodeName.
- Static vs dynamic: is_static and the summary's shapes / dtypes; a static graph rejects another shape, naming the
  input and both shapes; a dynamic one runs it; gears (ge.inputShape + ge.dynamicDims) take exactly their shapes.
- Host NPU counters prove the data path: per inference, H2D + D2H bytes = input bytes + output bytes, nothing more.

Equality is bitwise when ONNX Runtime runs with as many intra-op threads as the stream's cube limit (the host NPU's
compute threads); against a reference at another thread count the tolerance is ``CROSS_THREAD_TOL``.
"""

import gc

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from gert import dtypes
from models import (
    CLS,
    DET,
    REC,
    REC_CLASSES,
    add_model,
    assert_same,
    attention_model,
    dtype_inputs,
    dtype_model,
    execute,
    load,
    mlp_model,
    multi_io_inputs,
    multi_io_model,
    ort_run,
    ppocr_model,
    scalar_model,
    text_image,
)

pytestmark = RUNTIME

# ONNX Runtime at different intra-op thread counts may sum in another order: allowed difference, absolute and relative
CROSS_THREAD_TOL = dict(rtol=1e-5, atol=1e-6)
SHAPE_INVALID = 145021


def assert_unknown_shape(summary) -> None:
    """A graph that is not static: GE's output shape, dtype and memory getters fail (they never report -1)."""
    assert not summary.is_static
    for field in ("output_shapes", "output_dtypes", "const_memory_size", "feature_memory_size"):
        with pytest.raises(gert.GeError, match="unknown-shape graph"):
            getattr(summary, field)


def _stream(device, cores):
    st = gert.Stream(device)
    st.cube_cores = cores
    assert st.cube_cores == cores
    return st


@pytest.fixture(scope="module")
def s1(device):
    st = _stream(device, 1)
    yield st
    st.destroy()


@pytest.fixture(scope="module")
def s2(device):
    st = _stream(device, 2)
    yield st
    st.destroy()


@pytest.fixture(scope="module")
def rg_session(device):
    """RunGraph computes with the session's ge.aicoreNum cube count (else the device's): 1 thread here."""
    s = gert.Session({"ge.aicoreNum": "1|1"})
    yield s
    s.close()


# ---- PP-OCR -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cls_static(session, s1, s2):
    """The direction classifier compiled static at 8x3x48x192, once per stream (a graph loads once)."""
    path = ppocr_model(CLS)
    return path, {
        1: (load(session, path, s1, {"input_shape": "x:8,3,48,192"}), s1),
        2: (load(session, path, s2, {"input_shape": "x:8,3,48,192"}), s2),
    }


@pytest.mark.parametrize("threads", [1, 2])
def test_cls_static_bitwise(session, cls_static, threads):
    path, loaded = cls_static
    gid, st = loaded[threads]
    s = session.summary(gid)
    assert s.is_static and s.output_shapes == [(8, 2)] and s.output_dtypes == [np.dtype(np.float32)]
    assert s.const_memory_size > 0 and s.feature_memory_size >= 8 * 2 * 4
    for seed in (1, 2):
        x = text_image(8, 48, 192, seed)
        (got,) = execute(session, gid, st, [x])
        ref = ort_run(path, [x], threads, static=True)[0]
        assert_same(got, ref, f"cls seed {seed}, {threads} thread(s)")
        assert np.allclose(got.sum(1), 1, atol=1e-5) and len(set(got.argmax(1))) == 2, "not a meaningful input"


def test_cls_static_rejects_other_batch(session, cls_static):
    _, loaded = cls_static
    gid, st = loaded[1]
    x = gert.DeviceTensor.from_numpy(text_image(4, 48, 192, 3), st)
    out = gert.DeviceTensor.empty((4, 2), np.float32)
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(gid, st, [x], [out])
    assert ei.value.code == SHAPE_INVALID
    for frag in ("'x'", "[4,3,48,192]", "[8,3,48,192]", "static"):
        assert frag in ei.value.message, ei.value.message
    st.synchronize()


@pytest.fixture(scope="module")
def rec_dynamic(session, s2):
    path = ppocr_model(REC)
    return path, load(session, path, s2)


@pytest.mark.parametrize("batch, width", [(1, 320), (1, 160), (2, 256)])
def test_rec_dynamic_bitwise(session, s2, rec_dynamic, batch, width):
    path, gid = rec_dynamic
    s = session.summary(gid)
    assert_unknown_shape(s)
    x = text_image(batch, 48, width, width)
    ref = ort_run(path, [x], 2)[0]
    assert ref.shape == (batch, width // 8, REC_CLASSES)
    (got,) = execute(session, gid, s2, [x], outputs="ge")  # T depends on W: GE allocates the output
    assert_same(got, ref, f"rec {batch}x3x48x{width} (GE-allocated output)")
    (got,) = execute(session, gid, s2, [x], outputs=[(ref.shape, np.float32)])
    assert_same(got, ref, f"rec {batch}x3x48x{width} (caller-allocated output)")
    np.testing.assert_allclose(got, ort_run(path, [x], 1)[0], **CROSS_THREAD_TOL)


def test_rec_width_gears(session, s1):
    """Gears on the non-batch axis of a real model: W in {160, 320}; 240 is refused."""
    path = ppocr_model(REC)
    gid = load(session, path, s1, options={"ge.inputShape": "x:1,3,48,-1", "ge.dynamicDims": "160;320"})
    assert not session.summary(gid).is_static
    for width in (160, 320):
        x = text_image(1, 48, width, 50 + width)
        (got,) = execute(session, gid, s1, [x], outputs="ge")
        assert_same(got, ort_run(path, [x], 1)[0], f"rec gear W={width}")
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(gid, s1, [gert.DeviceTensor.from_numpy(text_image(1, 48, 240, 1))])
    assert ei.value.code == SHAPE_INVALID and "[240]" in ei.value.message and "[160] [320]" in ei.value.message


def test_rec_static_summary_and_shape_check(session, s1):
    path = ppocr_model(REC)
    gid = load(session, path, s1, {"input_shape": "x:1,3,48,320"})
    s = session.summary(gid)
    assert s.is_static and s.output_shapes == [(1, 40, REC_CLASSES)] and s.output_dtypes == [np.dtype(np.float32)]
    x = text_image(1, 48, 320, 7)
    (got,) = execute(session, gid, s1, [x])
    assert_same(got, ort_run(path, [x], 1, static=True)[0], "rec static 1x3x48x320")
    # ONNX Runtime without the fixed shapes optimizes the graph differently: equal within the tolerance only
    np.testing.assert_allclose(got, ort_run(path, [x], 1)[0], **CROSS_THREAD_TOL)
    narrow = gert.DeviceTensor.from_numpy(text_image(1, 48, 160, 7), s1)
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(gid, s1, [narrow], [gert.DeviceTensor.empty((1, 40, REC_CLASSES), np.float32)])
    assert ei.value.code == SHAPE_INVALID
    for frag in ("'x'", "[1,3,48,160]", "[1,3,48,320]"):
        assert frag in ei.value.message, ei.value.message
    s1.synchronize()


def test_det_static_small_bitwise(session, s1):
    path = ppocr_model(DET)
    gid = load(session, path, s1, {"input_shape": "x:1,3,96,96"})
    s = session.summary(gid)
    assert s.is_static and s.output_shapes == [(1, 1, 96, 96)]
    x = text_image(1, 96, 96, 11)
    (got,) = execute(session, gid, s1, [x])
    ref = ort_run(path, [x], 1, static=True)[0]
    assert_same(got, ref, "det static 1x3x96x96")
    assert ref.max() > 0.9 and ref.min() < 0.1, "the synthetic page should contain detected text"


@pytest.fixture(scope="module")
def det_dynamic(session, s2):
    path = ppocr_model(DET)
    return path, load(session, path, s2)


@pytest.mark.parametrize("shape", [(1, 3, 96, 96), (2, 3, 64, 128), (1, 3, 64, 160)])
def test_det_dynamic_bitwise(session, s2, det_dynamic, shape):
    path, gid = det_dynamic
    s = session.summary(gid)
    assert_unknown_shape(s)
    x = text_image(shape[0], shape[2], shape[3], sum(shape))
    ref = ort_run(path, [x], 2)[0]
    assert ref.shape == (shape[0], 1, shape[2], shape[3])
    (got,) = execute(session, gid, s2, [x], outputs="ge")
    assert_same(got, ref, f"det {shape}")
    np.testing.assert_allclose(got, ort_run(path, [x], 1)[0], **CROSS_THREAD_TOL)


def test_det_640_once(session, s2, det_dynamic):
    """The one full-size case (1x3x640x640, ~60-150 ms a run here), caller-allocated output."""
    path, gid = det_dynamic
    x = text_image(1, 640, 640, 640)
    (got,) = execute(session, gid, s2, [x], outputs=[((1, 1, 640, 640), np.float32)])
    assert_same(got, ort_run(path, [x], 2)[0], "det 1x3x640x640")


def test_ppocr_run_graph(rg_session):
    """RunGraph (numpy in and out): static cls, and dynamic det at two sizes."""
    cls, det = ppocr_model(CLS), ppocr_model(DET)
    gid = 901
    rg_session.add_graph(gid, gert.Graph.from_onnx(cls, {"input_shape": "x:8,3,48,192"}))
    x = text_image(8, 48, 192, 21)
    (got,) = rg_session.run_graph(gid, [x])  # compiles on first use, as GE does
    assert rg_session.summary(gid).is_static
    assert_same(got, ort_run(cls, [x], 1, static=True)[0], "cls via run_graph")
    rg_session.add_graph(gid + 1, gert.Graph.from_onnx(det))
    for shape in ((1, 3, 96, 96), (1, 3, 64, 128)):
        x = text_image(1, shape[2], shape[3], 22)
        (got,) = rg_session.run_graph(gid + 1, [x])
        assert_same(got, ort_run(det, [x], 1)[0], f"det {shape} via run_graph")


# ---- generated graphs ---------------------------------------------------------------------------------------------


def _expected_dtype_outputs(dt, a, b, f):
    dt = np.dtype(dt)
    if dt == np.bool_:
        combined = a ^ b
    elif dt.name == "bfloat16":
        combined = b
    else:
        combined = (a + b).astype(dt)
    return [a, a.astype(np.float32), (f != 0) if dt == np.bool_ else f.astype(dt), combined]


@pytest.mark.parametrize("dt", dtypes.supported_numpy_dtypes(), ids=lambda d: np.dtype(d).name)
def test_every_dtype(session, rg_session, s1, dt):
    dt = np.dtype(dt)
    model, _ = dtype_model(dt)
    out_dtypes = [dt, np.dtype(np.float32), dt, dt]

    gid = load(session, model, s1)  # dynamic: [n, 3]
    s = session.summary(gid)
    assert_unknown_shape(s)
    for rows, seed in ((5, 1), (2, 2)):
        ins = dtype_inputs(dt, rows, seed)
        ref = ort_run(model, ins)
        expected = _expected_dtype_outputs(dt, *ins)
        for mode in ("ge", [((rows, 3), d) for d in out_dtypes]):
            got = execute(session, gid, s1, ins, outputs=mode)
            for i, (g, r, e) in enumerate(zip(got, ref, expected)):
                assert_same(g, r, f"{dt} output {i} ({'GE' if mode == 'ge' else 'caller'}-allocated)")
                assert_same(g, np.asarray(e, out_dtypes[i]), f"{dt} output {i} vs numpy")

    sid = load(session, model, s1, {"input_shape": "a:5,3;b:5,3;f:5,3"})  # static
    s = session.summary(sid)
    assert s.is_static and s.output_shapes == [(5, 3)] * 4 and s.output_dtypes == out_dtypes
    ins = dtype_inputs(dt, 5, 3)
    for g, r in zip(execute(session, sid, s1, ins), ort_run(model, ins, static=True)):
        assert_same(g, r, f"{dt} static")

    rid = 1000 + dtypes.ge_dtype(dt)
    rg_session.add_graph(rid, gert.Graph.from_onnx(model))
    for g, r in zip(rg_session.run_graph(rid, ins), ort_run(model, ins)):
        assert_same(g, r, f"{dt} run_graph")


def test_unsupported_dtype_is_named():
    with pytest.raises(gert.GertError, match="complex64"):
        dtypes.ge_dtype(np.complex64)
    with pytest.raises(gert.GertError, match="complex64"):
        gert.DeviceTensor.empty((2,), np.complex64)


MULTI_DTYPES = [np.dtype(d) for d in (np.float32, np.float32, np.int64, np.float32, np.float16)]


def test_multi_io_symbolic_axes(session, s1):
    model = multi_io_model()
    gid = load(session, model, s1)
    s = session.summary(gid)
    assert_unknown_shape(s)
    for n, m, seed in ((3, 5, 1), (6, 1, 2), (1, 9, 3)):
        ins = multi_io_inputs(n, m, seed)
        ref = ort_run(model, ins)
        assert [r.shape for r in ref] == [(n,), (n,), (n,), (n, 8), ()]
        for mode in ("ge", [(r.shape, r.dtype) for r in ref]):
            got = execute(session, gid, s1, ins, outputs=mode)
            assert len(got) == 5
            for i, (g, r) in enumerate(zip(got, ref)):
                assert_same(g, r, f"multi_io n={n} m={m} output {i}")
        assert_same(got[2], ins[1] * 2, "twice")


def test_multi_io_static_and_run_graph(session, rg_session, s1):
    model = multi_io_model()
    sid = load(session, model, s1, {"input_shape": "x:3,4;idx:3;flag:3;z:5"})
    s = session.summary(sid)
    assert s.is_static and s.output_shapes == [(3,), (3,), (3,), (3, 8), ()] and s.output_dtypes == MULTI_DTYPES
    ins = multi_io_inputs(3, 5, 4)
    for g, r in zip(execute(session, sid, s1, ins), ort_run(model, ins, static=True)):
        assert_same(g, r, "multi_io static")
    rg_session.add_graph(950, gert.Graph.from_onnx(model))
    for g, r in zip(rg_session.run_graph(950, ins), ort_run(model, ins)):
        assert_same(g, r, "multi_io run_graph")


def test_output_node_name_selects_outputs(session, s1):
    model = multi_io_model()
    gid = load(session, model, s1, {"ge.outputNodeName": "wide;twice"})
    s = session.summary(gid)
    assert_unknown_shape(s)
    ins = multi_io_inputs(4, 2, 5)
    wide, twice = ort_run(model, ins, output_names=["wide", "twice"])
    got = execute(session, gid, s1, ins, outputs="ge")
    assert len(got) == 2
    assert_same(got[0], wide, "wide")
    assert_same(got[1], twice, "twice")


def test_attention_symbolic_sequence(session, s1):
    model = attention_model(0)
    gid = load(session, model, s1)
    s = session.summary(gid)
    assert_unknown_shape(s)
    rng = np.random.default_rng(5)
    for batch, seq in ((2, 5), (1, 17), (3, 1)):
        x = rng.standard_normal((batch, seq, 16)).astype(np.float32)
        ref = ort_run(model, [x])
        got = execute(session, gid, s1, [x], outputs="ge")
        assert_same(got[0], ref[0], f"attention y {batch}x{seq}")
        assert_same(got[1], ref[1], f"attention attn {batch}x{seq}")
        assert got[1].shape == (batch, seq, seq)
    sid = load(session, model, s1, {"input_shape": "x:2,7,16"})
    s = session.summary(sid)
    assert s.is_static and s.output_shapes == [(2, 7, 16), (2, 7, 7)]
    x = rng.standard_normal((2, 7, 16)).astype(np.float32)
    for g, r in zip(execute(session, sid, s1, [x]), ort_run(model, [x], static=True)):
        assert_same(g, r, "attention static")


def test_zero_d_tensors(session, rg_session, s1):
    model = scalar_model()
    sid = load(session, model, s1, {"input_shape": "v:4"})
    s = session.summary(sid)
    assert s.is_static and s.output_shapes == [(), (), ()] and s.output_dtypes == [np.dtype(np.float32)] * 3
    ins = [np.array(2.5, np.float32), np.array(-1.25, np.float32), np.arange(4, dtype=np.float32)]
    got = execute(session, sid, s1, ins)
    for g, r in zip(got, ort_run(model, ins, static=True)):
        assert_same(g, r, "0-d static")
    assert [float(g) for g in got] == [1.25, -2.5, 6.0]
    rg_session.add_graph(960, gert.Graph.from_onnx(model))
    got = rg_session.run_graph(960, ins)
    for g, r in zip(got, ort_run(model, ins)):
        assert_same(g, r, "0-d via run_graph")


def test_empty_tensors(session, rg_session, s1):
    """Size-0 inputs and outputs: ONNX Runtime handles them, so the host NPU does (static, dynamic, RunGraph);
    also a reduction of a size-0 input to a 0-d output."""
    model = add_model(np.float32, ("n", 4), name="add_empty")
    empty = np.zeros((0, 4), np.float32)
    sid = load(session, model, s1, {"input_shape": "a:0,4;b:0,4"})
    s = session.summary(sid)
    assert s.is_static and s.output_shapes == [(0, 4)]
    (got,) = execute(session, sid, s1, [empty, empty])
    assert_same(got, empty, "static size-0")
    did = load(session, model, s1)
    for mode in ("ge", [((0, 4), np.float32)]):
        (got,) = execute(session, did, s1, [empty, empty], outputs=mode)
        assert_same(got, empty, f"dynamic size-0 ({mode})")
    rg_session.add_graph(970, gert.Graph.from_onnx(model))
    (got,) = rg_session.run_graph(970, [empty, empty])
    assert_same(got, empty, "run_graph size-0")
    sc = load(session, scalar_model(), s1)
    ins = [np.array(1, np.float32), np.array(2, np.float32), np.zeros(0, np.float32)]
    for g, r in zip(execute(session, sc, s1, ins, outputs="ge"), ort_run(scalar_model(), ins)):
        assert_same(g, r, "ReduceSum of size-0")


# ---- static vs dynamic, gears -------------------------------------------------------------------------------------


def test_static_rejects_other_shape_dynamic_runs_it(session, rg_session, s1):
    model = mlp_model(1)
    sid = load(session, model, s1, {"input_shape": "x:4,16"})
    did = load(session, model, s1)
    assert session.summary(sid).is_static and session.summary(sid).output_shapes == [(4, 8), (4, 8)]
    assert_unknown_shape(session.summary(did))
    rng = np.random.default_rng(8)
    x4 = rng.standard_normal((4, 16)).astype(np.float32)
    for g, r in zip(execute(session, sid, s1, [x4]), ort_run(model, [x4], static=True)):
        assert_same(g, r, "mlp static batch 4")
    x3 = rng.standard_normal((3, 16)).astype(np.float32)
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(
            sid, s1, [gert.DeviceTensor.from_numpy(x3)], [gert.DeviceTensor.empty((4, 8), np.float32) for _ in range(2)]
        )
    assert ei.value.code == SHAPE_INVALID
    for frag in (f"graph {sid}", "'x'", "[3,16]", "[4,16]"):
        assert frag in ei.value.message, ei.value.message
    for batch in (3, 1, 64):
        x = rng.standard_normal((batch, 16)).astype(np.float32)
        for g, r in zip(execute(session, did, s1, [x], outputs="ge"), ort_run(model, [x])):
            assert_same(g, r, f"mlp dynamic batch {batch}")
    # RunGraph applies the same rule
    rg_session.add_graph(980, gert.Graph.from_onnx(model, {"input_shape": "x:4,16"}))
    with pytest.raises(gert.GeError) as ei:
        rg_session.run_graph(980, [x3])
    assert ei.value.code == SHAPE_INVALID and "[3,16]" in ei.value.message and "[4,16]" in ei.value.message
    for g, r in zip(rg_session.run_graph(980, [x4]), ort_run(model, [x4], static=True)):
        assert_same(g, r, "run_graph static after a rejected shape")


def test_graph_option_input_shape_fixes_dims(session, s1):
    model = mlp_model(2)
    gid = load(session, model, s1, options={"ge.inputShape": "x:6,16"})
    s = session.summary(gid)
    assert s.is_static and s.output_shapes == [(6, 8), (6, 8)]
    x = np.random.default_rng(9).standard_normal((6, 16)).astype(np.float32)
    for g, r in zip(execute(session, gid, s1, [x]), ort_run(model, [x], static=True)):
        assert_same(g, r, "ge.inputShape static")


def test_gears_one_dim(session, rg_session, s1):
    model = mlp_model(3)
    opts = {"ge.inputShape": "x:-1,16", "ge.dynamicDims": "1;4;8"}
    gid = load(session, model, s1, options=opts)
    s = session.summary(gid)
    assert_unknown_shape(s)
    rng = np.random.default_rng(10)
    for batch in (1, 4, 8):
        x = rng.standard_normal((batch, 16)).astype(np.float32)
        for mode in ("ge", [((batch, 8), np.float32)] * 2):
            for g, r in zip(execute(session, gid, s1, [x], outputs=mode), ort_run(model, [x])):
                assert_same(g, r, f"gear {batch}")
    for batch in (2, 16):
        x = gert.DeviceTensor.from_numpy(rng.standard_normal((batch, 16)).astype(np.float32))
        with pytest.raises(gert.GeError) as ei:
            session.execute_async(gid, s1, [x])
        assert ei.value.code == SHAPE_INVALID
        assert f"[{batch}]" in ei.value.message and "[1] [4] [8]" in ei.value.message, ei.value.message
    rg_session.add_graph(990, gert.Graph.from_onnx(model), opts)
    with pytest.raises(gert.GeError, match=r"\[1\] \[4\] \[8\]"):
        rg_session.run_graph(990, [np.zeros((2, 16), np.float32)])
    x = rng.standard_normal((4, 16)).astype(np.float32)
    for g, r in zip(rg_session.run_graph(990, [x]), ort_run(model, [x])):
        assert_same(g, r, "gear via run_graph")


def test_gears_two_dims(session, s1):
    model = attention_model(1)
    gid = load(session, model, s1, options={"ge.inputShape": "x:-1,-1,16", "ge.dynamicDims": "1,5;2,9"})
    assert not session.summary(gid).is_static
    rng = np.random.default_rng(11)
    for batch, seq in ((1, 5), (2, 9)):
        x = rng.standard_normal((batch, seq, 16)).astype(np.float32)
        for g, r in zip(execute(session, gid, s1, [x], outputs="ge"), ort_run(model, [x])):
            assert_same(g, r, f"gear {batch},{seq}")
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(gid, s1, [gert.DeviceTensor.from_numpy(np.zeros((1, 9, 16), np.float32))])
    assert "[1,9]" in ei.value.message and "[1,5] [2,9]" in ei.value.message, ei.value.message


@pytest.mark.parametrize(
    "options",
    [
        {"ge.exec.precision_mode": "force_fp32"},
        {"ge.exec.precision_mode": "allow_mix_precision"},
        {"ge.exec.precision_mode_v2": "origin"},
        {"ge.exec.precision_mode_v2": "mixed_float16"},
        {"ge.gert_tests.not_a_ge_option": "1"},  # unknown keys: accepted with a warning, as GE does
    ],
    ids=lambda o: "=".join(next(iter(o.items()))),
)
def test_graph_options_accepted(session, s1, options):
    model = add_model(name="opts")
    gid = load(session, model, s1, options=options)
    a, b = np.ones((2, 4), np.float32), np.full((2, 4), 2, np.float32)
    (got,) = execute(session, gid, s1, [a, b], outputs="ge")
    assert_same(got, a + b, f"with {options}")


# ---- the data path ------------------------------------------------------------------------------------------------


def _counted_runs(session, gid, stream, feeds, iterations):
    """Static graph, caller-allocated I/O allocated once; per iteration one H2D per input, the run, one D2H per
    output into preallocated numpy arrays. Returns (counters, per-iteration outputs, device memory before/after)."""
    s = session.summary(gid)
    ins = [gert.DeviceTensor.empty(f[0].shape, f[0].dtype) for f in feeds]
    outs = [gert.DeviceTensor.empty(shape, dt) for shape, dt in zip(s.output_shapes, s.output_dtypes)]
    results = [[np.empty(shape, dt) for shape, dt in zip(s.output_shapes, s.output_dtypes)] for _ in range(iterations)]
    session.execute_async(gid, stream, ins, outs)  # warm up (ORT binding, first-run allocations)
    stream.synchronize()
    gc.collect()  # an earlier test's garbage freed now, not during the counted runs
    before = gert.host_counters()["device_memory_in_use"]
    gert.reset_host_counters()
    for it in range(iterations):
        for t, f in zip(ins, feeds):
            t.buffer.copy_from(f[it], stream)
        session.execute_async(gid, stream, ins, outs)
        for t, r in zip(outs, results[it]):
            t.to_numpy(stream, out=r)
    stream.synchronize()
    c = gert.host_counters()
    return c, results, before


@pytest.mark.hostnpu_only  # reads gert.host_counters()
@pytest.mark.parametrize("which", ["multi_io", "cls"])
def test_host_counters_prove_data_path(session, s1, which):
    iterations = 4
    if which == "cls":
        model = ppocr_model(CLS)
        gid = load(session, model, s1, {"input_shape": "x:8,3,48,192"})
        feeds = [[text_image(8, 48, 192, 30 + i) for i in range(iterations)]]
    else:
        model = multi_io_model()
        gid = load(session, model, s1, {"input_shape": "x:5,4;idx:5;flag:5;z:3"})
        per_it = [multi_io_inputs(5, 3, 40 + i) for i in range(iterations)]
        feeds = [list(col) for col in zip(*per_it)]
    c, results, mem_before = _counted_runs(session, gid, s1, feeds, iterations)
    in_bytes = sum(f[0].nbytes for f in feeds)
    out_bytes = sum(r.nbytes for r in results[0])
    assert c["bytes_h2d"] == iterations * in_bytes, (c, in_bytes)
    assert c["bytes_d2h"] == iterations * out_bytes, (c, out_bytes)
    assert c["bytes_d2d"] == 0 and c["bytes_h2h"] == 0, c
    assert c["device_memory_in_use"] == mem_before, "an inference allocated device memory it did not free"
    for it in range(iterations):  # and the bytes moved were the right ones
        for g, r in zip(results[it], ort_run(model, [f[it] for f in feeds], static=True)):
            assert_same(g, r, f"{which} iteration {it}")


# ---- the PP-OCR requirement itself --------------------------------------------------------------------------------


def test_missing_ppocr_models_fail_under_ci(monkeypatch):
    """Without the rapidocr-onnxruntime wheel the PP-OCR tests skip locally but FAIL when CI=true."""
    import models

    monkeypatch.setattr(models, "ppocr_dir", lambda: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        models.ppocr_model(CLS)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="rapidocr-onnxruntime==1.4.4"):
        models.ppocr_model(CLS)
