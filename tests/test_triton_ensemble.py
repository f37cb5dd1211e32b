"""Issue 26 without a server: `gert repo init --pre/--post` (gert_triton/ensemble.py) and the step model
(gert_triton/steps.py) with the fake pb_utils. tests/test_triton_ensemble_e2e.py serves what they write."""

from __future__ import annotations

import json
import os
import textwrap

import numpy as np
import pytest

import fake_pb_utils
from _helpers import RUNTIME
from gert.errors import GertError
from gert_triton.repo import init_repo
from gert_triton.steps import TritonPythonModel as StepModel, run_rows, step
from triton_models import fixed_model, seq_model

pytestmark = RUNTIME

STEPS_PY = textwrap.dedent("""
    import numpy as np
    from gert_triton.steps import step

    @step(inputs={"raw": (np.int32, [-1])}, outputs={"n": (np.int64, [1])})
    def pre(inputs):
        raw = inputs["raw"]
        s = raw.shape[0]
        return {"a": np.repeat(raw.astype(np.float32)[:, None], 4, axis=1), "m": np.ones(s, np.int64),
                "n": np.array([s], np.int64)}

    @step(outputs={"total": (np.float32, [1])})
    def post(inputs):
        return {"total": np.array([inputs["y"].sum() + inputs["n"][0]], np.float32)}

    def undeclared(inputs):
        return inputs
""")


@pytest.fixture
def steps_file(tmp_path):
    p = tmp_path / "my_steps.py"
    p.write_text(STEPS_PY)
    return str(p)


@pytest.fixture
def seq_onnx(tmp_path):
    p = tmp_path / "seq.onnx"
    p.write_bytes(seq_model())
    return str(p)


def test_repo_init_writes_the_step_models_and_the_ensemble(tmp_path, steps_file, seq_onnx):
    repo = tmp_path / "repo"
    init_repo(seq_onnx, str(repo), name="seq", pre=f"{steps_file}:pre", post=f"{steps_file}:post")
    assert sorted(os.listdir(repo)) == ["seq", "seq_ensemble", "seq_post", "seq_pre"]
    pre = (repo / "seq_pre" / "config.pbtxt").read_text()
    # the client's input, the model's inputs and the extra tensor the post step gets
    assert 'name: "raw"' in pre and 'name: "a"' in pre and 'name: "m"' in pre and 'name: "n"' in pre
    assert 'string_value: "my_steps:pre"' in pre and 'string_value: "pre"' in pre
    post = (repo / "seq_post" / "config.pbtxt").read_text()
    assert 'name: "y"' in post and 'name: "c"' in post and 'name: "n"' in post and 'name: "total"' in post
    ens = (repo / "seq_ensemble" / "config.pbtxt").read_text()
    assert 'platform: "ensemble"' in ens and "max_batch_size: 8" in ens
    order = [ens.index(f'model_name: "{m}"') for m in ("seq_pre", "seq", "seq_post")]
    assert order == sorted(order)
    assert 'input_map { key: "n" value: "n" }' in ens
    for entry in ("seq_pre", "seq_post"):  # the file is copied beside the one-line model.py (the stub imports it)
        assert (repo / entry / "1" / "my_steps.py").read_text() == STEPS_PY
        assert (repo / entry / "1" / "model.py").read_text().startswith("from gert_triton.steps import")
    assert os.path.isdir(repo / "seq_ensemble" / "1")


def test_repo_init_cli_pre_only(tmp_path, steps_file, seq_onnx, capsys):
    from gert.cli import main

    assert main(["repo", "init", seq_onnx, str(tmp_path / "r"), "--pre", f"{steps_file}:pre"]) == 0
    assert "seq_ensemble" in capsys.readouterr().out
    ens = (tmp_path / "r" / "seq_ensemble" / "config.pbtxt").read_text()
    assert 'name: "y"' in ens and 'name: "c"' in ens  # no post step: the ensemble answers with the model's outputs
    assert not (tmp_path / "r" / "seq_post").exists()


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"pre": "{f}:undeclared"}, ["declares no inputs", "step(inputs="]),
        ({"post": "{f}:undeclared"}, ["declares no outputs"]),
        ({"pre": "{f}:missing"}, ["has no function 'missing'"]),
        ({"pre": "no_such_module_xyz:f"}, ["no_such_module_xyz"]),
        ({"pre": "nocolon"}, ["not 'module:function'"]),
    ],
)
def test_repo_init_refuses_a_bad_step_before_writing(tmp_path, steps_file, seq_onnx, kwargs, words):
    repo = tmp_path / "repo"
    with pytest.raises(GertError) as e:
        init_repo(seq_onnx, str(repo), name="seq", **{k: v.format(f=steps_file) for k, v in kwargs.items()})
    for w in words:
        assert w in str(e.value)
    assert not repo.exists() or not os.listdir(repo)


def test_repo_init_refuses_an_existing_step_entry(tmp_path, steps_file, seq_onnx):
    repo = tmp_path / "repo"
    (repo / "seq_ensemble").mkdir(parents=True)
    with pytest.raises(GertError, match="seq_ensemble"):
        init_repo(seq_onnx, str(repo), name="seq", pre=f"{steps_file}:pre")
    assert not (repo / "seq").exists()


def test_a_model_without_batching_gets_steps_without_it(tmp_path, steps_file):
    p = tmp_path / "fixed.onnx"
    p.write_bytes(fixed_model())
    init_repo(str(p), str(tmp_path / "r"), name="fixed", post=f"{steps_file}:post")
    for entry in ("fixed_post", "fixed_ensemble"):
        assert "max_batch_size: 0" in (tmp_path / "r" / entry / "config.pbtxt").read_text()


# ---- the step model ------------------------------------------------------------------------------------------------


@step(inputs={"v": (np.float32, [-1])}, outputs={"s": (np.float32, [1])})
def total(inputs):
    if inputs["v"].shape[0] == 0:
        raise ValueError("input 'v': expected at least one value, got 0")
    return {"s": np.array([inputs["v"].sum()], np.float32)}


def wrong_dtype(inputs):
    return {"s": np.array([1.0], np.float64)}


def step_model(pb, fn: str, role: str = "pre", mbs: int = 4):
    config = {
        "name": "st",
        "max_batch_size": mbs,
        "input": [{"name": "v", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "s", "data_type": "TYPE_FP32", "dims": [1]}],
        "parameters": {"function": {"string_value": fn}, "role": {"string_value": role}},
    }
    m = StepModel()
    m.initialize({"model_config": json.dumps(config)})
    return m


def test_step_model_runs_each_row_and_fails_a_bad_request_alone(monkeypatch):
    pb = fake_pb_utils.install(monkeypatch)
    m = step_model(pb, f"{__name__}:total")
    good = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    bad = np.zeros((1, 0), np.float32)
    r_good, r_bad = m.execute(
        [pb.InferenceRequest([pb.Tensor("v", good)], ["s"]), pb.InferenceRequest([pb.Tensor("v", bad)], ["s"])]
    )
    assert not r_good.has_error()
    np.testing.assert_array_equal(r_good.output_tensors()[0].as_numpy(), [[6], [15]])
    assert r_bad.error().code() == pb.TritonError.INVALID_ARG and "input 'v'" in r_bad.error().message()


def test_a_post_steps_failure_is_internal_and_a_wrong_dtype_is_named(monkeypatch):
    pb = fake_pb_utils.install(monkeypatch)
    m = step_model(pb, f"{__name__}:total", role="post")
    r = m.execute([pb.InferenceRequest([pb.Tensor("v", np.zeros((1, 0), np.float32))], ["s"])])[0]
    assert r.error().code() == pb.TritonError.INTERNAL
    m = step_model(pb, f"{__name__}:wrong_dtype")
    r = m.execute([pb.InferenceRequest([pb.Tensor("v", np.ones((1, 2), np.float32))], ["s"])])[0]
    assert "'s' is float64" in r.error().message() and "TYPE_FP32" in r.error().message()


def test_run_rows_refuses_rows_of_different_shapes():
    def echo(inputs):
        return {"out": inputs["x"][: int(inputs["x"][0])]}

    with pytest.raises(GertError, match="different shape for each row"):
        run_rows(echo, {"x": np.array([[1, 0], [2, 0]], np.float32)}, batching=True)
    assert run_rows(echo, {"x": np.array([[1, 0], [1, 0]], np.float32)}, batching=True)["out"].shape == (2, 1)


def test_link_model_points_the_default_file_at_the_installed_wheel(tmp_path):
    """examples/ocr_pipeline.link_model: the repository holds a symlink, made (or corrected, atomically) at load."""
    pytest.importorskip("rapidocr_onnxruntime")
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import ocr_pipeline as op

    (tmp_path / "det" / "1").mkdir(parents=True)
    os.symlink(str(tmp_path / "stale.onnx"), tmp_path / "det" / "1" / "model.onnx")
    link = op.link_model(str(tmp_path / "det"), "det")
    assert os.readlink(link) == op.model_path("det") and os.path.isfile(link)
    assert sorted(os.listdir(tmp_path / "det" / "1")) == ["model.onnx"]  # no temporary link left
