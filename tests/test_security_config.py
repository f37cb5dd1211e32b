"""Issue 37, item 3: what `gert repo init` writes and what path parameters may name.

- Every string of a config gert writes goes through one writer (gert_triton/pbtxt.py) that escapes it as protobuf's
  text format requires and reads the text back with Triton's own schema before a file is written: an ONNX tensor
  name, a model name or a parameter value cannot inject fields (the repro: an output name carrying a ``trace_file``
  parameter). A name Triton cannot take (a NUL) is refused, naming it.
- ``trace_file`` and ``cache_dir`` follow ``onnx_file``'s rule: inside the model dir ('..' and symlinks resolved),
  or inside the directory GERT_TRACE_DIR / GERT_CACHE_DIR names in the server's environment.
- A --pre / --post step file is copied under its own module name, never over the step model's model.py; a name the
  stub could not import as that file is refused before anything is written.
"""

from __future__ import annotations

import json
import os

import pytest
from google.protobuf import text_format
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper

from gert.errors import GertError
from gert_triton.config import ConfigError, GertParams, cache_path, model_path, trace_file_path
from gert_triton.pbtxt import write_config
from gert_triton.repo import init_repo

model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")

F = TensorProto.FLOAT
INJECTED = (
    'y"\n    data_type: TYPE_FP32\n    dims: [ 4 ]\n  }\n]\nparameters {\n  key: "trace_file"\n'
    '  value: { string_value: "/tmp/victim" }\n}\noutput [\n  {\n    name: "y'
)
NAMES = [
    INJECTED,
    'q"uote',
    "new\nline",
    "back\\slash",
    "trailing\\",
    "br{ace}s [ ]",
    "tab\there\r",
    "ünïcødé ✓ 名前",
    "\u202eright-to-left",
    'x" } ] parameters { key: "cache_dir" value: { string_value: "/" } }',
    "'single'",
    "\x01\x7f",
]


def parse(path) -> model_config_pb2.ModelConfig:
    with open(path, encoding="utf-8") as f:
        return text_format.Parse(f.read(), model_config_pb2.ModelConfig())


def relu_pair(path, out_name: str, in_name: str = "x") -> str:
    """x -> Relu -> y, and y -> Identity -> ``out_name``: a model whose second output has a crafted name."""
    g = helper.make_graph(
        [helper.make_node("Relu", [in_name], ["y"]), helper.make_node("Identity", ["y"], [out_name])],
        "h",
        [helper.make_tensor_value_info(in_name, F, ["n", 4])],
        [helper.make_tensor_value_info("y", F, ["n", 4]), helper.make_tensor_value_info(out_name, F, ["n", 4])],
    )
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return str(path)


# ---- one writer: escaped, parsed back -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_crafted_tensor_names_stay_names(tmp_path, name):
    src = relu_pair(tmp_path / "m.onnx", name, in_name="in" + name)
    target = init_repo(src, str(tmp_path / "repo"), name="m", max_batch_size=8, parameters={"streams": "1"})
    cfg = parse(os.path.join(target, "config.pbtxt"))
    assert [o.name for o in cfg.output] == ["y", name]
    assert [i.name for i in cfg.input] == ["in" + name]
    assert set(cfg.parameters) == {"streams"}  # nothing injected
    assert cfg.name == "m" and cfg.max_batch_size == 8 and list(cfg.output[1].dims) == [4]


def test_the_repro_injection_through_the_command(tmp_path, capsys):
    """The security repro's model through `gert repo init`: no trace_file parameter appears."""
    from gert.cli import main

    src = relu_pair(tmp_path / "downloaded.onnx", INJECTED)
    assert main(["repo", "init", src, str(tmp_path / "repo"), "--max-batch-size", "8"]) == 0
    cfg = parse(tmp_path / "repo" / "downloaded" / "config.pbtxt")
    assert not cfg.parameters and [o.name for o in cfg.output] == ["y", INJECTED]


@pytest.mark.parametrize("value", NAMES, ids=range(len(NAMES)))
def test_crafted_parameter_values_and_model_names_stay_strings(tmp_path, value):
    src = relu_pair(tmp_path / "m.onnx", "z")
    name = "m" + value.replace("/", "_")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        with pytest.raises(GertError, match="control character"):
            init_repo(src, str(tmp_path / "repo"), name=name, parameters={"keep_fp32": value})
        assert not (tmp_path / "repo").exists()
        return
    target = init_repo(src, str(tmp_path / "repo"), name=name, parameters={"keep_fp32": value})
    cfg = parse(os.path.join(target, "config.pbtxt"))
    assert cfg.name == name
    assert {k: v.string_value for k, v in cfg.parameters.items()} == {"keep_fp32": value}


def test_a_nul_in_a_tensor_name_is_refused_naming_it_and_nothing_is_written(tmp_path):
    src = relu_pair(tmp_path / "m.onnx", "a\x00b")
    with pytest.raises(GertError) as info:
        init_repo(src, str(tmp_path / "repo"), name="m")
    msg = str(info.value)
    assert "output[1].name" in msg and "'a\\x00b'" in msg and "U+0000" in msg, msg
    assert not (tmp_path / "repo").exists()


def test_the_writer_checks_against_tritons_schema():
    with pytest.raises(GertError, match="not a Triton model config.*trace_fle"):
        write_config({"name": "m", "trace_fle": "x"})
    with pytest.raises(GertError, match="not a Triton model config"):
        write_config({"name": "m", "input": [{"name": "x", "data_type": "TYPE_NOPE", "dims": [1]}]})


text_strings = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(a=text_strings, b=text_strings)
def test_any_string_reads_back_as_itself(a, b):
    """Property: whatever the strings, the written text parses (protobuf's parser, Triton's schema) to exactly the
    config meant: one input named a, one parameter b -> a, and nothing else."""
    config = {
        "name": a,
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": a, "data_type": "TYPE_FP32", "dims": [-1], "reshape": {"shape": []}}],
        "output": [{"name": b, "data_type": "TYPE_FP32", "dims": [2]}],
        "ensemble_scheduling": {
            "step": [{"model_name": b, "model_version": -1, "input_map": {a: b}, "output_map": {b: a}}]
        },
        "parameters": {b: {"string_value": a}},
    }
    cfg = text_format.Parse(write_config(config), model_config_pb2.ModelConfig())
    assert cfg.name == a and [i.name for i in cfg.input] == [a] and [o.name for o in cfg.output] == [b]
    assert {k: v.string_value for k, v in cfg.parameters.items()} == {b: a}
    assert dict(cfg.ensemble_scheduling.step[0].input_map) == {a: b}
    assert cfg.input[0].HasField("reshape") and list(cfg.input[0].reshape.shape) == []


# ---- trace_file and cache_dir: inside the model dir, or the server's root ---------------------------------------


@pytest.fixture
def mdir(tmp_path, monkeypatch):
    monkeypatch.delenv("GERT_TRACE_DIR", raising=False)
    monkeypatch.delenv("GERT_CACHE_DIR", raising=False)
    d = tmp_path / "repo" / "m"
    (d / "1").mkdir(parents=True)
    return d


@pytest.mark.parametrize("key, env", [("trace_file", "GERT_TRACE_DIR"), ("cache_dir", "GERT_CACHE_DIR")])
def test_a_path_parameter_stays_inside_the_model_dir(mdir, tmp_path, key, env):
    real = os.path.realpath(mdir)
    assert model_path(key, "t.json", str(mdir)) == os.path.join(real, "t.json")
    assert model_path(key, "a/../b/t", str(mdir)) == os.path.join(real, "b", "t")
    for bad, words in (
        ("../t.json", ["climbs out", "'..'"]),
        ("1/../../../t", ["climbs out"]),
        (str(tmp_path / "victim"), ["absolute path", f"{env} is not set"]),
        ("/etc/passwd", ["absolute path"]),
    ):
        with pytest.raises(ConfigError) as info:
            model_path(key, bad, str(mdir))
        msg = str(info.value)
        assert f"parameter '{key}'" in msg and repr(bad) in msg and env in msg, msg
        assert all(w in msg for w in words), msg
    (tmp_path / "outside").mkdir()
    (mdir / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(ConfigError, match=f"parameter '{key}'.*'link/t'.*through a symlink.*{env}"):
        model_path(key, "link/t", str(mdir))


@pytest.mark.parametrize("key, env", [("trace_file", "GERT_TRACE_DIR"), ("cache_dir", "GERT_CACHE_DIR")])
def test_an_absolute_path_only_inside_the_servers_root(mdir, tmp_path, monkeypatch, key, env):
    root = tmp_path / "allowed"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.setenv(env, str(root))
    assert model_path(key, str(root / "sub" / "t"), str(mdir)) == os.path.realpath(root / "sub" / "t")
    for bad in (str(tmp_path / "elsewhere" / "t"), str(root / ".." / "elsewhere" / "t")):
        with pytest.raises(ConfigError, match=f"parameter '{key}'.*absolute path.*{env}="):
            model_path(key, bad, str(mdir))
    (root / "sub" / "out").symlink_to(tmp_path / "elsewhere")  # a link inside the root that leads out of it
    with pytest.raises(ConfigError, match=f"parameter '{key}'"):
        model_path(key, str(root / "sub" / "out" / "t"), str(mdir))
    (mdir / "shared").symlink_to(root)  # a link from the model dir into the root: allowed
    assert model_path(key, "shared/t", str(mdir)) == os.path.realpath(root / "t")


def test_the_adapter_uses_the_rule(mdir, tmp_path):
    p = GertParams(cache_dir="gcache", trace_file="t.json")
    assert cache_path(p, str(mdir)) == os.path.join(os.path.realpath(mdir), "gcache")
    assert trace_file_path(p, str(mdir)) == os.path.join(os.path.realpath(mdir), "t.json")
    assert cache_path(GertParams(), str(mdir)) is None and trace_file_path(GertParams(), str(mdir)) is None
    with pytest.raises(ConfigError, match="'cache_dir'"):
        cache_path(GertParams(cache_dir=str(tmp_path)), str(mdir))


def test_an_injected_absolute_trace_file_fails_the_load_before_it_compiles(mdir, tmp_path, monkeypatch):
    """The model (fake pb_utils) refuses parameter trace_file '/abs' without GERT_TRACE_DIR: no trace is written."""
    import fake_pb_utils
    from gert_triton import TritonPythonModel
    from models import mlp_model

    pb = fake_pb_utils.install(monkeypatch)
    (mdir / "1" / "model.onnx").write_bytes(mlp_model(4))
    pb.set_model_dir(str(mdir))
    victim = tmp_path / "victim"
    raw = {"streams": {"string_value": "1"}, "trace_file": {"string_value": str(victim)}}
    cfg = TritonPythonModel.auto_complete_config(
        pb.ModelConfig(pb.default_config("m", max_batch_size=8, parameters=raw))
    ).as_dict()
    with pytest.raises(ConfigError, match="parameter 'trace_file'.*absolute path.*GERT_TRACE_DIR"):
        TritonPythonModel().initialize(
            {
                "model_config": json.dumps(cfg),
                "model_instance_kind": "CPU",
                "model_instance_name": "m_0_0",
                "model_instance_device_id": "0",
                "model_repository": str(mdir),
                "model_version": "1",
                "model_name": "m",
            }
        )
    assert not victim.exists()


# ---- --pre / --post step files ----------------------------------------------------------------------------------

STEP_PY = (
    "import numpy as np\nfrom gert_triton.steps import step\n\n"
    "@step(inputs={'raw': (np.float32, [4])})\ndef pre(inputs):\n    return {'x': inputs['raw']}\n"
)


@pytest.mark.parametrize(
    "file, words",
    [
        ("model.py", ["'model' is the step model's own module", "model_steps.py"]),
        ("json.py", ["'json'", "imports first"]),
        ("numpy.py", ["'numpy'", "imports first"]),
        ("my-steps.py", ["not a Python identifier"]),
    ],
)
def test_a_step_file_the_stub_could_not_import_is_refused_before_writing(tmp_path, file, words):
    (tmp_path / "steps").mkdir()
    step_file = tmp_path / "steps" / file
    step_file.write_text(STEP_PY)
    src = relu_pair(tmp_path / "scale.onnx", "z", in_name="x")
    with pytest.raises(GertError) as info:
        init_repo(src, str(tmp_path / "repo"), name="scale", pre=f"{step_file}:pre")
    msg = str(info.value)
    assert str(step_file) in msg and all(w in msg for w in words), msg
    assert not (tmp_path / "repo").exists()


def test_a_step_file_is_copied_under_its_own_name_beside_model_py(tmp_path):
    step_file = tmp_path / "scale_steps.py"
    step_file.write_text(STEP_PY)
    src = relu_pair(tmp_path / "scale.onnx", "z", in_name="x")
    init_repo(src, str(tmp_path / "repo"), name="scale", pre=f"{step_file}:pre")
    version = tmp_path / "repo" / "scale_pre" / "1"
    assert sorted(os.listdir(version)) == ["model.py", "scale_steps.py"]
    assert "TritonPythonModel" in (version / "model.py").read_text()
    assert (version / "scale_steps.py").read_text() == STEP_PY
    cfg = parse(tmp_path / "repo" / "scale_pre" / "config.pbtxt")
    assert cfg.parameters["function"].string_value == "scale_steps:pre"
