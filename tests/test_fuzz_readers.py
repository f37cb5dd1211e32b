"""Fuzz targets (hypothesis) for the host NPU's two readers of untrusted bytes (issue 30):

- the ONNX reader (cbindings/hostnpu/onnx_model.cpp), through gert._cann.read_onnx_io and GE's parser
  (gert.Graph.from_onnx): any byte string either parses or fails with a clear error;
- the compile cache's index reader (cbindings/hostnpu/ge_cache.cpp, `{key}.idx` JSON), through CompileGraph with
  ge.graph_compiler_cache_dir: any index text either is used or fails the compile with a GeError.

Each target runs in a child interpreter (``_helpers.run_python_result``) so that a crash fails this test, not the
suite, and is bounded: a fixed number of examples, no example database (conftest's profile), a few seconds each.
"""

from __future__ import annotations

import pytest

from _helpers import RUNTIME, run_python_result

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]

_FUZZ_PRELUDE = '''
from hypothesis import given, settings, strategies as st, HealthCheck
from onnx import helper, TensorProto

def seed_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["n", 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["n", 3])])
    c = helper.make_tensor("c", TensorProto.BOOL, [], [True])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
                          [x], [y], [c])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
    return m.SerializeToString()

SEED = seed_model()

@st.composite
def mutated(draw, seed):
    """The seed with a few edits: byte flips, cuts, insertions, varint-like runs of 0xff."""
    b = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "ff"]))
        at = draw(st.integers(0, max(0, len(b) - 1)))
        if op == "flip" and b:
            b[at] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del b[at:at + draw(st.integers(1, 64))]
        elif op == "insert":
            b[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            b[at:at] = b"\\xff" * draw(st.integers(1, 12))
    return bytes(b)

FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")), deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
'''


def test_fuzz_onnx_reader():
    out = run_python_result(
        _FUZZ_PRELUDE
        + """
d = gert.Device(0)
seen = {"parsed": 0, "refused": 0}

@FUZZ
@given(st.one_of(mutated(SEED), st.binary(max_size=256)))
def target(data):
    try:
        io = _cann.read_onnx_io(data)
        assert isinstance(io, dict)
        seen["parsed"] += 1
    except gert.GertError as e:   # the reader's own error: one sentence saying what is wrong and where
        assert str(e), "an empty error message"
        seen["refused"] += 1
    try:
        gert.Graph.from_onnx(data)
    except gert.GeError as e:
        assert e.code != 0 and str(e)

target()
emit([seen, roundtrip()])
""",
        timeout=180,
    )
    seen, works = out
    assert works and seen["parsed"] + seen["refused"] > 0 and seen["refused"] > 0


def test_fuzz_cache_index_reader(tmp_path):
    out = run_python_result(
        _FUZZ_PRELUDE
        + f"""
import json
d = gert.Device(0)
cache = {str(tmp_path)!r}
open(os.path.join(cache, "m.om"), "wb").write(b"not a model")   # a listed file that exists: its checks fail fast
graph = gert.Graph.from_onnx(helper.make_model(helper.make_graph(
    [helper.make_node("Identity", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]), opset_imports=[helper.make_opsetid("", 17)],
    ir_version=8).SerializeToString())
VALID = json.dumps({{"cache_file_list": [{{"graph_key": "k1", "cache_file_name": "m.om"}},
                                         {{"graph_key": "k2", "cache_file_name": "x\\\\u0041.om",
                                           "var_desc_file_name": ""}}],
                    "extra": [1, -2.5e3, True, None, {{"a": "\\\\n\\\\u12ab"}}]}})
json_text = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                         lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                         max_leaves=8).map(json.dumps)
escapes = st.text(alphabet="\\\\u\\"0123456789abcdefzZ{{}}[],:", max_size=24)
# JSON \\u escapes, well-formed or not (four hex digits expected): in a listed file name and in a key
unicode_escapes = st.text(alphabet="0123456789abcdefABCDEFgz-+ ", max_size=5).map(lambda h: "\\\\u" + h)
outcomes = {{}}

@FUZZ
@given(st.one_of(mutated(VALID.encode()).map(lambda b: b.decode("latin-1")), json_text, escapes,
                 escapes.map(lambda e: VALID.replace("m.om", e, 1)),
                 unicode_escapes.map(lambda e: VALID.replace("m.om", e, 1)),
                 unicode_escapes.map(lambda e: VALID.replace('"k2"', '"' + e + '"', 1))))
def target(text):
    with open(os.path.join(cache, "k1.idx"), "w", encoding="latin-1") as f:
        f.write(text)
    s = gert.Session({{"ge.graph_compiler_cache_dir": cache, "ge.graph_key": "k1"}})
    s.add_graph(1, graph)
    try:
        s.compile_graph(1)
        outcome = "compiled"
    except gert.GeError as e:
        assert str(e)
        outcome = "refused"
    outcomes[outcome] = outcomes.get(outcome, 0) + 1
    s.close()
    for n in os.listdir(cache):   # a compile that missed saved a model: start every example from the same files
        if n.startswith("k1_"):
            os.remove(os.path.join(cache, n))

target()
emit([outcomes, roundtrip()])
""",
        timeout=180,
    )
    outcomes, works = out
    assert works and outcomes.get("refused", 0) > 0
