"""Issue 36, items 4 and 5, and gert.InferenceSession's run errors and scalar feeds, each compared with ONNX Runtime
on every front door (Model.run, run(list), submit, gert.InferenceSession, Triton's execute):

- outputs ONNX Runtime does not write into a bound buffer: a graph input listed as an output (a pass-through), one
  tensor listed as two outputs; and outputs that are initializers or Constant nodes' outputs;
- a request with a dim of size 0: 0 rows are answered with 0 rows (ONNX Runtime's shapes) without a run, or refused
  alone (a 0-row LSTM aborted the process); a 0-sized dim other than the batch is an input error naming the input
  and the dim before anything runs (Triton: INVALID_ARG), unless every output is empty;
- gert.InferenceSession raises ONNX Runtime's exception classes (InvalidArgument, Fail) for errors met while running,
  and gives ONNX Runtime's output shapes for a one-element array fed to a 0-d input.
"""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

import gert
from _helpers import RUNTIME, compiled_from, run_python_result

pytestmark = RUNTIME

POLICIES = [
    {},
    {"shape_policy": {"batch": "pad"}, "gears": {"batch": [1, 4]}},
    {"shape_policy": {"batch": "exact"}},
    {"shape_policy": {"batch": "dynamic"}},
    {"shape_policy": {"batch": "auto"}},
]
POLICY_IDS = ["default", "pad", "exact", "dynamic", "auto"]


def _model(nodes, inputs, outputs, inits=()) -> bytes:
    m = h.make_model(h.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _vi(name: str, shape, elem=T.FLOAT):
    return h.make_tensor_value_info(name, elem, shape)


def _ort(model: bytes, feed: dict) -> list:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)


def _same(got, want, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{what}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
    )
    np.testing.assert_array_equal(got, want, err_msg=what)


# ---- outputs ONNX Runtime does not write in place ------------------------------------------------------------------


def aliased_model() -> bytes:
    """Outputs y = x + ten, x itself (a pass-through), ten (an initializer), c (a Constant node), and y again."""
    c = h.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.float32([1, 2]), "cv"))
    return _model(
        [h.make_node("Add", ["x", "ten"], ["y"]), c],
        [_vi("x", ["N", 2])],
        [_vi("y", ["N", 2]), _vi("x", ["N", 2]), _vi("ten", []), _vi("c", [2]), _vi("y", ["N", 2])],
        [numpy_helper.from_array(np.float32(10), "ten")],
    )


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 2)).astype(np.float32)


def _check_outputs(model: bytes, out: dict, x: np.ndarray, what: str) -> None:
    want = dict(zip(["y", "x", "ten", "c"], _ort(model, {"x": x})))
    assert set(out) == set(want), what
    for k, v in want.items():
        _same(out[k], v, f"{what}: output {k}")


@pytest.mark.parametrize("opts", POLICIES, ids=POLICY_IDS)
def test_aliased_outputs_model_run_list_submit(opts):
    model = aliased_model()
    with gert.load(model, **opts) as m:
        for seed, n in enumerate([3, 3, 1, 3, 2]):  # the same shape again: the host NPU's replay, the hot path
            x = _rows(n, seed)
            _check_outputs(model, m.run({"x": x}), x, f"run #{seed} ({n} rows)")
        xs = [_rows(n, 10 + n) for n in (1, 3, 2)]
        for got, x in zip(m.run([{"x": x} for x in xs]), xs):
            _check_outputs(model, got, x, f"run(list) member of {len(x)} rows")
        futures = [(m.submit({"x": x}), x) for x in (_rows(2, 20), _rows(3, 21))]
        for f, x in futures:
            _check_outputs(model, f.result(), x, "submit")


def test_aliased_outputs_from_threads():
    """Concurrent callers each get their own input back as the pass-through output (merged runs split)."""
    model = aliased_model()
    errors = []
    with gert.load(model) as m:

        def caller(seed: int) -> None:
            try:
                for i in range(20):
                    x = _rows(1 + (seed + i) % 3, 100 * seed + i)
                    out = m.run({"x": x})
                    np.testing.assert_array_equal(out["x"], x)
                    np.testing.assert_array_equal(out["y"], x + 10)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=caller, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]


def test_aliased_outputs_inference_session():
    model = aliased_model()
    sess = gert.InferenceSession(model, providers=["CANNExecutionProvider"])
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert [o.name for o in sess.get_outputs()] == [o.name for o in ref.get_outputs()]
    for seed, n in enumerate([2, 2, 4]):
        x = _rows(n, seed)
        got, want = sess.run(None, {"x": x}), ref.run(None, {"x": x})
        assert len(got) == len(want) == 5
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"run #{seed} output {i}")
        assert got[0] is not got[4], "a tensor listed twice is two arrays, as ONNX Runtime returns it"
        for names in (["x"], ["ten", "c", "x"], ["y", "y"]):
            for g, w in zip(sess.run(names, {"x": x}), ref.run(names, {"x": x})):
                _same(g, w, f"run({names})")
    done = threading.Event()
    result = {}
    sess.run_async(None, {"x": x}, lambda outs, _, err: (result.update(outs=outs, err=err), done.set()))
    assert done.wait(30) and result["err"] == ""
    for g, w in zip(result["outs"], ref.run(None, {"x": x})):
        _same(g, w, "run_async")
    sess.close()


def test_output_that_is_only_the_input():
    """A graph that hands its input on (no node computes): the input's values, on a static and a dynamic graph."""
    model = _model([h.make_node("Relu", ["x"], ["r"])], [_vi("x", ["N", 2])], [_vi("x", ["N", 2])])
    for opts in ({}, {"shape_policy": {"batch": "dynamic"}}):
        with gert.load(model, **opts) as m:
            for seed in range(3):
                x = _rows(3, seed)
                _same(m.run({"x": x})["x"], x, f"{opts} run #{seed}")


# ---- 0-sized dims ---------------------------------------------------------------------------------------------------


def _lstm_model() -> bytes:
    """PyTorch's layout of an LSTM: x [T, N, F] -> Y [T, 1, N, H], Yh [1, N, H]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((1, 12, 4)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.standard_normal((1, 12, 3)).astype(np.float32), "R")
    return _model(
        [h.make_node("LSTM", ["x", "W", "R"], ["Y", "Yh"], hidden_size=3)],
        [_vi("x", [3, "N", 4])],
        [_vi("Y", [3, 1, "N", 3]), _vi("Yh", [1, "N", 3])],
        [w, r],
    )


def test_zero_row_lstm_never_reaches_the_kernel():
    """ONNX Runtime's LSTM aborts the process on 0 rows: every front door and policy answers 0 rows (the shapes
    of ONNX Runtime's answer at 1 row, with 0 on the batch axis) and then still serves; in a child process, so that
    an abort fails this test and not the session."""
    res = run_python_result(
        f"""
        import threading, numpy as np, gert, warnings
        warnings.simplefilter("ignore")
        model = bytes.fromhex({_lstm_model().hex()!r})
        empty, good = np.zeros((3, 0, 4), np.float32), np.ones((3, 2, 4), np.float32)
        shapes = lambda out: {{k: list(v.shape) for k, v in sorted(out.items())}}
        got = {{}}
        for name, opts in [("default", {{}}), ("pad", {{"batch_dim": "N", "gears": {{"batch": [1, 4]}}}}),
                           ("exact", {{"batch_dim": "N", "shape_policy": {{"batch": "exact"}}}}),
                           ("dynamic", {{"batch_dim": "N", "shape_policy": {{"batch": "dynamic"}}}}),
                           ("auto", {{"batch_dim": "N", "shape_policy": {{"batch": "auto"}}}})]:
            with gert.load(model, **opts) as m:
                got[name + " run"] = shapes(m.run({{"x": empty}}))
                got[name + " list"] = [shapes(o) for o in m.run([{{"x": empty}}, {{"x": good}}, {{"x": empty}}])]
                got[name + " submit"] = shapes(m.submit({{"x": empty}}).result())
                got[name + " after"] = shapes(m.run({{"x": good}}))
        sess = gert.InferenceSession(model, providers=["CANNExecutionProvider"])
        got["session"] = [list(a.shape) for a in sess.run(None, {{"x": empty}})]
        got["session after"] = [list(a.shape) for a in sess.run(None, {{"x": good}})]
        emit(got)
    """,
        timeout=300,
    )
    zero, two = {"Y": [3, 1, 0, 3], "Yh": [1, 0, 3]}, {"Y": [3, 1, 2, 3], "Yh": [1, 2, 3]}
    for name in ("default", "pad", "exact", "dynamic", "auto"):
        assert res[f"{name} run"] == zero and res[f"{name} submit"] == zero, (name, res)
        assert res[f"{name} list"] == [zero, two, zero] and res[f"{name} after"] == two, (name, res)
    assert res["session"] == [zero["Y"], zero["Yh"]] and res["session after"] == [two["Y"], two["Yh"]]


def _mlp_with_constant_output() -> bytes:
    """y = x @ W [N, 3]; k: a Constant output that no input reaches."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")
    k = h.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.float32([7, 8]), "kv"))
    return _model(
        [h.make_node("MatMul", ["x", "W"], ["y"]), k], [_vi("x", ["N", 4])], [_vi("y", ["N", 3]), _vi("k", [2])], [w]
    )


@pytest.mark.parametrize("opts", POLICIES, ids=POLICY_IDS)
def test_zero_rows_answered_as_onnx_runtime_or_refused_alone(opts):
    """0 rows of an MLP: ONNX Runtime's answer (shape and dtype) where every output carries the batch. With an
    output no input reaches (its value needs a run), a padded batch runs at a gear and answers as ONNX Runtime
    does; an unpadded one is refused alone, naming the input, the dim and the output."""
    mlp = _model(
        [h.make_node("MatMul", ["x", "W"], ["y"]), h.make_node("Relu", ["y"], ["z"])],
        [_vi("x", ["N", 4])],
        [_vi("y", ["N", 3]), _vi("z", ["N", 3])],
        [numpy_helper.from_array(np.ones((4, 3), np.float32), "W")],
    )
    empty, good = np.zeros((0, 4), np.float32), np.ones((2, 4), np.float32)
    with gert.load(mlp, **opts) as m:
        want = dict(zip(["y", "z"], _ort(mlp, {"x": empty})))
        for what, out in [
            ("run", m.run({"x": empty})),
            ("submit", m.submit({"x": empty}).result()),
            ("run(list)", m.run([{"x": empty}, {"x": good}])[0]),
        ]:
            for k, v in want.items():
                _same(out[k], v, f"{what} {k}")
    model = _mlp_with_constant_output()
    with gert.load(model, **opts) as m:
        if m.plan.batch.policy == "pad":
            for k, v in zip(["y", "k"], _ort(model, {"x": empty})):
                _same(m.run({"x": empty})[k], v, f"padded {k}")
        else:
            with pytest.raises(gert.GertError, match=r"input 'x'.*'batch'.*output 'k' carries none") as e:
                m.run({"x": empty})
            assert e.value.kind == "empty" and e.value.input == "x"
            # merged with good requests (run(list), Triton's execute) it rides in their run: ONNX Runtime's answer
            results = m.engine.run_many([{"x": good}, {"x": empty}, {"x": good}], return_exceptions=True)
            for r, x in zip(results, (good, empty, good)):
                for k, v in zip(["y", "k"], _ort(model, {"x": x})):
                    _same(r[k], v, f"run_many, {len(x)} rows: {k}")


def _cls_model() -> bytes:
    """PP-OCR cls's shape: x [N, 3, H, W] -> Conv -> GlobalAveragePool -> Flatten -> Gemm -> Softmax -> [N, 2]."""
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "cw"),
        numpy_helper.from_array(rng.standard_normal((4, 2)).astype(np.float32), "gw"),
    ]
    nodes = [
        h.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("GlobalAveragePool", ["c"], ["p"]),
        h.make_node("Flatten", ["p"], ["f"]),
        h.make_node("Gemm", ["f", "gw"], ["g"]),
        h.make_node("Softmax", ["g"], ["prob"], axis=1),
    ]
    return _model(nodes, [_vi("x", ["N", 3, "H", "W"])], [_vi("prob", ["N", 2])], inits)


ZERO_WIDTH = r"input 'x': expected dim 'W' \(axis 3\) of size >= 1, got 0"


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"shape_policy": {"W": "pad"}, "gears": {"W": [8, 16]}},
        {"shape_policy": {"W": "exact"}},
        {"shape_policy": {"W": "dynamic"}},
    ],
    ids=["default", "pad", "exact", "dynamic"],
)
def test_zero_width_is_an_input_error_before_anything_runs(opts):
    """PP-OCR cls given [1, 3, 8, 0]: an InputError naming the input and the dim (never a kernel's or a device's
    error), nothing compiled or run for it; good requests beside it run."""
    model = _cls_model()
    bad, good = np.zeros((1, 3, 8, 0), np.float32), np.ones((1, 3, 8, 16), np.float32)
    with gert.load(model, **opts) as m:
        want = _ort(model, {"x": good})[0]
        _same(m.run({"x": good})["prob"], want, "good")
        before = m.stats()["requests"] if "requests" in m.stats() else None
        for call in (
            lambda: m.run({"x": bad}),
            lambda: m.submit({"x": bad}).result(),
            lambda: m.run([{"x": good}, {"x": bad}]),
        ):
            with pytest.raises(gert.GertError, match=ZERO_WIDTH) as e:
                call()
            assert e.value.kind == "empty" and e.value.input == "x", e.value
        results = m.engine.run_many([{"x": good}, {"x": bad}], return_exceptions=True)
        assert isinstance(results[1], gert.GertError) and "'W'" in str(results[1])
        _same(results[0]["prob"], want, "beside the bad one")
        if before is not None:
            assert m.stats()["requests"] == before + 1, "only the good request ran"
    sess = gert.InferenceSession(model, providers=["CANNExecutionProvider"])
    with pytest.raises(ort_state.InvalidArgument, match=ZERO_WIDTH):
        sess.run(None, {"x": bad})
    _same(sess.run(None, {"x": good})[0], want, "session after")
    sess.close()


def test_zero_sized_dim_with_every_output_empty_is_answered():
    """A dim other than the batch of size 0 that every output carries: ONNX Runtime's empty answer, no run."""
    model = _model(
        [h.make_node("Relu", ["x"], ["r"]), h.make_node("Transpose", ["x"], ["t"], perm=[1, 0])],
        [_vi("x", ["N", "T"])],
        [_vi("r", ["N", "T"]), _vi("t", ["T", "N"])],
    )
    x = np.zeros((2, 0), np.float32)
    with gert.load(model) as m:
        for k, v in zip(["r", "t"], _ort(model, {"x": x})):
            _same(m.run({"x": x})[k], v, k)
    sess = gert.InferenceSession(model)
    for g, w in zip(sess.run(None, {"x": x}), _ort(model, {"x": x})):
        _same(g, w, "session")
    sess.close()


def test_zero_width_through_triton_is_invalid_arg(monkeypatch, tmp_path):
    """gert_triton's execute: the 0-wide request gets INVALID_ARG naming the input and the dim; the others run."""
    import fake_pb_utils
    from gert_triton import TritonPythonModel

    pb = fake_pb_utils.install(monkeypatch)
    mdir = tmp_path / "cls"
    (mdir / "1").mkdir(parents=True)
    (mdir / "1" / "model.onnx").write_bytes(_cls_model())
    (mdir / "1" / "model.py").write_text("from gert_triton import TritonPythonModel\n")
    pb.set_model_dir(str(mdir))
    cfg = TritonPythonModel.auto_complete_config(pb.ModelConfig(pb.default_config("cls", max_batch_size=8))).as_dict()
    model = TritonPythonModel()
    model.initialize(
        {
            "model_config": json.dumps(cfg),
            "model_instance_kind": "CPU",
            "model_instance_name": "cls_0_0",
            "model_instance_device_id": "0",
            "model_repository": str(mdir),
            "model_version": "1",
            "model_name": "cls",
        }
    )
    try:
        good, bad = np.ones((1, 3, 8, 16), np.float32), np.zeros((1, 3, 8, 0), np.float32)
        no_rows = np.zeros((0, 3, 8, 16), np.float32)
        reqs = [pb.InferenceRequest([pb.Tensor("x", a)], ["prob"]) for a in (good, bad, good, no_rows)]
        responses = model.execute(reqs)
        assert responses[3].output_tensors()[0].as_numpy().shape == (0, 2), "0 rows: 0 rows"
        alone = model.execute([pb.InferenceRequest([pb.Tensor("x", no_rows)], ["prob"])])
        assert alone[0].output_tensors()[0].as_numpy().shape == (0, 2), "0 rows alone: 0 rows"
        err = responses[1].error()
        assert responses[1].has_error() and err.code() == pb.TritonError.INVALID_ARG, err and err.message()
        assert "input 'x'" in err.message() and "'W' (axis 3)" in err.message(), err.message()
        want = _ort(_cls_model(), {"x": good})[0]
        for i in (0, 2):
            assert not responses[i].has_error(), responses[i].error().message()
            _same(responses[i].output_tensors()[0].as_numpy(), want, f"request {i}")
    finally:
        model.finalize()


# ---- gert.InferenceSession: ONNX Runtime's errors while running, scalar feeds ------------------------------------


def _gather_model() -> bytes:
    return _model(
        [h.make_node("Gather", ["y", "idx"], ["z"], axis=1)],
        [_vi("y", ["N", 3]), _vi("idx", [2], T.INT64)],
        [_vi("z", ["N", 2])],
    )


def _error_of(sess, feed):
    try:
        sess.run(None, feed)
    except Exception as e:  # noqa: BLE001 - the error is the result
        return e
    raise AssertionError("the run did not fail")


def test_session_run_errors_are_onnx_runtimes_classes():
    """An index out of range (ONNX Runtime: InvalidArgument, met in its kernel), before and after a good run of the
    same shapes (the host NPU replays a run it made before), in run, run_async and run_with_iobinding."""
    model = _gather_model()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = gert.InferenceSession(model, providers=["CANNExecutionProvider"])
    bad = {"y": np.ones((2, 3), np.float32), "idx": np.array([0, 9], np.int64)}
    good = {"y": np.ones((2, 3), np.float32), "idx": np.array([0, 2], np.int64)}
    want = _error_of(ref, bad)
    for when in ("first", "after a good run"):
        got = _error_of(sess, bad)
        assert isinstance(got, type(want)) and isinstance(got, gert.GertError), (when, type(got), got)
        assert str(got) == str(want), when
        assert isinstance(got.gert_error, gert.GeError)
        _same(sess.run(None, good)[0], ref.run(None, good)[0], "good")
    done, result = threading.Event(), {}
    sess.run_async(None, bad, lambda outs, _, err: (result.update(outs=outs, err=err), done.set()))
    assert done.wait(30) and result["outs"] == [] and result["err"].startswith("Non-zero status code"), result
    io = sess.io_binding()
    for k, v in bad.items():
        io.bind_cpu_input(k, v)
    io.bind_output("z")
    with pytest.raises(RuntimeError, match=r"^Error in execution: Non-zero status code returned while running Gather"):
        sess.run_with_iobinding(io)
    sess.close()


def test_session_dim_mismatch_is_fail():
    """Inputs whose shared dim differs (ONNX Runtime fails the first kernel that meets them: Fail)."""
    model = _model(
        [h.make_node("Add", ["x", "y"], ["z"])], [_vi("x", ["N", 3]), _vi("y", ["N", 3])], [_vi("z", ["N", 3])]
    )
    feed = {"x": np.ones((2, 3), np.float32), "y": np.ones((3, 3), np.float32)}
    want = _error_of(ort.InferenceSession(model, providers=["CPUExecutionProvider"]), feed)
    sess = gert.InferenceSession(model, providers=["CANNExecutionProvider"])
    got = _error_of(sess, feed)
    assert isinstance(got, type(want)) and isinstance(got, ort_state.Fail), (type(want), type(got), got)
    assert "'x'" in str(got) and "'y'" in str(got)
    sess.close()


@pytest.mark.parametrize("k", [np.array([2.0], np.float32), np.array([[2.0]], np.float32)], ids=["(1,)", "(1,1)"])
def test_session_one_element_array_for_a_0d_input(k):
    """ONNX Runtime computes with the array as given: outputs computed from it keep its broadcast shape."""
    model = _model(
        [h.make_node("Mul", ["k", "three"], ["z"]), h.make_node("Mul", ["x", "k"], ["y"])],
        [_vi("x", ["N", 2]), _vi("k", [])],
        [_vi("y", ["N", 2]), _vi("z", [])],
        [numpy_helper.from_array(np.array(3.0, np.float32), "three")],
    )
    sess = gert.InferenceSession(model, providers=["CANNExecutionProvider"])
    for n in (2, 3):
        feed = {"x": np.arange(2 * n, dtype=np.float32).reshape(n, 2), "k": k}
        for g, w in zip(sess.run(None, feed), _ort(model, feed)):
            _same(g, w, f"{n} rows")
        _same(sess.run(None, {"x": feed["x"], "k": k.reshape(())})[1], np.array(6.0, np.float32), "a 0-d feed")
    sess.close()


def test_session_from_a_file_reads_it_for_scalar_shapes(tmp_path):
    model = _model([h.make_node("Mul", ["k", "k"], ["z"])], [_vi("k", [])], [_vi("z", [])])
    path = tmp_path / "m.onnx"
    path.write_bytes(model)
    sess = gert.InferenceSession(os.fspath(path), providers=["CANNExecutionProvider"])
    _same(sess.run(None, {"k": np.array([3.0], np.float32)})[0], np.array([9.0], np.float32), "(1,) feed")
    sess.close()


# ---- the host NPU's replay of a run (cbindings/_provider.pxi) -------------------------------------------------------


def _host_executable(data: bytes):
    (wrapped,) = [w for w in gert.hostnpu.host_executables() if compiled_from(w.executable, data)]
    return wrapped


def test_replayed_runs_copy_the_aliased_outputs_again():
    """A static graph run again on the same device buffers is replayed from the host NPU's cache: the replay makes
    the pass-through and the second listing's copies too, from the buffers' current contents."""
    data = _model(
        [h.make_node("Mul", ["x", "k"], ["y"])],
        [_vi("x", [3, 4])],
        [_vi("y", [3, 4]), _vi("x", [3, 4]), _vi("y", [3, 4])],
        [numpy_helper.from_array(np.float32(2.25), "k")],
    )  # bytes no other test compiles
    x1 = np.arange(12, dtype=np.float32).reshape(3, 4)
    graph = gert.Graph.from_onnx(data, {"input_shape": "x:3,4"})
    with gert.Stream() as stream, gert.Session() as session:
        session.add_graph(1, graph)
        session.compile_graph(1)
        session.load_graph(1, stream)
        x = gert.DeviceTensor.from_numpy(x1)
        outs = [gert.DeviceTensor.empty((3, 4), np.float32) for _ in range(3)]
        for k in range(3):
            x.buffer.copy_from(x1 + k)
            session.execute_async(1, stream, [x], outs)
            stream.synchronize()
            got = [o.to_numpy() for o in outs]
            for g, w in zip(got, [2.25 * (x1 + k), x1 + k, 2.25 * (x1 + k)]):
                np.testing.assert_array_equal(g, w)
        # a run's key holds whether it ran alone on the device (ComputeShare): a thread another test left in this
        # process can make one run a shared one, bound once more; every run at a key seen before is a replay (>= 1)
        wrapped = _host_executable(data)
        keys = len(wrapped.replay_keys())
        assert keys in (1, 2) and wrapped.replayed == 3 - keys


def test_a_failing_replay_still_reports_onnx_runtimes_status():
    """Bad values at the shapes of a run that was replayed: the error carries ONNX Runtime's status (a replay that
    fails runs again through the provider, which learns it), so gert.InferenceSession can raise its class."""
    data = _model(
        [h.make_node("Gather", ["y", "idx"], ["z"], axis=1)],
        [_vi("y", [2, 5]), _vi("idx", [2], T.INT64)],
        [_vi("z", [2, 2])],
    )
    graph = gert.Graph.from_onnx(data, {"input_shape": "y:2,5;idx:2"})
    with gert.Stream() as stream, gert.Session() as session:
        session.add_graph(1, graph)
        session.compile_graph(1)
        session.load_graph(1, stream)
        y = gert.DeviceTensor.from_numpy(np.ones((2, 5), np.float32))
        idx = gert.DeviceTensor.from_numpy(np.array([0, 1], np.int64))
        z = gert.DeviceTensor.empty((2, 2), np.float32)
        for _ in range(2):
            session.execute_async(1, stream, [y, idx], [z])
            stream.synchronize()
        assert _host_executable(data).replayed == 1
        idx.buffer.copy_from(np.array([0, 9], np.int64))
        # (a static graph's run fails on its stream: the host NPU reports it as a device would, at the synchronize)
        status = r"\[ONNXRuntimeError\] : 2 : INVALID_ARGUMENT : .*idx=9"
        with pytest.raises((gert.GeError, gert.AclError), match=status):
            session.execute_async(1, stream, [y, idx], [z])
            stream.synchronize()
