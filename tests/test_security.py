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


@pytest.mark.parametrize(
    "key, entry, words",
    [
        ("streams", {"string_value": None}, ["'streams'", "string value"]),
        ("gears", {"string_value": 5}, ["'gears'", "string value"]),
        ("onnx_file", {"string_value": {"x": 1}}, ["'onnx_file'", "string value"]),
        ("pad_value", ["1"], ["'pad_value'", "string value"]),
        ("streams", {"string_value": "99999999999999999999"}, ["'streams'", f"[1, {MAX_STREAMS}]"]),
        ("request_timeout_ms", {"string_value": "-1"}, ["'request_timeout_ms'", "> 0"]),
        ("shape_policy", {"string_value": "W:teleport"}, ["'shape_policy'", "teleport"]),
        ("gears", {"string_value": "batch:1,,x"}, ["'gears'", "integers"]),
        ("split_batch", {"string_value": "\x00"}, ["'split_batch'"]),
    ],
)
def test_malformed_parameter_values_fail_naming_the_key(key, entry, words):
    with pytest.raises(ConfigError) as e:
        parse_parameters({key: entry})
    for w in words:
        assert w in str(e.value), str(e.value)


def test_malformed_onnx_bytes_fail_the_load_with_a_message_never_a_crash():
    r = run_python_result(
        """
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
    """,
        env={"PYTHONPATH": f"{REPO}:{REPO}/tests"},
        timeout=300,
    )
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


# ---- raw copies: the host side of a copy, against the pinned memory the host NPU registered (issue 37) ---------------

INVALID_PARAM = 100000  # ACL_ERROR_INVALID_PARAM, CANN's parameter error


@pytest.mark.parametrize(
    "case",
    ["d2h_overrun", "h2d_overrun", "h2d_freed", "d2h_freed", "host_into_device", "host_into_pinned", "h2h_overrun"],
)
@pytest.mark.parametrize("use_stream", [False, True])
def test_raw_copy_host_range_is_checked_against_pinned_allocations(case, use_stream, streams):
    """A host range past the end of a HostBuffer, in a freed one, or running into a registered allocation from
    outside is refused with ACL_ERROR_INVALID_PARAM naming the allocation; nothing is copied, and the same buffers
    copy correctly afterwards. Before: heap overflow (segfault / abort) or a silent use after free."""
    import numpy as np

    import gert
    from gert import _cann

    n = 1 << 20
    d = gert.DeviceBuffer(n)
    d.memset(0x41)
    hb, spare = gert.HostBuffer(64), gert.HostBuffer(64)
    st = streams[0]
    h2d, d2h, h2h = _cann.MEMCPY_HOST_TO_DEVICE, _cann.MEMCPY_DEVICE_TO_HOST, _cann.MEMCPY_HOST_TO_HOST
    freed = gert.HostBuffer(64)
    freed_ptr = freed.ptr
    freed.free()
    other = gert.DeviceBuffer(64)
    calls = {
        "d2h_overrun": ((hb.ptr, n, d.ptr, n, d2h), "runs 1048512 bytes past the end of the 64-byte aclrtMallocHost"),
        "h2d_overrun": ((d.ptr, n, hb.ptr, n, h2d), "runs 1048512 bytes past the end of the 64-byte aclrtMallocHost"),
        "h2d_freed": ((d.ptr, 64, freed_ptr, 64, h2d), "which aclrtFreeHost freed"),
        "d2h_freed": ((freed_ptr + 8, 8, d.ptr, 8, d2h), "which aclrtFreeHost freed"),
        "host_into_device": ((other.ptr - 32, 4096, d.ptr, 4096, d2h), "runs into the device allocation"),
        "host_into_pinned": ((d.ptr, 128, spare.ptr - 64, 128, h2d), "runs into the aclrtMallocHost allocation"),
        "h2h_overrun": ((spare.ptr, 128, hb.ptr, 128, h2h), "past the end of the 64-byte aclrtMallocHost"),
    }
    args, said = calls[case]
    if use_stream and case == "h2h_overrun":
        pytest.skip("aclrtMemcpyAsync refuses host-to-host copies anyway")
    with pytest.raises(gert.AclError) as info:
        if use_stream:
            _cann.memcpy_async(*args, st.handle)
        else:
            _cann.memcpy(*args)
    assert info.value.code == INVALID_PARAM and said in str(info.value), str(info.value)
    _cann.memcpy(hb.ptr, 64, d.ptr, 64, d2h)  # the same buffers, in range: copied
    assert bytes(hb) == b"\x41" * 64
    page = np.full(4096, 7, np.uint8)  # pageable memory stays the caller's to get right, as on CANN: copied
    _cann.memcpy(d.ptr, n, page.ctypes.data, 4096, h2d)
    _cann.memcpy(page.ctypes.data, 4096, d.ptr + 4000, 96, d2h)
    assert page[:96].tolist() == [7] * 96


# ---- constant folding bounds what it produces (issue 37) ------------------------------------------------------------


def _range_model(length: int):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Range", ["s", "l", "d"], ["r"]),
        helper.make_node("Shape", ["r"], ["n"]),
        helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "nf"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in (("s", 0), ("l", length), ("d", 1))]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("length", [8, 50_000_000])
def test_constant_folding_bounds_its_output(length):
    """A Range of scalar constants folds while its output is small; a 400 MB one is sized by inference instead of
    being computed (before: the fold allocated it, ~1 GB of peak memory for a 207-byte model). Shapes are the same."""
    import tracemalloc

    from gert.core import shape_infer

    model = _range_model(length)
    tracemalloc.start()
    try:
        inferred = shape_infer.infer(model, {"x": (1, 1)})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert inferred.output_shapes == [(1, 1)] and inferred.all_known
    assert peak < 32 << 20, f"shape inference allocated {peak >> 20} MB"
