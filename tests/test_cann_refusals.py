"""What CANN 8.5's ONNX parser refuses by design is refused at parse (Graph.from_onnx) and at gert.load, with GE's
code (ge::FAILED, the E-code leading the message) and a message that names what is wrong:

- a root graph with no inputs, or no outputs: E16001 (OnnxModelParser::ParseInput / ParseOutput);
- ONNX Loop and Scan, in the main graph or inside an If branch: E13010, no operator plugin (the 8.5 parser has no
  Loop/Scan plugin and If is its only subgraph adapter);
- string tensors (graph I/O, initializers, constants, a Cast to STRING): NPU kernels do not compute strings;
- graph inputs or outputs that are not tensors (sequence, optional, map): the parser reads tensor types only.
The same models without the refused part parse.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gert
from _helpers import RUNTIME
from models import IR_VERSION, OPSET, vi

pytestmark = RUNTIME
GE_FAILED = 0xFFFFFFFF


def build(nodes, inputs, outputs, inits=(), opset=OPSET) -> bytes:
    g = helper.make_graph(nodes, "refused", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = IR_VERSION
    return m.SerializeToString()


def loop_body():
    """A Loop body: (iter, cond, acc) -> (cond, acc + 1)."""
    return helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
        ],
        "body",
        [vi("i", np.int64, []), vi("cond_in", np.bool_, []), vi("acc_in", np.float32, [2])],
        [vi("cond_out", np.bool_, []), vi("acc_out", np.float32, [2])],
        initializer=[numpy_helper.from_array(np.ones(2, np.float32), "one")],
    )


def scan_body():
    return helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "scan_body",
        [vi("s_in", np.float32, [2]), vi("x_t", np.float32, [2])],
        [vi("s_out", np.float32, [2]), vi("y_t", np.float32, [2])],
    )


def loop_model() -> bytes:
    node = helper.make_node("Loop", ["trips", "", "x"], ["y"], body=loop_body(), name="the_loop")
    return build(
        [node],
        [vi("x", np.float32, [2])],
        [vi("y", np.float32, [2])],
        [numpy_helper.from_array(np.array(3, np.int64), "trips")],
    )


def scan_model() -> bytes:
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=scan_body(), num_scan_inputs=1, name="the_scan")
    return build(
        [node],
        [vi("s0", np.float32, [2]), vi("xs", np.float32, [4, 2])],
        [vi("s", np.float32, [2]), vi("ys", np.float32, [4, 2])],
    )


def loop_in_if_model() -> bytes:
    """The Loop sits inside an If branch: the parser's pre-check still finds it."""
    inner = helper.make_node("Loop", ["trips", "", "x"], ["t"], body=loop_body(), name="nested_loop")
    then_g = helper.make_graph([inner], "then", [], [vi("t", np.float32, [2])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", np.float32, [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    return build(
        [node],
        [vi("x", np.float32, [2]), vi("c", np.bool_, [])],
        [vi("y", np.float32, [2])],
        [numpy_helper.from_array(np.array(2, np.int64), "trips")],
    )


def no_input_model() -> bytes:
    node = helper.make_node("Constant", [], ["y"], value=numpy_helper.from_array(np.ones(3, np.float32)))
    return build([node], [], [vi("y", np.float32, [3])])


def no_output_model() -> bytes:
    return build([helper.make_node("Relu", ["x"], ["y"])], [vi("x", np.float32, [3])], [])


def string_io_model() -> bytes:
    return build(
        [helper.make_node("Identity", ["s"], ["t"])],
        [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [2])],
    )


def cast_to_string_model() -> bytes:
    return build(
        [
            helper.make_node("Cast", ["x"], ["s"], to=TensorProto.STRING, name="to_str"),
            helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT),
        ],
        [vi("x", np.float32, [2])],
        [vi("y", np.float32, [2])],
    )


def string_initializer_model() -> bytes:
    vocab = helper.make_tensor("vocab", TensorProto.STRING, [2], [b"a", b"b"])
    return build(
        [helper.make_node("Identity", ["x"], ["y"])], [vi("x", np.float32, [2])], [vi("y", np.float32, [2])], [vocab]
    )


def sequence_input_model() -> bytes:
    seq = helper.make_value_info(
        "xs", helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    )
    return build(
        [helper.make_node("SequenceAt", ["xs", "i0"], ["y"])],
        [seq],
        [vi("y", np.float32, [2])],
        [numpy_helper.from_array(np.array(0, np.int64), "i0")],
    )


REFUSED = {
    "no_input": (no_input_model, "E16001", ["has no input"]),
    "no_output": (no_output_model, "E16001", ["has no output"]),
    "loop": (loop_model, "E13010", ["the_loop", f"ai.onnx::{OPSET}::Loop"]),
    "scan": (scan_model, "E13010", ["the_scan", f"ai.onnx::{OPSET}::Scan"]),
    "loop_in_if": (loop_in_if_model, "E13010", ["nested_loop", "Loop"]),
    "string_io": (string_io_model, "DT_STRING", ["graph input 's'"]),
    "cast_to_string": (cast_to_string_model, "DT_STRING", ["Cast to STRING", "to_str"]),
    "string_initializer": (string_initializer_model, "DT_STRING", ["initializer 'vocab'"]),
    "sequence_input": (sequence_input_model, "not a tensor", ["graph input 'xs' is a sequence"]),
}


def check(e: gert.GeError, code: str, fragments) -> None:
    assert e.code == GE_FAILED, e
    assert code in e.message, e.message
    if code.startswith("E"):
        assert e.error_code == code
    for f in fragments:
        assert f in e.message, e.message


@pytest.mark.parametrize("case", list(REFUSED))
def test_parser_refuses_like_cann(case, tmp_path):
    make, code, fragments = REFUSED[case]
    model = make()
    with pytest.raises(gert.GeError) as ei:
        gert.Graph.from_onnx(model)
    check(ei.value, code, fragments)
    assert ei.value.message.startswith("aclgrphParseONNXFromMem: ")
    path = tmp_path / f"{case}.onnx"
    path.write_bytes(model)
    with pytest.raises(gert.GeError) as ei:
        gert.Graph.from_onnx(str(path))
    check(ei.value, code, fragments)
    with pytest.raises(gert.GeError) as ei:  # gert.load refuses with the same code, before anything is compiled
        gert.load(model)
    check(ei.value, code, fragments)


def test_if_is_parsed_and_runs(device):
    """If is the parser's subgraph adapter: an If without Loop/Scan inside parses and runs (its branch decided per
    run)."""
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", np.float32, [2])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", np.float32, [2])])
    model = build(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [vi("x", np.float32, [2]), vi("c", np.bool_, [])],
        [vi("y", np.float32, [2])],
    )
    onnx.checker.check_model(onnx.load_from_string(model))
    x = np.array([1.5, -2], np.float32)
    with gert.load(model) as m:
        np.testing.assert_array_equal(m.run({"x": x, "c": np.array(True)})["y"], -x)
        np.testing.assert_array_equal(m.run({"x": x, "c": np.array(False)})["y"], x)
