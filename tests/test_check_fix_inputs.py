"""`gert check --fix` and `gert.cann_check(fix=...)` on a model gert cannot feed by itself (issue 43): silero-vad's
front end at opset 19 (a reflect Pad on the audio, then an STFT as a strided Conv) needs far more than the 1 sample
an invented input has. With --input / --shape (inputs= / shapes=), or the model's own example shapes, the model
converted to opset 18 is written, computes what the original does (ONNX Runtime, on other audio than it was checked
on) and a stock CANN 8.x parser maps it; without them nothing is written and the error names the input and how to
give it. Inputs that do not fit the model are refused naming the input, the expected and the actual value."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper as oh, numpy_helper as nh

import gert
from gert.preview.inputs import EXAMPLE_SHAPES_KEY, FeedError, ort_run
from gert.tools.cli import main

HOP, WINDOW, PAD = 128, 256, 64  # the STFT's hop and window, the reflect padding on the right (silero's front end)


def silero_front(opset: int = 19, example: dict = None) -> onnx.ModelProto:
    """input [batch, samples] float32 -> reflect Pad -> Conv (an STFT basis, stride HOP) -> |.|^2 summed -> sqrt
    (``mag``); beside it ``state`` [2, batch, 16] scaled by ``sr`` (int64 scalar), as silero's recurrent state."""
    rng = np.random.default_rng(0)
    inits = [
        nh.from_array(rng.standard_normal((16, 1, WINDOW)).astype(np.float32), "stft_basis"),
        nh.from_array(np.array([0, 0, 0, 0, 0, PAD], np.int64), "pads"),
        nh.from_array(np.array([1], np.int64), "axis1"),
    ]
    nodes = [
        oh.make_node("Unsqueeze", ["input", "axis1"], ["x3"], name="unsqueeze"),
        oh.make_node("Pad", ["x3", "pads"], ["padded"], mode="reflect", name="reflect_pad"),
        oh.make_node("Conv", ["padded", "stft_basis"], ["spec"], strides=[HOP], name="stft"),
        oh.make_node("Mul", ["spec", "spec"], ["power"], name="power"),
        oh.make_node("ReduceSum", ["power", "axis1"], ["energy"], keepdims=1, name="energy"),
        oh.make_node("Sqrt", ["energy"], ["mag"], name="mag"),
        oh.make_node("Cast", ["sr"], ["sr_f"], to=TensorProto.FLOAT, name="sr_cast"),
        oh.make_node("Mul", ["state", "sr_f"], ["state_out"], name="state_scale"),
    ]
    graph = oh.make_graph(
        nodes,
        "silero_front",
        [
            oh.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", "samples"]),
            oh.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", 16]),
            oh.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [
            oh.make_tensor_value_info("mag", TensorProto.FLOAT, ["batch", 1, "frames"]),
            oh.make_tensor_value_info("state_out", TensorProto.FLOAT, [2, "batch", 16]),
        ],
        inits,
    )
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 9
    if example:
        oh.set_model_props(m, {EXAMPLE_SHAPES_KEY: json.dumps(example)})
    onnx.checker.check_model(m)
    return m


def _audio(batch: int, samples: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "input": rng.standard_normal((batch, samples)).astype(np.float32),
        "state": rng.standard_normal((2, batch, 16)).astype(np.float32),
        "sr": np.array(16000, np.int64),
    }


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "silero19.onnx"
    onnx.save(silero_front(), path)
    return path


def _assert_fixed_computes_the_original(out) -> None:
    """The written model: opset 18, mapped by a stock CANN 8.x parser, the original's outputs on audio it was not
    checked on (two batch sizes, lengths other than the one given)."""
    fixed = onnx.load(out)
    assert {o.version for o in fixed.opset_import if o.domain in ("", "ai.onnx")} == {18}
    assert gert.cann_check(fixed).ok
    assert not gert.cann_check(silero_front()).ok  # (the original: every node refused at opset 19)
    for batch, samples, seed in ((1, 512, 1), (3, 1536, 2)):
        feeds = _audio(batch, samples, seed)
        want = ort_run(silero_front().SerializeToString(), feeds)
        got = ort_run(fixed.SerializeToString(), feeds)
        assert want["mag"].shape == (batch, 1, (samples + PAD - WINDOW) // HOP + 1)
        for name in ("mag", "state_out"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


# ---- gert check --------------------------------------------------------------------------------------------------
def test_without_inputs_nothing_is_written_and_the_error_names_the_input_and_the_options(src, tmp_path, capsys):
    out = tmp_path / "never.onnx"
    assert main(["check", str(src), "--fix", str(out)]) == 1
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.startswith("fix:"))
    assert line.startswith("fix: nothing written: ONNX Runtime could not run the original model")
    assert "at node 'reflect_pad' (Pad)" in line and "input 'input' (float32 [batch, samples]" in line
    assert "--input input=FILE.npy" in line and "--shape input=<batch>x<samples>" in line
    assert "'state'" not in line and "'sr'" not in line  # they do not reach the failing node
    assert not out.exists()
    assert main(["check", str(src), "--fix", str(out), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["fix"]["written"] is None and data["fix"]["needs"] == ["input"]


def test_with_a_shape_the_fixed_model_is_written_and_computes_the_same(src, tmp_path, capsys):
    out = tmp_path / "silero18.onnx"
    assert main(["check", str(src), "--fix", str(out), "--shape", "input=1x512"]) == 0
    text = capsys.readouterr().out
    assert "converted opset 19 -> 18" in text and "input: random (1, 512) from --shape" in text
    assert f"wrote {out}" in text and "maps all 8 node(s)" in text
    _assert_fixed_computes_the_original(out)


def test_with_an_input_file_the_fixed_model_is_written_and_computes_the_same(src, tmp_path, capsys):
    out, npy = tmp_path / "silero18.onnx", tmp_path / "audio.npy"
    np.save(npy, _audio(2, 1024, 3)["input"])
    assert main(["check", str(src), "--fix", str(out), "--input", f"input={npy}", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fix"]["written"] == str(out) and data["fix"]["report"]["ok"] is True
    assert data["fix"]["inputs"] == ["input", "state", "sr"] and data["fix"]["invented"] == ["state", "sr"]
    assert set(data["fix"]["max_abs_diff"]) == {"mag", "state_out"}
    _assert_fixed_computes_the_original(out)


def test_the_models_own_example_shapes_are_used(tmp_path, capsys):
    src, out = tmp_path / "example19.onnx", tmp_path / "example18.onnx"
    onnx.save(silero_front(example={"input": [1, 512]}), src)
    assert main(["check", str(src), "--fix", str(out)]) == 0
    assert "input: random (1, 512) (the model's example shape)" in capsys.readouterr().out
    _assert_fixed_computes_the_original(out)


def test_a_shape_given_that_the_model_refuses_is_named_as_given(src, tmp_path, capsys):
    out = tmp_path / "never.onnx"
    assert main(["check", str(src), "--fix", str(out), "--shape", f"input=1x{PAD // 2}"]) == 1
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("fix:"))
    assert f"on the input(s) given (input random (1, {PAD // 2})): at node 'reflect_pad'" in line
    assert not out.exists()


def branchy_front(opset: int = 19) -> onnx.ModelProto:
    """silero's full model keeps its front end in an If on ``sr`` (8 kHz or 16 kHz): the branches read ``input``
    from the main graph by name, not as the If node's inputs."""

    def branch(name: str, pad: int) -> onnx.GraphProto:
        return oh.make_graph(
            [
                oh.make_node("Unsqueeze", ["input", "axis1"], [f"{name}_x3"]),
                oh.make_node(
                    "Constant", [], [f"{name}_pads"], value=nh.from_array(np.array([0, 0, 0, 0, 0, pad], np.int64))
                ),
                oh.make_node("Pad", [f"{name}_x3", f"{name}_pads"], [f"{name}_out"], mode="reflect"),
            ],
            name,
            [],
            [oh.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, ["batch", 1, "padded"])],
        )

    graph = oh.make_graph(
        [
            oh.make_node("Equal", ["sr", "sr16k"], ["is16k"], name="is16k"),
            oh.make_node(
                "If",
                ["is16k"],
                ["padded"],
                then_branch=branch("then", PAD),
                else_branch=branch("else", PAD // 2),
                name="by_rate",
            ),
            oh.make_node("Relu", ["padded"], ["y"], name="relu"),
        ],
        "branchy",
        [
            oh.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", "samples"]),
            oh.make_tensor_value_info("sr", TensorProto.INT64, []),
            oh.make_tensor_value_info("unused", TensorProto.FLOAT, [4]),
        ],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, "padded"])],
        [nh.from_array(np.array([1], np.int64), "axis1"), nh.from_array(np.array(16000, np.int64), "sr16k")],
    )
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def test_a_failure_inside_an_if_branch_names_the_inputs_the_branch_reads(tmp_path, capsys):
    src, out = tmp_path / "branchy19.onnx", tmp_path / "branchy18.onnx"
    onnx.save(branchy_front(), src)
    assert main(["check", str(src), "--fix", str(out)]) == 1
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("fix:"))
    assert "at node 'by_rate' (If): " in line and "Pad reflect" in line
    assert "input 'input'" in line and "--shape input=<batch>x<samples>" in line  # read by the branch, by name
    assert "'unused'" not in line
    assert main(["check", str(src), "--fix", str(out), "--shape", "input=1x512"]) == 0
    fixed = onnx.load(out)
    for sr in (16000, 8000):
        feeds = {"input": _audio(2, 512, sr)["input"], "sr": np.array(sr, np.int64), "unused": np.zeros(4, np.float32)}
        np.testing.assert_array_equal(
            ort_run(fixed.SerializeToString(), feeds)["y"], ort_run(branchy_front().SerializeToString(), feeds)["y"]
        )


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["--shape", "nope=1x512"],
            "unknown input 'nope' given a shape; the model's inputs are ['input', 'state', 'sr']",
        ),
        (["--input", "nope={npy}"], "unknown input 'nope' given an array"),
        (["--shape", "input=512"], "input 'input': the shape given has rank 1 (shape (512,)); the model takes rank 2"),
        (["--shape", "state=3x1x16"], "input 'state': the shape given has 3 at axis 0; the model fixes it to 2"),
        (["--input", "input={npy64}"], "input 'input': the model takes float32, the array given is float64"),
        (
            ["--input", "input={npy}", "--shape", "input=1x512"],
            "input 'input' is given both as an array and as a shape",
        ),
        (["--shape", "input=1xq"], "--shape: dims of 'input' must be integers separated by 'x', got '1xq'"),
        (["--input", "input=/nonexistent/audio.npy"], "--input input: cannot read '/nonexistent/audio.npy'"),
        (["--input", "input"], "--input: 'input' is not NAME=file.npy"),
    ],
)
def test_inputs_that_do_not_fit_exit_2_with_one_line(src, tmp_path, capsys, args, needle):
    npy, npy64, out = tmp_path / "a.npy", tmp_path / "a64.npy", tmp_path / "never.onnx"
    np.save(npy, np.zeros((1, 512), np.float32))
    np.save(npy64, np.zeros((1, 512), np.float64))
    args = [a.format(npy=npy, npy64=npy64) for a in args]
    assert main(["check", str(src), "--fix", str(out), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before any report
    assert captured.err.count("\n") == 1 and captured.err.startswith("gert check: ") and needle in captured.err
    assert not out.exists()


def test_input_options_need_fix(src, capsys):
    assert main(["check", str(src), "--shape", "input=1x512"]) == 2
    assert "--input and --shape feed the comparison of --fix OUT.onnx" in capsys.readouterr().err


# ---- gert.cann_check(fix=...) ------------------------------------------------------------------------------------
def test_cann_check_fix_takes_inputs_and_shapes(src, tmp_path):
    out = tmp_path / "py18.onnx"
    report = gert.cann_check(src, fix=out, inputs={"input": _audio(1, 768, 4)["input"]})
    assert not report.ok and report.fix.written and report.fix.path == str(out)  # the report of the model given
    assert report.fix.report.ok and report.fix.target == 18
    assert any(n.startswith("fix: converted opset 19 -> 18") and str(out) in n for n in report.notes)
    _assert_fixed_computes_the_original(out)
    out.unlink()
    report = gert.cann_check(str(src), fix=str(out), shapes={"input": (2, 512)})
    assert report.fix.written and [i.name for i in report.fix.invented] == ["input", "state", "sr"]
    _assert_fixed_computes_the_original(out)


def test_cann_check_fix_without_inputs_names_the_input_and_how_to_give_it(src, tmp_path):
    out = tmp_path / "never.onnx"
    report = gert.cann_check(src, fix=out)
    assert not report.fix.written and not out.exists()
    assert [i.name for i in report.fix.needs] == ["input"] and report.fix.needs[0].shape == (1, 1)
    assert "inputs={'input': <float32 array [batch, samples]>}" in report.fix.error
    assert "shapes={'input': (<batch>, <samples>)}" in report.fix.error
    assert "note: fix: nothing written" in str(report)


def test_cann_check_refuses_inputs_that_do_not_fit(src, tmp_path):
    out = tmp_path / "never.onnx"
    with pytest.raises(FeedError) as e:
        gert.cann_check(src, fix=out, inputs={"input": np.zeros((1, 512), np.float64)})
    assert (e.value.input, e.value.expected, e.value.actual) == ("input", "float32", "float64")
    with pytest.raises(FeedError) as e:
        gert.cann_check(src, fix=out, shapes={"state": (3, 1, 16)})
    assert (e.value.input, e.value.expected, e.value.actual) == ("state", (2, "batch", 16), (3, 1, 16))
    with pytest.raises(FeedError, match="unknown input 'audio'"):
        gert.cann_check(src, fix=out, shapes={"audio": (1, 512)})
    with pytest.raises(gert.GertError, match="pass fix="):
        gert.cann_check(src, shapes={"input": (1, 512)})
    assert not out.exists()
    assert gert.cann_check(src, fix=out, shapes={"input": (1, 512)}).fix.written  # the same call, fitting inputs
