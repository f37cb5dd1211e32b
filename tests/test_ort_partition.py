"""Edge partitioning (issue 38, deliver 1): a model GE's parser refuses runs its core on gert and the refused nodes at
its edges on ONNX Runtime's CPU provider, as ONNX Runtime's CANN execution provider partitions it; a split that is
not sound runs the whole model on the CPU. Checked against ONNX Runtime running the whole model."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto as TP, helper as oh, numpy_helper as nh

import gert
from gert import ort_partition

CPU = "CPUExecutionProvider"
PROVIDERS = ["CANNExecutionProvider", CPU]


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "edges", inputs, outputs, list(inits))
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])


def string_prefix() -> onnx.ModelProto:
    """A string input parsed on the CPU (Cast string -> float), then a numeric core."""
    return _model(
        [
            oh.make_node("Cast", ["s"], ["x"], to=TP.FLOAT, name="parse"),
            oh.make_node("Mul", ["x", "w"], ["m"], name="scale"),
            oh.make_node("Relu", ["m"], ["y"], name="relu"),
        ],
        [oh.make_tensor_value_info("s", TP.STRING, ["n", 4])],
        [oh.make_tensor_value_info("y", TP.FLOAT, ["n", 4])],
        [nh.from_array(np.array([1.0, -2.0, 3.0, 0.5], np.float32), "w")],
    )


def string_suffix() -> onnx.ModelProto:
    """A numeric core whose class index is turned into text on the CPU (Cast int64 -> string)."""
    return _model(
        [
            oh.make_node("MatMul", ["x", "w"], ["logits"], name="head"),
            oh.make_node("ArgMax", ["logits"], ["idx"], axis=1, keepdims=0, name="argmax"),
            oh.make_node("Cast", ["idx"], ["label"], to=TP.STRING, name="to_text"),
        ],
        [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 3])],
        [oh.make_tensor_value_info("label", TP.STRING, ["n"]), oh.make_tensor_value_info("logits", TP.FLOAT, ["n", 5])],
        [nh.from_array(np.arange(15, dtype=np.float32).reshape(3, 5) % 7 - 3, "w")],
    )


def both_edges() -> onnx.ModelProto:
    """String in, string out, a numeric core between; the input also passes through as an output."""
    return _model(
        [
            oh.make_node("Cast", ["s"], ["x"], to=TP.FLOAT, name="parse"),
            oh.make_node("Add", ["x", "x"], ["d"], name="double"),
            oh.make_node("Cast", ["d"], ["t"], to=TP.STRING, name="format"),
        ],
        [oh.make_tensor_value_info("s", TP.STRING, ["n", 2])],
        [oh.make_tensor_value_info("t", TP.STRING, ["n", 2]), oh.make_tensor_value_info("d", TP.FLOAT, ["n", 2])],
    )


def no_core() -> onnx.ModelProto:
    """Refused nodes on both sides of every numeric node: no sound core; the whole model runs on the CPU."""
    return _model(
        [
            oh.make_node("Cast", ["s"], ["x"], to=TP.FLOAT, name="r1"),
            oh.make_node("Neg", ["x"], ["m"], name="m1"),
            oh.make_node("Cast", ["m"], ["t"], to=TP.STRING, name="r2"),
            oh.make_node("Cast", ["t"], ["u"], to=TP.FLOAT, name="r3"),
            oh.make_node("Abs", ["u"], ["y"], name="m2"),
        ],
        [oh.make_tensor_value_info("s", TP.STRING, ["n"])],
        [oh.make_tensor_value_info("y", TP.FLOAT, ["n"])],
    )


def _strings(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-4, 4, (rows, cols)).round(3).astype(str).astype(object)


def _ort(model: onnx.ModelProto, feed: dict, names=None) -> list:
    return ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(names, feed)


def _gert(model: onnx.ModelProto, **kw) -> gert.InferenceSession:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        sess = gert.InferenceSession(model.SerializeToString(), providers=kw.pop("providers", PROVIDERS), **kw)
    sess.warned = [str(w.message) for w in seen]
    return sess


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype, (x.dtype, x.shape, y.dtype, y.shape)
        if x.dtype == object:
            assert x.tolist() == y.tolist()
        else:
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "make, feed, cpu_nodes, core_nodes",
    [
        (string_prefix, lambda n: {"s": _strings(n, 4)}, ["parse"], ["scale", "relu"]),
        (
            string_suffix,
            lambda n: {"x": np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)},
            ["to_text"],
            ["head", "argmax"],
        ),
        (both_edges, lambda n: {"s": _strings(n, 2, n)}, ["parse", "format"], ["double"]),
    ],
)
def test_core_runs_on_gert_and_edges_on_cpu_with_onnx_runtimes_values(make, feed, cpu_nodes, core_nodes):
    model = make()
    model.graph.name = f"{make.__name__}_warned"  # warned once per graph: not the name another test loads first
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    with _gert(model, sess_options=so) as sess:
        assert sess.get_providers() == PROVIDERS
        assert any("run on ONNX Runtime's CPUExecutionProvider" in w and "the other" in w for w in sess.warned)
        where = {n.name: sub.ep_name for sub in sess.get_provider_graph_assignment_info() for n in sub.get_nodes()}
        assert where == {**{n: CPU for n in cpu_nodes}, **{n: "CANNExecutionProvider" for n in core_nodes}}
        for rows in (1, 3, 2):
            f = feed(rows)
            _same(sess.run(None, f), _ort(model, f))
        core = sess._edges_session.core._model.stats()  # the core ran on gert's device, not on the CPU
        assert core["dynamic_hits"] + core["static_hits"] >= 3


def test_outputs_by_name_async_and_errors_as_onnx_runtime():
    model = string_suffix()
    x = np.ones((2, 3), np.float32)
    with _gert(model) as sess:
        _same(sess.run(["logits"], {"x": x}), _ort(model, {"x": x}, ["logits"]))
        with pytest.raises(Exception, match="Invalid output name"):
            sess.run(["nope"], {"x": x})
        with pytest.raises(ValueError, match="missing from input feed"):
            sess.run(None, {})
        got = []
        import threading

        done = threading.Event()
        sess.run_async(None, {"x": x}, lambda out, ud, err: (got.append((out, ud, err)), done.set()), "u")
        assert done.wait(30)
        out, ud, err = got[0]
        assert err == "" and ud == "u"
        _same(out, _ort(model, {"x": x}))
        # a bad feed reaches the core's own check: ONNX Runtime's class and message, the session still serves
        with pytest.raises(Exception, match="INVALID_ARGUMENT|invalid"):
            sess.run(None, {"x": np.ones((2, 4), np.float32)})
        _same(sess.run(None, {"x": x}), _ort(model, {"x": x}))


def test_no_sound_core_runs_the_whole_model_on_cpu():
    model = no_core()
    with _gert(model) as sess:
        assert sess.get_providers() == [CPU]
        f = {"s": np.array(["1.5", "-2"], object)}
        _same(sess.run(None, f), _ort(model, f))


def test_without_cpu_provider_the_refused_model_fails_as_onnx_runtime_says():
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        gert.InferenceSession(string_prefix().SerializeToString(), providers=["CANNExecutionProvider"])


def test_external_data_models_fall_back_whole(tmp_path):
    model = string_prefix()
    path = tmp_path / "m.onnx"
    onnx.save(
        string_prefix(),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="w.bin",
        size_threshold=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gert.InferenceSession(str(path), providers=PROVIDERS) as sess:
            assert sess.get_providers() == [CPU]
            f = {"s": _strings(2, 4)}
            _same(sess.run(None, f), _ort(model, f))


# ---- the split itself, on generated graphs ------------------------------------------------------------------------
_UNARY = ("Neg", "Abs", "Relu", "Sigmoid", "Tanh")


@st.composite
def dags(draw):
    """A random DAG of unary/binary float ops over two inputs, with a random set of nodes marked refused."""
    count = draw(st.integers(2, 9))
    names = ["a", "b"]
    nodes = []
    for i in range(count):
        if draw(st.booleans()):
            op = draw(st.sampled_from(("Add", "Mul", "Sub")))
            ins = [draw(st.sampled_from(names)), draw(st.sampled_from(names))]
        else:
            op = draw(st.sampled_from(_UNARY))
            ins = [draw(st.sampled_from(names))]
        out = f"t{i}"
        nodes.append(oh.make_node(op, ins, [out], name=f"n{i}"))
        names.append(out)
    used = {x for n in nodes for x in n.input}
    outs = [n.output[0] for n in nodes if n.output[0] not in used] + draw(
        st.lists(st.sampled_from([n.output[0] for n in nodes]), max_size=2, unique=True)
    )
    outs = list(dict.fromkeys(outs))
    model = _model(
        nodes,
        [oh.make_tensor_value_info(x, TP.FLOAT, ["n", 3]) for x in ("a", "b")],
        [oh.make_tensor_value_info(x, TP.FLOAT, None) for x in outs],
    )
    refused = sorted(draw(st.sets(st.integers(0, count - 1), min_size=1, max_size=3)))
    return model, refused


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_a_split_is_sound_and_computes_what_the_whole_model_does(case):
    """Every split plan() accepts keeps the prefix closed under ancestors and the suffix under descendants, puts no
    refused node in the core, and the three parts run one after the other give ONNX Runtime's whole-model values."""
    model, refused = case
    p = ort_partition.plan(model, refused)
    if p is None:
        return
    nodes = list(model.graph.node)
    made = {o: i for i, n in enumerate(nodes) for o in n.output}
    parents = [{made[x] for x in n.input if x in made} for n in nodes]
    assert not set(p.prefix) & set(p.suffix) and not set(refused) & set(p.core)
    assert set(p.prefix) | set(p.core) | set(p.suffix) == set(range(len(nodes)))
    for i in p.prefix:
        assert parents[i] <= set(p.prefix)
    for i in p.core:
        assert not parents[i] & set(p.suffix)
    cpu = lambda data: ort.InferenceSession(data, providers=[CPU])  # noqa: E731
    edges = ort_partition.EdgeSession(model, p, cpu, cpu, CPU)
    rng = np.random.default_rng(len(nodes))
    feed = {x: rng.standard_normal((2, 3)).astype(np.float32) for x in ("a", "b")}
    _same(edges.run(None, feed), _ort(model, feed))


def test_refused_nodes_are_what_canns_parser_refuses():
    assert ort_partition.refused_nodes(string_prefix()) == [0]
    assert ort_partition.refused_nodes(string_suffix()) == [2]
    assert ort_partition.refused_nodes(both_edges()) == [0, 2]
    seq = _model(
        [
            oh.make_node("SequenceConstruct", ["x"], ["q"], name="sq"),
            oh.make_node("SequenceAt", ["q", "i"], ["y"], name="at"),
            oh.make_node("Relu", ["y"], ["z"], name="r"),
        ],
        [oh.make_tensor_value_info("x", TP.FLOAT, ["n"])],
        [oh.make_tensor_value_info("z", TP.FLOAT, ["n"])],
        [nh.from_array(np.array(0, np.int64), "i")],
    )
    assert ort_partition.refused_nodes(seq) == [0, 1]
