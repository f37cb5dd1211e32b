"""The serving surface against hostile or broken configuration (issue 13, item 6): a path ``onnx_file`` names cannot
leave the model dir (also through a symlink), while the default model.onnx is read wherever it links, as Triton's own
backends read their model files (issue 31, T7); malformed config parameters and
malformed ONNX bytes fail the load with a GertError that says what is wrong, never a crash (the fuzzing runs in a
child process, so a crash would fail the test rather than end the session)."""
from __future__ import annotations

import pytest

from _helpers import REPO, RUNTIME, run_python_result
from gert_triton.config import MAX_STREAMS, ConfigError, find_onnx_file, parse_parameters
from test_triton_unit import init_args, model_dir, params, pb, seq_bytes  # noqa: F401

pytestmark = RUNTIME


def test_default_model_onnx_symlinked_from_a_shared_store_is_served(tmp_path):
    """Triton's own backends read <model dir>/<version>/<default_model_filename> wherever a symlink leads (a shared
    model store); only a path a parameter names is confined to the model dir (issue 31, T7)."""
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "relu.onnx").write_bytes(b"x")
    d = tmp_path / "m"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.onnx").symlink_to(tmp_path / "store" / "relu.onnx")
    assert find_onnx_file(str(d), "1", None) == str((tmp_path / "store" / "relu.onnx").resolve())


def test_version_dir_symlinked_out_of_the_model_dir(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "model.onnx").write_bytes(b"x")
    d = tmp_path / "m"
    d.mkdir()
    (d / "1").symlink_to(tmp_path / "elsewhere")
    assert find_onnx_file(str(d), "1", None) == str((tmp_path / "elsewhere" / "model.onnx").resolve())
    with pytest.raises(ConfigError, match="'onnx_file'.*leaves the model directory"):
        find_onnx_file(str(d), "1", "model.onnx")  # a path the parameter names stays inside


@pytest.mark.parametrize("key, entry, words", [
    ("streams", {"string_value": None}, ["'streams'", "string value"]),
    ("gears", {"string_value": 5}, ["'gears'", "string value"]),
    ("onnx_file", {"string_value": {"x": 1}}, ["'onnx_file'", "string value"]),
    ("pad_value", ["1"], ["'pad_value'", "string value"]),
    ("streams", {"string_value": "99999999999999999999"}, ["'streams'", f"[1, {MAX_STREAMS}]"]),
    ("request_timeout_ms", {"string_value": "-1"}, ["'request_timeout_ms'", "[1,"]),
    ("shape_policy", {"string_value": "W:teleport"}, ["'shape_policy'", "teleport"]),
    ("gears", {"string_value": "batch:1,,x"}, ["'gears'", "integers"]),
    ("split_batch", {"string_value": "\x00"}, ["'split_batch'"]),
])
def test_malformed_parameter_values_fail_naming_the_key(key, entry, words):
    with pytest.raises(ConfigError) as e:
        parse_parameters({key: entry})
    for w in words:
        assert w in str(e.value), str(e.value)


def test_malformed_onnx_bytes_fail_the_load_with_a_message_never_a_crash():
    r = run_python_result("""
        import random
        import gert
        from models import mlp_model, scale_model
        from triton_models import seq_model
        d = gert.Device(0)
        rng = random.Random(13)
        cases = [b"", b"\\x00", b"not an onnx model" * 8, bytes(range(256))]
        for good in (scale_model(2.0), mlp_model(1), seq_model()):
            cases += [good[:cut] for cut in range(1, len(good), max(1, len(good) // 25))]
            for _ in range(40):
                b = bytearray(good)
                for _ in range(rng.randint(1, 4)):
                    b[rng.randrange(len(b))] = rng.randrange(256)
                cases.append(bytes(b))
        kinds, empty = {}, 0
        for c in cases:
            try:
                gert.load(c).close()
                kind = "loaded"
            except gert.GertError as e:
                kind = "GertError"
                empty += not str(e).strip()
            except Exception as e:
                kind = type(e).__name__
            kinds[kind] = kinds.get(kind, 0) + 1
        emit({"kinds": kinds, "empty_messages": empty, "n": len(cases)})
    """, env={"PYTHONPATH": f"{REPO}:{REPO}/tests"}, timeout=300)
    assert set(r["kinds"]) <= {"loaded", "GertError"}, r
    assert r["kinds"].get("GertError", 0) > r["n"] // 3 and r["empty_messages"] == 0, r


def test_malformed_onnx_file_fails_the_triton_load_with_a_message(pb, tmp_path, seq_bytes):
    from gert.errors import GertError
    from gert_triton import TritonPythonModel
    mdir = model_dir(tmp_path, seq_bytes[: len(seq_bytes) // 2])  # truncated
    cfg = pb.default_config("m", max_batch_size=8, parameters=params(streams="1"))
    with pytest.raises(GertError) as e:
        TritonPythonModel().initialize(init_args(mdir, cfg))
    assert str(e.value).strip()
