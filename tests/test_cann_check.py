"""Issue 24, part 1: would a stock CANN 8.x ONNX parser take the model? (gert.cann_check, gert.load(cann_ops=...),
GERT_CANN_OPS, gert check [--json] [--fix], gert_triton's cann_ops parameter).

The rule under test (GE's onnx_parser.cc, gert/preview/cann_ops.py): key = domain (empty -> ai.onnx) :: the MODEL's
opset for that domain :: op_type, looked up exactly in the registered keys (gert/preview/cann_ops.json); Constant
always maps; If branches are checked; a domain without an opset import fails (E19999).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper as oh, numpy_helper as nh

import fake_pb_utils
import gert
from _helpers import RUNTIME
from gert.preview import cann_ops
from gert.preview.cann_ops import (
    DOMAIN_NOT_MAPPED,
    MISSING_OPSET_IMPORT,
    OP_NOT_MAPPED,
    OPSET_NOT_MAPPED,
    CannCompatibilityWarning,
)

pytestmark = RUNTIME


def vi(name, shape=(2, 3), t=TP.FLOAT):
    return oh.make_tensor_value_info(name, t, list(shape) if shape is not None else None)


def model(nodes, opsets=(("", 17),), inputs=("x",), outputs=("y",), inits=(), ir=8, shapes=None) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "g", [vi(i) for i in inputs], [vi(o, shapes) for o in outputs], list(inits))
    m = oh.make_model(g, opset_imports=[oh.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = ir
    return m


def relu(opset: int) -> onnx.ModelProto:
    return model([oh.make_node("Relu", ["x"], ["y"], name="act")], (("", opset),), ir=8 if opset <= 17 else 9)


def qdq() -> onnx.ModelProto:
    scale = nh.from_array(np.array(0.1, np.float32), "s")
    zp = nh.from_array(np.array(0, np.uint8), "z")
    return model(
        [
            oh.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
            oh.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant"),
        ],
        inits=[scale, zp],
    )


def ms_gelu() -> onnx.ModelProto:
    return model(
        [oh.make_node("Gelu", ["x"], ["y"], name="fused_gelu", domain="com.microsoft")],
        (("", 17), ("com.microsoft", 1)),
    )


def if_with_qdq() -> onnx.ModelProto:
    """y = If(c): then Quantize/Dequantize(x) (unmapped), else Relu(x)."""
    scale = nh.from_array(np.array(0.1, np.float32), "s")
    zp = nh.from_array(np.array(0, np.uint8), "z")
    then = oh.make_graph(
        [
            oh.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="then_q"),
            oh.make_node("DequantizeLinear", ["q", "s", "z"], ["t"], name="then_dq"),
        ],
        "then",
        [],
        [vi("t")],
    )
    other = oh.make_graph([oh.make_node("Relu", ["x"], ["e"], name="else_relu")], "else", [], [vi("e")])
    g = oh.make_graph(
        [oh.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)],
        "g",
        [vi("x"), oh.make_tensor_value_info("c", TP.BOOL, [])],
        [vi("y")],
        [scale, zp],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def missing_import() -> onnx.ModelProto:
    return model(
        [
            oh.make_node("Relu", ["x"], ["t"], name="ok"),
            oh.make_node("Custom", ["t"], ["y"], name="orphan", domain="com.example"),
        ]
    )


# ---- the rule, over the table's edges --------------------------------------------------------------------------------
def _edges():
    t = cann_ops.table()
    for op, opsets in sorted(t.ops["ai.onnx"].items()):
        lo, hi = min(opsets), max(opsets)
        yield op, lo, True
        yield op, hi, True
        yield op, hi + 1, False
        if lo - 1 >= 1 and lo - 1 not in opsets:
            yield op, lo - 1, False
        gaps = [v for v in range(lo, hi) if v not in opsets]
        if gaps:
            yield op, gaps[0], False


EDGES = list(_edges())


def test_every_table_edge_maps_or_is_refused_exactly():
    """Each registered op at its lowest and highest registered opset maps; one above the highest, one below the
    lowest and the first gap are refused with 'opset not mapped' and GE's key."""
    wrong = []
    for op, opset, maps in EDGES:
        r = gert.cann_check(model([oh.make_node(op, ["x"], ["y"], name="n")], (("", opset),)))
        if r.ok != maps or (
            not maps
            and (r.unsupported[0].reason, r.unsupported[0].key) != (OPSET_NOT_MAPPED, f"ai.onnx::{opset}::{op}")
        ):
            wrong.append((op, opset, maps, r.unsupported[:1]))
    assert not wrong, wrong[:10]
    assert len(EDGES) > 500


def test_table_counts_and_provenance():
    t = cann_ops.table()
    assert len(t.standard) == 163  # 163 of ONNX's 203 standard ops, Constant included
    assert max(max(v) for op, v in t.ops["ai.onnx"].items() if op in t.standard) == 18
    assert t.date == "2026-11-30" and "hicann/ge" in t.source and "ops-nn" in t.source
    assert t.opsets("ai.onnx", "LayerNormalization") == frozenset({17, 18})
    assert t.opsets("ai.onnx", "Upsample") == frozenset({8, 9, 11, 12, 13, 14, 15, 16})


@pytest.mark.parametrize(
    "op",
    [
        "Loop",
        "Scan",
        "QuantizeLinear",
        "DequantizeLinear",
        "GroupNormalization",
        "DFT",
        "STFT",
        "Gelu",
        "Attention",
        "RNN",
        "MatMulInteger",
    ],
)
def test_ops_cann_never_maps(op):
    r = gert.cann_check(model([oh.make_node(op, ["x"], ["y"], name="n")], (("", 18),)))
    assert not r.ok and r.unsupported[0].reason == OP_NOT_MAPPED and r.unsupported[0].key == f"ai.onnx::18::{op}"


def test_opset_17_maps_and_19_maps_nothing():
    assert gert.cann_check(relu(17)).ok
    r = gert.cann_check(relu(19))
    assert not r.ok and r.opsets == {"ai.onnx": 19}
    (u,) = r.unsupported
    assert (u.node, u.op_type, u.key, u.reason) == ("act", "Relu", "ai.onnx::19::Relu", OPSET_NOT_MAPPED)
    assert any("opset 18" in s for s in r.suggestions)


def test_constant_always_maps_even_above_18():
    m = model(
        [
            oh.make_node("Constant", [], ["c"], name="k", value=nh.from_array(np.ones((2, 3), np.float32))),
            oh.make_node("Add", ["x", "c"], ["y"], name="add"),
        ],
        (("", 21),),
    )
    r = gert.cann_check(m)
    assert [u.node for u in r.unsupported] == ["add"]


def test_qdq_is_refused_with_the_amct_suggestion():
    r = gert.cann_check(qdq())
    assert [(u.node, u.key, u.reason) for u in r.unsupported] == [
        ("quant", "ai.onnx::17::QuantizeLinear", OP_NOT_MAPPED),
        ("dequant", "ai.onnx::17::DequantizeLinear", OP_NOT_MAPPED),
    ]
    assert any("AMCT" in s for s in r.suggestions)


def test_com_microsoft_domain_is_not_mapped():
    r = gert.cann_check(ms_gelu())
    (u,) = r.unsupported
    assert (u.key, u.reason) == ("com.microsoft::1::Gelu", DOMAIN_NOT_MAPPED)


def test_npu_and_custom_ai_onnx_keys_map():
    m = model(
        [
            oh.make_node("NPUGeluV2", ["x"], ["t"], name="g", domain="npu"),
            oh.make_node("AscendQuant", ["t"], ["y"], name="q"),
        ],
        (("", 20), ("npu", 1)),
    )
    r = gert.cann_check(m)
    assert r.ok, r  # AscendQuant is registered up to ai.onnx opset 22


def test_if_branch_with_an_unmapped_op_is_found():
    r = gert.cann_check(if_with_qdq())
    assert {(u.node, u.graph) for u in r.unsupported} == {
        ("then_q", "main/branch.then_branch"),
        ("then_dq", "main/branch.then_branch"),
    }


def test_missing_opset_import():
    r = gert.cann_check(missing_import())
    (u,) = r.unsupported
    assert (u.node, u.reason, u.error_code) == ("orphan", MISSING_OPSET_IMPORT, "E19999")
    assert "The opset of domain[com.example] has no responding version." in r.ge_message()


def test_report_text_html_and_dict():
    r = gert.cann_check(qdq().SerializeToString())
    text = str(r)
    assert "quant" in text and "ai.onnx::17::QuantizeLinear" in text and "op not mapped" in text
    assert "<table>" in r._repr_html_() and "dequant" in r._repr_html_()
    assert json.loads(json.dumps(r.to_dict()))["ok"] is False
    assert gert.cann_check is gert.preview.check.cann_check and gert.CannReport is cann_ops.CannReport
    assert not hasattr(cann_ops, "cann_check")  # above cann_ops and fix (gert/preview/check.py): no cycle


# ---- gert.load(cann_ops=...) -----------------------------------------------------------------------------------------
X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


def _load(m: onnx.ModelProto, **kw):
    return gert.load(m.SerializeToString(), **kw)


def _fresh(m: onnx.ModelProto) -> onnx.ModelProto:
    """The model with a unique doc string: a digest no other test has warned about in this process."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    m2.doc_string = f"fresh {np.random.default_rng().integers(1 << 62)}"
    return m2


def test_warn_is_the_default_once_per_model_and_the_host_npu_still_runs_it():
    m = _fresh(relu(19))
    with pytest.warns(
        CannCompatibilityWarning,
        match=r"E13010: No operator plugin is registered for Op: act, "
        r"optype: ai\.onnx::19::Relu\.",
    ) as rec:
        with _load(m) as loaded:
            np.testing.assert_array_equal(loaded.run({"x": X})["y"], np.maximum(X, 0))
            assert not loaded.cann_report.ok
    assert rec[0].filename == __file__  # pointed at the caller of gert.load
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _load(m).close()  # once per model per process


def test_strict_refuses_with_ge_code_and_message_per_node():
    with pytest.raises(gert.GeError) as e:
        _load(qdq(), cann_ops="strict")
    assert e.value.error_code == "E13010"
    assert "No operator plugin is registered for Op: quant, optype: ai.onnx::17::QuantizeLinear." in e.value.message
    assert "No operator plugin is registered for Op: dequant, optype: ai.onnx::17::DequantizeLinear." in e.value.message
    with pytest.raises(gert.GeError, match="then_q"):
        _load(if_with_qdq(), cann_ops="strict")
    with pytest.raises(gert.GeError, match="com.microsoft::1::Gelu"):
        _load(ms_gelu(), cann_ops="strict")
    with _load(relu(17), cann_ops="strict") as ok:  # what maps loads
        np.testing.assert_array_equal(ok.run({"x": X})["y"], np.maximum(X, 0))


def test_off_and_the_env_default(monkeypatch):
    m = _fresh(qdq())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _load(m, cann_ops="off").close()
    monkeypatch.setenv("GERT_CANN_OPS", "strict")
    with pytest.raises(gert.GeError, match="E13010"):
        _load(m)
    monkeypatch.setenv("GERT_CANN_OPS", "off")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _load(m).close()
    monkeypatch.setenv("GERT_CANN_OPS", "loud")
    with pytest.raises(gert.GertError, match="GERT_CANN_OPS: expected one of warn, strict, off, got 'loud'"):
        _load(m)
    with pytest.raises(gert.GertError, match="cann_ops: expected one of warn, strict, off, got 'maybe'"):
        _load(m, cann_ops="maybe")


def test_loop_refused_by_the_host_parser_is_not_also_warned():
    body = oh.make_graph(
        [oh.make_node("Identity", ["c_in"], ["c_out"])],
        "body",
        [oh.make_tensor_value_info("i", TP.INT64, []), oh.make_tensor_value_info("c_in", TP.BOOL, [])],
        [oh.make_tensor_value_info("c_out", TP.BOOL, [])],
    )
    g = oh.make_graph(
        [oh.make_node("Loop", ["n", "c"], [], name="lp", body=body), oh.make_node("Relu", ["x"], ["y"])],
        "g",
        [vi("x"), oh.make_tensor_value_info("n", TP.INT64, []), oh.make_tensor_value_info("c", TP.BOOL, [])],
        [vi("y")],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(gert.GeError) as e:
            gert.load(m.SerializeToString())
    assert e.value.error_code == "E13010"


def test_graph_from_onnx_refuses_what_the_host_parser_refuses():
    """Graph.from_onnx is GE's parser itself (aclgrphParseONNX): the host NPU's refuses Loop/Scan (test_cann_refusals)
    and parses the rest; the op table check runs in gert.load / gert check, not in the parser."""
    gert.Graph.from_onnx(qdq().SerializeToString())


# ---- gert check ------------------------------------------------------------------------------------------------------
def _mlp(opset: int, extra=()) -> onnx.ModelProto:
    w = nh.from_array(np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32), "w")
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        oh.make_node("Relu", ["h"], ["r"], name="relu"),
        oh.make_node("ReduceMean", ["r"], ["y"], name="mean", keepdims=1),
    ] + list(extra)
    out = "z" if extra else "y"
    g = oh.make_graph(nodes, "mlp", [vi("x", ("N", 3))], [vi(out, ("N", 1))], [w])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def test_gert_check_exit_codes_and_json(tmp_path, capsys):
    from gert.cli import main

    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(relu(17), good)
    onnx.save(qdq(), bad)
    assert main(["check", str(good)]) == 0
    assert "maps all 1 node(s)" in capsys.readouterr().out
    assert main(["check", str(bad)]) == 1
    out, err = capsys.readouterr()
    assert "QuantizeLinear" in out and "E13010" in err
    assert main(["check", str(bad), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["report"]["ok"] is False and data["report"]["unsupported"][0]["key"] == "ai.onnx::17::QuantizeLinear"
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    assert main(["check", str(tmp_path / "junk.onnx")]) == 2


def test_gert_check_fix_converts_opset_21_and_verifies_it(tmp_path, capsys):
    from gert.cli import main

    src, out = tmp_path / "m21.onnx", tmp_path / "m18.onnx"
    onnx.save(_mlp(21), src)
    assert main(["check", str(src)]) == 1
    capsys.readouterr()
    assert main(["check", str(src), "--fix", str(out)]) == 0
    text = capsys.readouterr().out
    assert "converted opset 21 -> 18" in text and "max |d| per output: y 0" in text
    fixed = onnx.load(out)
    assert {o.version for o in fixed.opset_import if o.domain in ("", "ai.onnx")} == {18}
    assert gert.cann_check(fixed).ok
    x = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    from gert.preview.inputs import ort_run

    np.testing.assert_allclose(
        ort_run(fixed.SerializeToString(), {"x": x})["y"],
        ort_run(_mlp(21).SerializeToString(), {"x": x})["y"],
        rtol=1e-6,
    )


def test_gert_check_fix_says_what_it_cannot_fix(tmp_path, capsys):
    from gert.cli import main

    src, out = tmp_path / "gelu21.onnx", tmp_path / "never.onnx"
    onnx.save(_mlp(21, [oh.make_node("Gelu", ["y"], ["z"], name="gelu")]), src)
    assert main(["check", str(src), "--fix", str(out)]) == 1
    text = capsys.readouterr().out
    assert "nothing written" in text and "Gelu" in text
    assert not out.exists()
    src18 = tmp_path / "qdq.onnx"
    onnx.save(qdq(), src18)
    assert main(["check", str(src18), "--fix", str(out)]) == 1
    assert "no conversion can help" in capsys.readouterr().out


# ---- gert_triton -----------------------------------------------------------------------------------------------------
def test_triton_parameters_cann_ops():
    from gert_triton.config import ConfigError, parse_parameters

    p = parse_parameters({"cann_ops": {"string_value": "Strict"}})
    assert p.get("cann_ops") == "strict"
    assert "cann_ops" not in parse_parameters({}).load
    with pytest.raises(ConfigError, match="parameter 'cann_ops': expected one of warn, strict, off, got 'loud'"):
        parse_parameters({"cann_ops": {"string_value": "loud"}})


def test_triton_initialize_strict_refuses_with_e13010(monkeypatch, tmp_path):
    import test_triton_unit as tu

    pb = fake_pb_utils.install(monkeypatch)
    mdir = tu.model_dir(tmp_path, qdq().SerializeToString())
    cfg = tu.autocomplete(pb, mdir, parameters=tu.params(cann_ops="strict", streams="1", warmup="false"))
    with pytest.raises(gert.GeError) as e:
        tu.TritonPythonModel().initialize(tu.init_args(mdir, cfg))
    assert e.value.error_code == "E13010" and "quant" in e.value.message


def test_graph_from_onnx_under_gert_cann_ops(monkeypatch):
    """GE's parser API honours GERT_CANN_OPS when it is set (processes gert.load does not drive); unset, it parses
    what the host NPU parses; gert.load's own cann_ops is not overridden by it."""
    m = _fresh(qdq()).SerializeToString()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gert.Graph.from_onnx(m)  # unset: the parser alone
    monkeypatch.setenv("GERT_CANN_OPS", "strict")
    with pytest.raises(gert.GeError) as e:
        gert.Graph.from_onnx(m)
    assert e.value.error_code == "E13010" and "quant" in e.value.message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gert.load(m, cann_ops="off").close()  # the explicit argument wins over the env for gert.load's parse
    monkeypatch.setenv("GERT_CANN_OPS", "warn")
    with pytest.warns(CannCompatibilityWarning, match="dequant"):
        gert.Graph.from_onnx(m)


def test_gert_check_fix_converts_what_it_can_and_flags_the_rest(tmp_path, capsys):
    """QDQ at opset 21: version_converter takes it to 18 (written, verified), and QuantizeLinear/DequantizeLinear stay
    flagged: CANN maps them at no opset."""
    from gert.cli import main

    m = qdq()
    m.opset_import[0].version = 21
    m.ir_version = 10
    src, out = tmp_path / "qdq21.onnx", tmp_path / "qdq18.onnx"
    onnx.save(m, src)
    assert main(["check", str(src), "--fix", str(out)]) == 1
    text = capsys.readouterr().out
    assert "converted opset 21 -> 18" in text and "could not fix the nodes still listed" in text
    report = gert.cann_check(out)
    assert [u.reason for u in report.unsupported] == [OP_NOT_MAPPED, OP_NOT_MAPPED]
