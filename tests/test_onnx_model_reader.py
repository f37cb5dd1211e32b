"""The host NPU's ONNX model reader (cbindings/hostnpu/onnx_model.cpp): a protobuf wire-format reader without
libprotobuf, checked against what the onnx package reads from the same bytes.

The reader is compiled with its JSON driver (cbindings/hostnpu/tools/onnx_model_dump.cpp) under AddressSanitizer
and UndefinedBehaviorSanitizer, once per session; every run must leave the sanitizers silent. Models come from
onnx.helper, from the PP-OCR models shipped in the rapidocr-onnxruntime wheel (when installed), and from
truncation and seeded random mutation of a small model. None of this needs the gert extension.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess

import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTNPU = os.path.join(REPO, "cbindings", "hostnpu")
SOURCES = [os.path.join(HOSTNPU, "tools", "onnx_model_dump.cpp"), os.path.join(HOSTNPU, "onnx_model.cpp")]
PP_OCR_MODELS = ["ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx", "ch_ppocr_mobile_v2.0_cls_infer.onnx"]
SANITIZER_MARKS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "LeakSanitizer", "runtime error:")
SAN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=86",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87",
}

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
pytestmark = needs_gxx


# ---- the driver ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def dump(tmp_path_factory):
    """Builds onnx_model_dump with ASan + UBSan; returns a runner: run(list of byte strings) -> list of results,
    each the parsed JSON object of one model (a dict with "error" when it did not parse)."""
    out_dir = tmp_path_factory.mktemp("onnx_dump")
    exe = str(out_dir / "onnx_model_dump")
    cmd = [
        "g++",
        "-std=c++17",
        "-O1",
        "-g",
        "-fno-omit-frame-pointer",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
        "-Wall",
        "-Wextra",
        "-I",
        HOSTNPU,
        *SOURCES,
        "-o",
        exe,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"compiling the driver failed:\n{r.stderr}"
    assert "warning" not in r.stderr, r.stderr
    counter = iter(range(10**9))

    def run(blobs, expect_rc=None):
        paths = []
        for blob in blobs:
            p = out_dir / f"m{next(counter)}.onnx"
            p.write_bytes(blob)
            paths.append(str(p))
        res = subprocess.run([exe, *paths], capture_output=True, env={**os.environ, **SAN_ENV}, timeout=120)
        stderr = res.stderr.decode("utf-8", "replace")
        assert not any(m in stderr for m in SANITIZER_MARKS), f"sanitizer report:\n{stderr[-6000:]}"
        assert res.returncode in (0, 1), f"driver exit code {res.returncode}:\n{stderr[-6000:]}"
        lines = res.stdout.decode("utf-8").splitlines()
        assert len(lines) == len(blobs), (len(lines), len(blobs), stderr[-2000:])
        out = [json.loads(line) for line in lines]
        assert res.returncode == (1 if any("error" in o for o in out) else 0)
        for p in paths:
            os.unlink(p)
        return out

    return run


def parse(dump, blob):
    return dump([blob])[0]


# ---- what the onnx package reads ------------------------------------------------------------------------------
def _s(v):
    """A string field as the driver writes it: upb hands back bytes for invalid UTF-8; the driver writes those
    bytes as surrogate escapes."""
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v


def _type_name(t):
    try:
        return TensorProto.DataType.Name(t)
    except ValueError:
        return "unknown"


def _value_info(vi):
    out = {"name": _s(vi.name), "elem_type": 0, "elem_type_name": "UNDEFINED", "has_shape": False, "dims": []}
    if vi.type.WhichOneof("value") == "tensor_type":
        tt = vi.type.tensor_type
        out["elem_type"] = tt.elem_type
        out["elem_type_name"] = _type_name(tt.elem_type)
        out["has_shape"] = tt.HasField("shape")
        for d in tt.shape.dim:
            kind = d.WhichOneof("value")
            if kind == "dim_value" and d.dim_value >= 0:
                out["dims"].append(d.dim_value)
            else:
                out["dims"].append(_s(d.dim_param) if kind == "dim_param" else "")
    return out


def expected(blob):
    """What the driver must print for blob, from onnx's own protobuf parser; None if that parser rejects it."""
    if not blob:
        return {"error": "not an ONNX model: the data is empty"}
    try:
        m = onnx.ModelProto.FromString(blob)
    except Exception:  # noqa: BLE001 - google.protobuf.message.DecodeError and friends
        return None
    if not m.HasField("graph"):
        return {"error": "not an ONNX model: no graph (field 7) found"}
    g = m.graph
    inits = [_s(t.name) for t in g.initializer] + [_s(s.values.name) for s in g.sparse_initializer]
    init_set = set(inits)
    return {
        "ir_version": m.ir_version,
        "opsets": [[_s(o.domain), o.version] for o in m.opset_import],
        "graph_name": _s(g.name),
        "inputs": [_value_info(vi) for vi in g.input if _s(vi.name) not in init_set],
        "outputs": [_value_info(vi) for vi in g.output],
        "node_count": len(g.node),
        "initializer_names": inits,
    }


def assert_same(dump, blob):
    got, want = parse(dump, blob), expected(blob)
    assert want is not None and "error" not in want
    assert got == want
    return got


# ---- models -----------------------------------------------------------------------------------------------------
def _model(inputs, outputs, nodes=(), initializers=(), sparse=(), name="g", opsets=(("", 17),), ir_version=8):
    graph = helper.make_graph(
        list(nodes), name, list(inputs), list(outputs), initializer=list(initializers), sparse_initializer=list(sparse)
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    if ir_version is not None:
        m.ir_version = ir_version
    return m


def rich_model():
    """Several inputs and outputs: named and unnamed dynamic dims, a 0-d tensor, a tensor without a shape,
    sequence / optional / map / sparse outputs, dense and sparse initializers, a custom opset domain."""
    seq = helper.make_tensor_sequence_value_info("tokens", TensorProto.INT32, ["n"])
    opt = helper.make_value_info(
        "maybe", helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    )
    mapped = helper.make_value_info(
        "table", helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.INT64, []))
    )
    sparse_out = helper.make_value_info("sp", helper.make_sparse_tensor_type_proto(TensorProto.FLOAT, [4, 4]))
    w = helper.make_tensor("W", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    sp = helper.make_sparse_tensor(
        helper.make_tensor("S", TensorProto.FLOAT, [2], [5.0, 6.0]),
        helper.make_tensor("S_idx", TensorProto.INT64, [2], [0, 3]),
        [4],
    )
    nodes = [
        helper.make_node("Identity", ["x"], ["y"], name="id0"),
        helper.make_node("Relu", ["y"], ["z"]),
        helper.make_node("Custom", ["z"], ["tokens"], domain="com.example.custom"),
    ]
    return _model(
        inputs=[
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 224, 224]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, [None, "seq", None]),
            helper.make_tensor_value_info("scale", TensorProto.DOUBLE, []),
            helper.make_tensor_value_info("noshape", TensorProto.FLOAT16, None),
            helper.make_tensor_value_info("名前", TensorProto.INT8, ["长度"]),
        ],
        outputs=[helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 1000]), seq, opt, mapped, sparse_out],
        nodes=nodes,
        initializers=[w],
        sparse=[sp],
        name="rich graph / 图",
        opsets=(("", 17), ("com.example.custom", 2), ("ai.onnx.ml", 3)),
    )


@pytest.fixture(scope="module")
def rich_bytes():
    return rich_model().SerializeToString()


def test_extension_flags_compile_cleanly():
    """setup.py compiles every cbindings/hostnpu/*.cpp into the extension with -std=c++17 -O2."""
    r = subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fvisibility=hidden",
            "-fsyntax-only",
            os.path.join(HOSTNPU, "onnx_model.cpp"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_rich_model(dump, rich_bytes):
    got = assert_same(dump, rich_bytes)
    assert got["ir_version"] == 8
    assert got["opsets"] == [["", 17], ["com.example.custom", 2], ["ai.onnx.ml", 3]]
    assert got["graph_name"] == "rich graph / 图"
    assert got["node_count"] == 3
    assert got["initializer_names"] == ["W", "S"]
    ins = {v["name"]: v for v in got["inputs"]}
    assert ins["x"]["dims"] == ["batch", 3, 224, 224] and ins["x"]["elem_type_name"] == "FLOAT"
    assert ins["mask"]["dims"] == ["", "seq", ""] and ins["mask"]["elem_type_name"] == "BOOL"
    assert ins["scale"]["has_shape"] is True and ins["scale"]["dims"] == []  # 0-d tensor
    assert ins["noshape"]["has_shape"] is False and ins["noshape"]["elem_type"] == TensorProto.FLOAT16
    assert ins["名前"]["dims"] == ["长度"]
    outs = {v["name"]: v for v in got["outputs"]}
    for non_tensor in ("tokens", "maybe", "table", "sp"):
        assert outs[non_tensor]["elem_type"] == 0 and outs[non_tensor]["has_shape"] is False
        assert outs[non_tensor]["dims"] == []


def test_every_elem_type(dump):
    types = sorted(TensorProto.DataType.values())
    model = _model(
        inputs=[helper.make_tensor_value_info(f"in_{TensorProto.DataType.Name(t)}", t, [2, "n"]) for t in types],
        outputs=[helper.make_tensor_value_info(f"out_{t}", t, [1]) for t in types],
    )
    got = assert_same(dump, model.SerializeToString())
    for t, vi in zip(types, got["inputs"]):
        assert vi["elem_type"] == t
        assert vi["elem_type_name"] == TensorProto.DataType.Name(t), (
            f"elem_type_name({t}) must name the installed onnx's {TensorProto.DataType.Name(t)}: "
            "extend the table in onnx_model.cpp"
        )


def test_initializers_listed_as_inputs_ir3(dump):
    """IR < 4 lists every initializer among the graph inputs; the reader keeps only the real inputs."""
    w = helper.make_tensor("W", TensorProto.FLOAT, [4, 3], [0.5] * 12)
    b = helper.make_tensor("B", TensorProto.FLOAT, [4], [0.0] * 4)
    model = _model(
        inputs=[
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3]),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, [4]),
        ],
        outputs=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
        nodes=[helper.make_node("Gemm", ["X", "W", "B"], ["Y"], transB=1)],
        initializers=[w, b],
        opsets=(("", 8),),
        ir_version=3,
    )
    got = assert_same(dump, model.SerializeToString())
    assert [v["name"] for v in got["inputs"]] == ["X"]
    assert got["initializer_names"] == ["W", "B"]
    assert got["ir_version"] == 3 and got["opsets"] == [["", 8]]


def test_default_ir_version_and_negative_dim(dump):
    """onnx.helper's default IR version (14 with onnx 1.23); a negative dim_value reads as an unnamed symbolic
    dim (PaddlePaddle exports write -1 for the batch)."""
    model = _model(
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        ir_version=None,
    )
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = -7
    got = assert_same(dump, model.SerializeToString())
    assert got["ir_version"] == onnx.IR_VERSION
    assert got["inputs"][0]["dims"] == ["", 3] and got["outputs"][0]["dims"] == [1, ""]


def test_merged_messages_follow_protobuf(dump, rich_bytes):
    """Concatenated serializations merge (protobuf's rule): repeated fields append, the last scalar wins, a
    later oneof member replaces an earlier one."""
    other = _model(
        inputs=[helper.make_tensor_value_info("extra", TensorProto.UINT8, [7])],
        outputs=[helper.make_tensor_value_info("o", TensorProto.INT64, None)],
        nodes=[helper.make_node("Identity", ["extra"], ["o"])],
        name="second",
        opsets=(("", 13),),
        ir_version=9,
    ).SerializeToString()
    got = assert_same(dump, rich_bytes + other)
    assert got["graph_name"] == "second" and got["ir_version"] == 9 and got["node_count"] == 4
    # a Dimension whose dim_param is followed by a dim_value (and vice versa); an elem_type set twice
    dim_param_then_value = bytes([0x12, 1]) + b"N" + bytes([0x08, 5])
    dim_value_then_param = bytes([0x08, 5, 0x12, 1]) + b"M"
    shape = b"".join(bytes([0x0A, len(d)]) + d for d in (dim_param_then_value, dim_value_then_param))
    tensor_type = bytes([0x08, 1, 0x12, len(shape)]) + shape + bytes([0x08, 7])
    type_proto = bytes([0x0A, len(tensor_type)]) + tensor_type
    vi = bytes([0x0A, 1]) + b"v" + bytes([0x12, len(type_proto)]) + type_proto
    graph = bytes([0x5A, len(vi)]) + vi
    got = assert_same(dump, bytes([0x08, 8, 0x3A, len(graph)]) + graph)
    assert got["inputs"] == [
        {"name": "v", "elem_type": 7, "elem_type_name": "INT64", "has_shape": True, "dims": [5, "M"]}
    ]


# ---- real models --------------------------------------------------------------------------------------------------
def _pp_ocr_dir():
    import importlib.util

    spec = importlib.util.find_spec("rapidocr_onnxruntime")  # locate the wheel without importing it
    if spec is None or not spec.origin:
        return None
    d = os.path.join(os.path.dirname(spec.origin), "models")
    return d if os.path.isdir(d) else None


@pytest.mark.parametrize("name", PP_OCR_MODELS)
def test_pp_ocr_models(dump, name):
    d = _pp_ocr_dir()
    if d is None or not os.path.isfile(os.path.join(d, name)):
        pytest.skip("PP-OCR models need `pip install --no-deps rapidocr-onnxruntime==1.4.4`")
    with open(os.path.join(d, name), "rb") as f:
        blob = f.read()
    got = assert_same(dump, blob)
    # What the comparison above pins down, spelled out: PaddlePaddle exports keep their weights in Constant
    # nodes (no initializers), take one NCHW float input "x" with 3 channels, and mark dynamic dims either by
    # name ("p2o.DynamicDimension.0", "?") or by dim_value -1.
    assert got["initializer_names"] == []
    assert got["node_count"] > 500
    assert [v["name"] for v in got["inputs"]] == ["x"]
    x = got["inputs"][0]
    assert x["elem_type_name"] == "FLOAT" and len(x["dims"]) == 4 and x["dims"][1] == 3
    assert got["opsets"][0][0] == "" and got["opsets"][0][1] in (11, 12)


# ---- malformed input --------------------------------------------------------------------------------------------
def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


@pytest.mark.parametrize(
    "blob,message",
    [
        (b"", "not an ONNX model: the data is empty"),
        (b"hello, this is a text file, not a model\n", "not an ONNX model (or a corrupt one): unsupported wire type 4"),
        (bytes([0x0F]), "invalid wire type 7 for field 1 (ir_version) at offset 0"),
        (bytes([0x08, 1, 0x0E]), "invalid wire type 6 for field 1 (ir_version) at offset 2"),
        (bytes([0x0B, 0x0C]), "unsupported wire type 3 (start group) for field 1 (ir_version) at offset 0"),
        (bytes([0x00, 0x00]), "invalid field number 0 at offset 0"),
        (
            bytes([0x08]) + b"\xff" * 10 + b"\x01",
            "the value of field 1 (ir_version) at offset 1 is a varint longer than 10 bytes",
        ),
        (
            bytes([0x08, 0x80, 0x80]),
            "truncated ONNX model: the value of field 1 (ir_version) at offset 1 runs past the end of the data",
        ),
        (bytes([0x08, 8, 0x3A]), "truncated ONNX model: the length of field 7 (graph) at offset 3 runs past"),
        (bytes([0x08, 8, 0x80]), "truncated ONNX model: a field tag at offset 2 runs past the end of the data"),
        (
            bytes([0x3A, 0x05, 0x12, 0x01]),
            "truncated ONNX model: field 7 (graph) needs 5 bytes at offset 2 but only 2 remain",
        ),
        (
            bytes([0x3A]) + _varint(2**64 - 1),
            "field 7 (graph) needs 18446744073709551615 bytes at offset 11 but only 0 remain",
        ),
        (bytes([0x3A]) + _varint(2**63 + 5) + b"abc", "field 7 (graph) needs 9223372036854775813 bytes"),
        (bytes([0x09]) + b"\x00" * 7, "field 1 (ir_version) (fixed64) needs 8 bytes at offset 1 but only 7 remain"),
        (
            bytes([0x3A, 0x00, 0x15, 0x01, 0x02]),
            "field 2 (producer_name) (fixed32) needs 4 bytes at offset 3 but only 2 remain",
        ),
        (
            bytes([0x3A, 0x05, 0x5A, 0x05, 0x0A, 0x01, 0x78]),
            "corrupt ONNX model: field 11 (input) needs 5 bytes at offset 4 but only 3 remain in graph",
        ),
        (
            bytes([0x3A, 0x0A, 0x62, 0x08, 0x12, 0x06, 0x0A, 0x04, 0x12, 0x02, 0x0A, 0x05]),
            "corrupt ONNX model: field 1 (dim) needs 5 bytes at offset 12 but only 0 remain in "
            "graph.output[0].type.tensor_type.shape",
        ),
        (bytes([0x08, 8, 0x12, 0x03]) + b"abc", "not an ONNX model: no graph (field 7) found"),
        (bytes([0x3A, 0x01, 0x7F]), "invalid wire type 7 for field 15 (sparse_initializer) at offset 2 in graph"),
    ],
)
def test_malformed(dump, blob, message):
    got = parse(dump, blob)
    assert "error" in got and message in got["error"], got


def test_protobufs_that_are_not_models(dump):
    import numpy as np
    from onnx import numpy_helper

    tensor = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), name="t").SerializeToString()
    graph = rich_model().graph.SerializeToString()
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3]).SerializeToString()
    for blob in (tensor, graph, node):
        got = parse(dump, blob)
        assert "error" in got, got
        assert got["error"].startswith("not an ONNX model"), got


def test_random_bytes(dump):
    rng = random.Random(1234)
    blobs = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))) for _ in range(200)]
    for blob, got in zip(blobs, dump(blobs)):
        if "error" in got:
            assert got["error"].startswith(("not an ONNX model", "truncated ONNX model", "corrupt ONNX model"))
            assert "\n" not in got["error"], got
        else:  # vanishingly rare, but then it is a model onnx reads the same way
            assert got == expected(blob)


def test_every_truncation(dump, rich_bytes):
    """Each prefix of a model parses exactly when onnx's parser accepts it, and then reads the same."""
    prefixes = [rich_bytes[:n] for n in range(len(rich_bytes) + 1)]
    results = dump(prefixes)
    ok = 0
    for n, (blob, got) in enumerate(zip(prefixes, results)):
        want = expected(blob)
        if want is None:
            assert "error" in got and got["error"].startswith("truncated ONNX model"), (n, got)
        else:
            assert got == want, n
            ok += "error" not in got
    assert ok >= 1 and "error" not in results[-1]


def _mutate(rng, blob):
    b = bytearray(blob)
    for _ in range(rng.choice((1, 1, 2, 3))):
        op = rng.randrange(7)
        i = rng.randrange(len(b) + 1) if b else 0
        if op == 0 and b:  # flip bits
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:  # an interesting byte
            i = rng.randrange(len(b))
            b[i] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF, 0x0A, 0x12, 0x3A, 0x5A, 0x62, 0x0B, 0x0C, 0x0F))
        elif op == 2:  # insert random bytes
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
        elif op == 3 and b:  # delete a span
            del b[i : i + rng.randrange(1, 16)]
        elif op == 4 and b:  # duplicate a span
            j = rng.randrange(len(b))
            b[i:i] = b[j : j + rng.randrange(1, 32)]
        elif op == 5:  # insert a huge or overlong varint
            b[i:i] = rng.choice((_varint(2**64 - 1), _varint(2**63), b"\xff" * 11, b"\x80" * 10 + b"\x01"))
        elif op == 6:  # truncate
            del b[i:]
    return bytes(b)


def test_fuzz_mutations(dump, rich_bytes):
    """Seeded random mutations: no sanitizer report ever; where onnx's parser accepts the bytes and this reader
    does too, both read the same; this reader only refuses what onnx accepts when it holds protobuf groups."""
    rng = random.Random(20240601)
    small = _model(
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        nodes=[helper.make_node("Relu", ["x"], ["y"])],
    ).SerializeToString()
    blobs = [_mutate(rng, rng.choice((rich_bytes, small))) for _ in range(1500)]
    results = dump(blobs)
    agree = 0
    for blob, got in zip(blobs, results):
        want = expected(blob)
        if want is None:
            continue  # onnx rejects it; this reader may accept it (it does not look inside nodes or tensors)
        if "error" in got and "error" not in want:
            assert "group" in got["error"], (blob, got)
            continue
        assert got == want, blob
        agree += 1
    assert agree > 50
