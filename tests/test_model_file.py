"""A host NPU graph parsed from a model file holds no copy of the file's bytes between compiles (issue 41): every
later compile (hot sizes, gears, streams) and the provider's later readers read the file again, checked against
the bytes parsed (cbindings/hostnpu ModelBytes, gert/hostnpu/model_file.py)."""

import gc
import os

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import gert
from _helpers import RUNTIME
from gert.hostnpu.model_file import ModelFile

pytestmark = RUNTIME

EXACT = {"batch": "exact", "H": "exact", "W": "exact"}


def _conv(channels: int, seed: int = 41) -> bytes:
    """y = Conv(x, w), x [N, 8, H, W], w channels x 8 x 3 x 3 (``channels``: a model size no other test has)."""
    w = np.random.default_rng(seed).random((channels, 8, 3, 3), dtype=np.float32)
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8, "H", "W"])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    m = oh.make_model(
        oh.make_graph(
            [oh.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
            "conv",
            [x],
            [y],
            [onnx.numpy_helper.from_array(w, "w")],
        ),
        opset_imports=[oh.make_opsetid("", 17)],
    )
    m.ir_version = 8
    return m.SerializeToString()


def _ort(model, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _held() -> int:
    gc.collect()  # models of earlier tests not yet collected still hold theirs
    return gert.hostnpu.model_bytes_held()


def test_a_graph_parsed_from_a_file_holds_no_bytes_between_compiles(tmp_path):
    """Loaded by path and compiled at four sizes (a static graph each, on two streams), the host NPU holds none of
    the model's bytes after each compile and its executables keep the file, not the bytes; values stay ONNX
    Runtime's at a size compiled after the others. The same model loaded from bytes holds them, once."""
    data = _conv(67)
    path = tmp_path / "conv.onnx"
    path.write_bytes(data)
    before = _held()
    with gert.load(str(path), streams=2, shape_policy=EXACT) as m:
        for b, h in ((1, 5), (2, 5), (3, 4), (2, 7)):
            x = np.random.default_rng(b * h).random((b, 8, h, 4), dtype=np.float32)
            np.testing.assert_allclose(m.run({"x": x})["y"], _ort(data, x), rtol=1e-5, atol=1e-5)
            assert gert.hostnpu.model_bytes_held() == before
        sources = [
            w.executable.source for w in gert.hostnpu.host_executables() if len(w.executable.source) == len(data)
        ]
        assert sources and all(isinstance(s, ModelFile) for s in sources), sources
        assert sources[0].read() == data  # what a later reader gets: the bytes compiled
    with gert.load(data, shape_policy=EXACT) as m:
        m.run({"x": np.ones((1, 8, 3, 3), np.float32)})
        assert _held() == before + len(data)


def test_a_model_file_written_over_is_refused_by_a_later_compile(tmp_path):
    """A model file written over after the load (other bytes in the same file) is not compiled from: the next size's
    compile fails with an error naming the file and saying it changed, never a graph of other weights."""
    data = _conv(68)
    path = tmp_path / "conv.onnx"
    path.write_bytes(data)
    with gert.load(str(path), shape_policy=EXACT) as m:
        m.run({"x": np.ones((1, 8, 3, 3), np.float32)})
        with open(path, "r+b") as f:  # in place: the same inode, other weights
            f.write(_conv(68, seed=7))
        with pytest.raises(gert.GertError, match="conv.onnx' changed since it was parsed"):
            m.run({"x": np.ones((2, 8, 3, 3), np.float32)})


def test_a_model_file_chmodded_or_rewritten_with_its_own_bytes_still_compiles(tmp_path):
    """A model file whose stamp changed without its content (chmod, touch, the same bytes written again: its change
    time moves) is checked by its SHA-256 (cbindings/hostnpu/sha256.cpp) and still compiles, with the model's
    values; only other content is refused."""
    data = _conv(70)
    path = tmp_path / "conv.onnx"
    path.write_bytes(data)
    with gert.load(str(path), shape_policy=EXACT) as m:
        m.run({"x": np.ones((1, 8, 3, 3), np.float32)})
        for i, touch in enumerate((lambda: os.chmod(path, 0o600), lambda: path.write_bytes(data))):
            touch()
            x = np.random.default_rng(i).random((2 + i, 8, 3, 3), dtype=np.float32)  # a size not compiled yet
            np.testing.assert_allclose(m.run({"x": x})["y"], _ort(data, x), rtol=1e-5, atol=1e-5)


def test_a_model_file_replaced_by_a_rename_still_compiles_as_parsed(tmp_path):
    """A model file replaced by a new one (a rename, as a model repository is updated) leaves the loaded model as it
    was parsed: a later compile reads the file it parsed (still open), and its values are the old model's."""
    old, new = _conv(69), _conv(69, seed=8)
    path = tmp_path / "conv.onnx"
    path.write_bytes(old)
    x = np.random.default_rng(1).random((2, 8, 4, 4), dtype=np.float32)
    with gert.load(str(path), shape_policy=EXACT) as m:
        m.run({"x": np.ones((1, 8, 3, 3), np.float32)})
        (tmp_path / "next.onnx").write_bytes(new)
        os.replace(tmp_path / "next.onnx", path)
        np.testing.assert_allclose(m.run({"x": x})["y"], _ort(old, x), rtol=1e-5, atol=1e-5)


def test_a_model_file_read_again_is_checked(tmp_path):
    """ModelFile.read: the bytes compiled, or a ValueError naming the file when they changed."""
    import hashlib

    path = tmp_path / "m.onnx"
    path.write_bytes(b"abc")
    f = ModelFile(str(path), 3, hashlib.blake2b(b"abc", digest_size=16).digest())
    assert f.read() == b"abc" and len(f) == 3
    path.write_bytes(b"abd")
    with pytest.raises(ValueError, match="m.onnx' changed since its graph was compiled"):
        f.read()
