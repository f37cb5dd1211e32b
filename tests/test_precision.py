"""Issue 24, parts 2-3: GE precision modes emulated on the host NPU (gert.load(precision_mode=, keep_fp32=), the
ge.exec.precision_mode(_v2) options, the compile cache key, gert_triton, gert bench), and the precision A/B
(gert.compare_precision, gert.find_keep_fp32, gert precision).

The emulation model (gert/preview/precision.py): a lowered node's float inputs and outputs are rounded to fp16
(round-to-nearest-even, overflow to inf), the op computes in fp32 - which is exactly numpy's float16 arithmetic
(numpy computes half ops in float and rounds the result).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper as oh, numpy_helper as nh

import fake_pb_utils
import gert
from _helpers import RUNTIME
from gert.preview import compare, precision
from gert.preview.inputs import ort_run

pytestmark = RUNTIME


def vi(name, shape):
    return oh.make_tensor_value_info(name, TP.FLOAT, list(shape))


def build(nodes, inputs, outputs, inits=(), opset=17) -> bytes:
    g = oh.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


N = 257


def arith() -> bytes:
    """z = ((x * y + x) - y) / y, each step a node."""
    return build(
        [
            oh.make_node("Mul", ["x", "y"], ["m"], name="mul"),
            oh.make_node("Add", ["m", "x"], ["a"], name="add"),
            oh.make_node("Sub", ["a", "y"], ["s"], name="sub"),
            oh.make_node("Div", ["s", "y"], ["z"], name="div"),
        ],
        [vi("x", [N]), vi("y", [N])],
        [vi("z", [N])],
    )


def feeds(seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(N) * 300).astype(np.float32)
    y = (rng.standard_normal(N) * 3 + 0.5).astype(np.float32)
    x[:3] = [70000.0, 1e-8, 1.0 + 2**-12]  # above fp16's range, below its subnormals, a rounding tie's neighbour
    y[:3] = [1.0, 3.0, 1.0]
    x[3], y[3] = 300.0, 300.0  # the product 90000 overflows fp16
    return {"x": x, "y": y}


def f16_reference(x, y):
    with np.errstate(all="ignore"):
        h, k = x.astype(np.float16), y.astype(np.float16)
        return (((h * k) + h) - k) / k


def run(data, f, **kw):
    with gert.load(data, **kw) as m:
        return m.run(f)


def test_force_fp16_equals_numpy_float16_bit_for_bit():
    f = feeds()
    z = run(arith(), f, precision_mode="force_fp16")["z"]
    ref = f16_reference(f["x"], f["y"]).astype(np.float32)
    assert np.isinf(ref).sum() >= 2  # the overflow cases happen
    np.testing.assert_array_equal(z, ref)
    z2 = run(arith(), f, precision_mode="fp16")["z"]  # precision_mode_v2's name for it
    np.testing.assert_array_equal(z2, ref)
    z3 = run(arith(), f, options={"ge.exec.precision_mode": "force_fp16"})["z"]  # GE's option key
    np.testing.assert_array_equal(z3, ref)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"precision_mode": "must_keep_origin_dtype"},
        {"precision_mode": "origin"},
        {"options": {"ge.exec.precision_mode_v2": "origin"}},
    ],
)
def test_origin_equals_onnx_runtime_bit_for_bit(kw):
    f = feeds()
    np.testing.assert_array_equal(run(arith(), f, **kw)["z"], ort_run(arith(), f)["z"])


def test_origin_compiles_the_model_itself():
    data = arith()
    assert precision.rewrite(data, precision.normalise("must_keep_origin_dtype")) is data
    with precision.compiling(precision.normalise("origin")):
        assert precision.for_compile(data) is data
    with precision.compiling(precision.normalise("force_fp16")):
        first = precision.for_compile(data)
        assert first is not data and precision.for_compile(data) is first  # one object per (model, settings)


def test_keep_fp32_by_name_and_by_type():
    f = feeds(1)
    x, y = f["x"], f["y"]
    with np.errstate(all="ignore"):
        m = x * y  # mul kept in fp32 (its output is not rounded) ...
        h = lambda v: v.astype(np.float16)  # noqa: E731
        ref = (((h(m) + h(x)) - h(y)) / h(y)).astype(np.float32)  # ... its consumers round it at their input
    np.testing.assert_array_equal(run(arith(), f, precision_mode="force_fp16", keep_fp32=["mul"])["z"], ref)
    np.testing.assert_array_equal(run(arith(), f, precision_mode="force_fp16", keep_fp32=["Mul"])["z"], ref)
    every = run(arith(), f, precision_mode="force_fp16", keep_fp32=["Mul", "Add", "Sub", "Div"])["z"]
    np.testing.assert_array_equal(every, ort_run(arith(), f)["z"])


def matmul_add() -> tuple:
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((8, 4)) * 10).astype(np.float32)
    b = (rng.standard_normal(4) * 1000).astype(np.float32)
    data = build(
        [oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"), oh.make_node("Add", ["h", "b"], ["y"], name="bias")],
        [vi("x", [5, 8])],
        [vi("y", [5, 4])],
        [nh.from_array(w, "w"), nh.from_array(b, "b")],
    )
    x = (rng.standard_normal((5, 8)) * 10).astype(np.float32)
    return data, x, w, b


def r16(v):
    with np.errstate(all="ignore"):
        return v.astype(np.float16).astype(np.float32)


@pytest.mark.parametrize(
    "mode, cube_in, cube_out, vector",
    [
        ("allow_fp32_to_fp16", True, True, False),  # cube ops in fp16, vector ops keep fp32
        ("force_fp32", True, False, False),  # cube ops: fp16 in, fp32 out
        ("cube_fp16in_fp32out", True, False, False),
        ("allow_mix_precision", True, True, True),  # Add and MatMul are not on the emulation's black list
    ],
)
def test_cube_and_vector_ops_per_mode(mode, cube_in, cube_out, vector):
    data, x, w, b = matmul_add()
    h = (r16(x) @ r16(w)) if cube_in else x @ w
    h = r16(h) if cube_out else h
    y = (r16(r16(h) + r16(b))) if vector else h + b
    got = run(data, {"x": x}, precision_mode=mode)["y"]
    np.testing.assert_allclose(got, y, rtol=1e-6, atol=1e-4)
    assert not np.array_equal(got, ort_run(data, {"x": x})["y"])


def test_bf16_mode_rounds_to_bfloat16():
    import ml_dtypes

    data, x, w, b = matmul_add()
    got = run(data, {"x": x}, precision_mode="allow_fp32_to_bf16")["y"]
    bf = lambda v: v.astype(ml_dtypes.bfloat16).astype(np.float32)  # noqa: E731
    np.testing.assert_allclose(got, bf(bf(x) @ bf(w)) + b, rtol=1e-6, atol=1e-3)


def test_bad_mode_and_conflicting_settings_are_clear_errors():
    with pytest.raises(gert.GertError, match="precision_mode: 'fp8' is not a GE precision mode"):
        gert.load(arith(), precision_mode="fp8")
    with pytest.raises(gert.GertError, match="both set the precision mode"):
        gert.load(arith(), precision_mode="fp16", options={"ge.exec.precision_mode": "force_fp16"})


def test_repr_shows_the_mode():
    with gert.load(arith(), precision_mode="force_fp16", keep_fp32=["mul"]) as m:
        assert repr(m).endswith("precision force_fp16, keep_fp32=['mul']>")
        assert m.precision.mode == "force_fp16"
    with gert.load(arith()) as m:
        assert m.precision.mode == "must_keep_origin_dtype" and "precision" not in repr(m)


def test_compile_cache_key_covers_the_precision_settings(tmp_path):
    f = feeds(2)
    ref16 = f16_reference(f["x"], f["y"]).astype(np.float32)
    cases = [
        ({}, False),
        ({"precision_mode": "force_fp16"}, True),
        ({"precision_mode": "force_fp16", "keep_fp32": ["Div"]}, None),
    ]
    for kw, _fp16 in cases:  # cold: each setting its own key
        with gert.load(arith(), cache_dir=tmp_path, **kw) as m:
            z = m.run(f)["z"]
            assert m.stats()["cache_misses"] == 1, kw
    for kw, fp16 in cases:  # warm: each loads its own entry, with its own results
        with gert.load(arith(), cache_dir=tmp_path, **kw) as m:
            z = m.run(f)["z"]
            assert m.stats()["cache_hits"] == 1, kw
            if fp16 is True:
                np.testing.assert_array_equal(z, ref16)
            elif fp16 is False:
                np.testing.assert_array_equal(z, ort_run(arith(), f)["z"])
            else:
                assert not np.array_equal(z, ref16)


def test_gert_info_shows_the_default_mode(capsys):
    from gert.cli import main

    assert main(["info"]) == 0
    assert "precision mode: must_keep_origin_dtype" in capsys.readouterr().out


# ---- gert_triton -----------------------------------------------------------------------------------------------------
def test_triton_parameters_precision():
    from gert_triton.config import ConfigError, parse_parameters

    p = parse_parameters({"precision_mode": {"string_value": "force_fp16"}, "keep_fp32": {"string_value": "a, Mul"}})
    assert p.get("precision_mode") == "force_fp16" and p.get("keep_fp32") == ["a", "Mul"]
    with pytest.raises(ConfigError, match="parameter 'precision_mode': 'half' is not a GE precision mode"):
        parse_parameters({"precision_mode": {"string_value": "half"}})
    with pytest.raises(ConfigError, match="parameter 'keep_fp32': empty"):
        parse_parameters({"keep_fp32": {"string_value": " , "}})


def test_triton_model_runs_in_the_configured_mode(monkeypatch, tmp_path):
    import test_triton_unit as tu

    pb = fake_pb_utils.install(monkeypatch)
    mdir = tu.model_dir(tmp_path, arith())
    cfg = tu.autocomplete(pb, mdir, parameters=tu.params(precision_mode="force_fp16", streams="1", warmup="false"))
    model = tu.TritonPythonModel()
    model.initialize(tu.init_args(mdir, cfg))
    try:
        f = feeds()
        assert model.model.precision.mode == "force_fp16"
        z = model.model.run(f)["z"]
        np.testing.assert_array_equal(z, f16_reference(f["x"], f["y"]).astype(np.float32))
    finally:
        model.finalize()


# ---- compare_precision / find_keep_fp32 ------------------------------------------------------------------------------
def chain20(overflow_at: int = 9) -> bytes:
    """20 nodes on x: mostly +0.5 / *0.9; node ``overflow_at`` multiplies by 1e5 (fp16 overflows) and the next one
    divides by 1e5 again, so fp32 stays in range while fp16 turns everything after into inf."""
    nodes, inits, prev = [], [], "x"
    for i in range(20):
        out = "y" if i == 19 else f"t{i}"
        if i == overflow_at:
            op, c = "Mul", 1e5
        elif i == overflow_at + 1:
            op, c = "Div", 1e5
        else:
            op, c = ("Add", 0.5) if i % 2 else ("Mul", 0.9)
        inits.append(nh.from_array(np.array(c, np.float32), f"c{i}"))
        nodes.append(oh.make_node(op, [prev, f"c{i}"], [out], name=f"n{i:02d}"))
        prev = out
    return build(nodes, [vi("x", [16])], [vi("y", [16])], inits)


def test_find_keep_fp32_finds_the_overflowing_node_of_20():
    x = {"x": np.linspace(1, 4, 16, dtype=np.float32)}
    result = gert.find_keep_fp32(chain20(9), x, "force_fp16", min_cosine=0.999)
    assert "n09" in result.nodes and len(result.nodes) <= 2, result  # the overflow and the node reading it
    assert result.before < 0.999 <= result.after and result.met
    assert result.keep_dtype_file().splitlines()[0] == "OpName:n09"
    z = run(chain20(9), x, precision_mode="force_fp16", keep_fp32=result.nodes)["y"]
    assert np.isfinite(z).all()


def test_compare_precision_table():
    x = {"x": np.linspace(1, 4, 16, dtype=np.float32)}
    table = gert.compare_precision(chain20(9), x, modes=("force_fp16", "must_keep_origin_dtype"))
    rows = {r.mode: r for r in table.rows}
    assert rows["force_fp16"].nonfinite == 16 and np.isnan(rows["force_fp16"].cosine)
    assert (rows["must_keep_origin_dtype"].cosine, rows["must_keep_origin_dtype"].max_abs) == (1.0, 0.0)
    assert "force_fp16" in str(table) and "<table>" in table._repr_html_()
    with pytest.warns(compare.RandomInputsWarning, match="real inputs give real answers"):
        t2 = gert.compare_precision(arith(), modes=("allow_fp32_to_fp16",))
    assert t2.rows[0].cosine == 1.0 and t2.random_inputs  # no cube op: nothing lowered


def test_gert_precision_cli_writes_the_keep_dtype_file(tmp_path, capsys):
    from gert.cli import main

    path = tmp_path / "chain.onnx"
    path.write_bytes(chain20(9))
    xs = tmp_path / "x.npy"
    np.save(xs, np.linspace(1, 4, 16, dtype=np.float32))
    keep = tmp_path / "keep.txt"
    assert (
        main(
            ["precision", str(path), "--input", f"x={xs}", "--modes", "force_fp16,origin", "--keep-fp32-out", str(keep)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "force_fp16" in out and "origin" in out and "wrote" in out
    assert "OpName:n09" in keep.read_text().splitlines()
    assert main(["precision", str(path), "--modes", "half"]) == 2


def test_batch_normalization_statistics_stay_fp32():
    """CANN's BatchNorm kernels take mean / variance in fp32 in every mode: a variance above fp16's range (PP-OCRv4 det
    has 9.8e7) must not become inf and zero the output."""
    c = 4
    params = {"scale": np.ones(c), "bias": np.zeros(c), "mean": np.full(c, 5.0), "var": np.array([1e8, 4e7, 1.0, 2.0])}
    inits = [nh.from_array(v.astype(np.float32), k) for k, v in params.items()]
    data = build(
        [oh.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], name="bn")],
        [vi("x", [1, c, 2, 2])],
        [vi("y", [1, c, 2, 2])],
        inits,
    )
    x = np.random.default_rng(5).standard_normal((1, c, 2, 2)).astype(np.float32) * 1000
    y = run(data, {"x": x}, precision_mode="force_fp16")["y"]
    ref = ort_run(data, {"x": r16(x)})["y"]
    np.testing.assert_array_equal(y, r16(ref))
    assert np.abs(y[0, 0]).max() > 0


# ---- through GE's own API: the host NPU hands the compile's options to the provider ----------------------------------
@pytest.mark.hostnpu_only
def test_ge_session_and_graph_options_are_honoured():
    f = feeds()
    ref16 = f16_reference(f["x"], f["y"]).astype(np.float32)
    exact = ort_run(arith(), f)["z"]
    s = gert.Session({"ge.exec.precision_mode": "force_fp16"})
    try:
        s.add_graph(1, gert.Graph.from_onnx(arith()))
        (z,) = s.run_graph(1, [f["x"], f["y"]])
        np.testing.assert_array_equal(z, ref16)
        s.add_graph(2, gert.Graph.from_onnx(arith()), {"ge.exec.precision_mode": "must_keep_origin_dtype"})
        (z,) = s.run_graph(2, [f["x"], f["y"]])  # the graph's option over the session's
        np.testing.assert_array_equal(z, exact)
    finally:
        s.close()
    assert gert.hostnpu.compile_option("ge.exec.precision_mode") is None  # outside a compile


def test_gert_bench_precision_mode(tmp_path, capsys):
    from gert.cli import main

    path = tmp_path / "arith.onnx"
    path.write_bytes(arith())
    assert (
        main(
            [
                "bench",
                str(path),
                "--precision-mode",
                "force_fp16",
                "--iterations",
                "4",
                "--concurrency",
                "1",
                "--warmup",
                "1",
            ]
        )
        == 0
    )
    assert main(["bench", str(path), "--precision-mode", "fp8", "--iterations", "4"]) == 2
    assert "precision_mode: 'fp8' is not a GE precision mode" in capsys.readouterr().err


def test_onnxruntime_api_cann_provider_precision_mode():
    """ONNX Runtime's CANN EP option precision_mode (gert.InferenceSession maps it to ge.exec.precision_mode)."""
    f = feeds()
    with gert.InferenceSession(arith(), providers=[("CANNExecutionProvider", {"precision_mode": "force_fp16"})]) as s:
        (z,) = s.run(None, f)
    np.testing.assert_array_equal(z, f16_reference(f["x"], f["y"]).astype(np.float32))
