"""gert.InferenceSession against ONNX Runtime's own InferenceSession: the same call on both gives the same result or
the same class of error (ONNX Runtime is the reference). And gert.patch_onnxruntime."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import gert
from _helpers import RUNTIME
from gert import _cann
from gert.core.stream_layout import default_streams
from gert.ort_session import InvalidArgument
from models import CLS, DET, REC, ppocr_model, text_image

pytestmark = RUNTIME


def reference(model, sess_options=None):
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

    return InferenceSession(model, sess_options, providers=["CPUExecutionProvider"])


def described(args) -> list:
    return [(a.name, a.shape, a.type) for a in args]


def meta(m) -> tuple:
    return (
        m.producer_name,
        m.graph_name,
        m.domain,
        m.description,
        m.graph_description,
        m.version,
        dict(m.custom_metadata_map),
    )


def scaled_model(version: bool = True) -> bytes:
    """y = x * w + b over x f32[N, 3, W] (w an initializer listed as an input: overridable), z = ArgMax(y) with no
    shape in the file (ONNX Runtime infers it), metadata props, docs, and an int64 input c[N]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, None])
    c = helper.make_tensor_value_info("c", TensorProto.INT64, ["N"])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, None])
    z = helper.make_tensor_value_info("z", TensorProto.INT64, None)
    c2 = helper.make_tensor_value_info("c2", TensorProto.INT64, ["N"])
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["t"]),
        helper.make_node("Add", ["t", "b"], ["y"]),
        helper.make_node("ArgMax", ["y"], ["z"], axis=1, keepdims=0),
        helper.make_node("Add", ["c", "c"], ["c2"]),
    ]
    g = helper.make_graph(
        nodes,
        "scaled",
        [x, c, w],
        [y, z, c2],
        [
            helper.make_tensor("w", TensorProto.FLOAT, [1], [2.0]),
            helper.make_tensor("b", TensorProto.FLOAT, [1], [0.5]),
        ],
        doc_string="graph doc",
    )
    kw = dict(model_version=7) if version else {}
    m = helper.make_model(
        g,
        producer_name="gert-tests",
        doc_string="model doc",
        domain="ai.gert.test",
        opset_imports=[helper.make_opsetid("", 17)],
        **kw,
    )
    m.ir_version = 8
    helper.set_model_props(m, {"character": "a\nb\nc", "note": "kept"})
    # (no onnx.checker: it wants a shape on every graph output, which ONNX itself does not require)
    return m.SerializeToString()


def feed(n: int = 2, w: int = 5, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 3, w)).astype(np.float32), "c": np.arange(n, dtype=np.int64)}


@pytest.fixture(scope="module")
def scaled():
    data = scaled_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = gert.InferenceSession(data)
    yield data, sess, reference(data)
    sess.close()


# ---- metadata --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [CLS, DET, REC])
def test_ppocr_models_describe_themselves_as_in_onnx_runtime(name):
    path = ppocr_model(name)
    with gert.InferenceSession(path) as sess:
        ref = reference(path)
        assert described(sess.get_inputs()) == described(ref.get_inputs())
        assert described(sess.get_outputs()) == described(ref.get_outputs())
        assert described(sess.get_overridable_initializers()) == described(ref.get_overridable_initializers())
        assert meta(sess.get_modelmeta()) == meta(ref.get_modelmeta())


def test_built_model_describes_itself_as_in_onnx_runtime(scaled):
    data, sess, ref = scaled
    assert (
        described(sess.get_inputs())
        == described(ref.get_inputs())
        == [("x", ["N", 3, None], "tensor(float)"), ("c", ["N"], "tensor(int64)")]
    )
    assert described(sess.get_outputs()) == described(ref.get_outputs())
    assert sess.get_outputs()[1].shape == ["N", None], "an output the file leaves unshaped is inferred"
    assert described(sess.get_overridable_initializers()) == described(ref.get_overridable_initializers())
    assert meta(sess.get_modelmeta()) == meta(ref.get_modelmeta())
    assert sess.get_modelmeta().custom_metadata_map["character"] == "a\nb\nc"
    unversioned = scaled_model(version=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gert.InferenceSession(unversioned) as s2:
            assert s2.get_modelmeta().version == reference(unversioned).get_modelmeta().version


# ---- running ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("names", [None, [], ["c2", "y"], ["z"]])
def test_run_returns_outputs_in_the_order_asked(scaled, names):
    _, sess, ref = scaled
    f = feed(3, 7)
    got, want = sess.run(names, f), ref.run(names, f)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_run_takes_lists_as_onnx_runtime_does(scaled):
    _, sess, ref = scaled
    f = {"x": [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]], "c": [4]}
    for g, w in zip(sess.run(None, f), ref.run(None, f)):
        np.testing.assert_array_equal(g, w)


def test_ppocr_cls_results_equal_onnx_runtime():
    path = ppocr_model(CLS)
    x = text_image(4, 48, 192, seed=3)
    with gert.InferenceSession(path) as sess:
        np.testing.assert_allclose(
            sess.run(None, {"x": x})[0], reference(path).run(None, {"x": x})[0], rtol=1e-4, atol=1e-5
        )


BAD_FEEDS = {
    "missing input": lambda f: {"x": f["x"]},
    "unknown input": lambda f: dict(f, q=np.ones(1, np.float32)),
    "wrong dtype": lambda f: dict(f, x=f["x"].astype(np.float64)),
    "wrong rank": lambda f: dict(f, x=f["x"][0]),
    "wrong fixed dim": lambda f: dict(f, x=np.zeros((2, 4, 5), np.float32)),
    "int input as float": lambda f: dict(f, c=f["c"].astype(np.float32)),
}


@pytest.mark.parametrize("case", sorted(BAD_FEEDS))
def test_bad_feed_raises_onnx_runtimes_error_class(scaled, case):
    _, sess, ref = scaled
    bad = BAD_FEEDS[case](feed())
    with pytest.raises(Exception) as want:
        ref.run(None, bad)
    with pytest.raises(Exception) as got:
        sess.run(None, bad)
    assert isinstance(got.value, type(want.value)), (type(got.value), type(want.value))
    assert isinstance(got.value, gert.GertError)
    assert str(got.value) == str(want.value), "the same message as ONNX Runtime"


def test_unknown_output_name_raises_like_onnx_runtime(scaled):
    _, sess, ref = scaled
    with pytest.raises(Exception) as want:
        ref.run(["nope"], feed())
    with pytest.raises(InvalidArgument) as got:
        sess.run(["nope"], feed())
    assert isinstance(got.value, type(want.value)) and "nope" in str(got.value)


def test_feeding_an_overridable_initializer_is_refused_by_name(scaled):
    _, sess, _ = scaled
    with pytest.raises(InvalidArgument, match="'w' overrides an initializer"):
        sess.run(None, dict(feed(), w=np.ones(1, np.float32)))


def run_async_and_wait(sess, names, f):
    done, got = threading.Event(), []
    sess.run_async(names, f, lambda res, ud, err: (got.append((res, ud, err)), done.set()), "user data")
    assert done.wait(30), "run_async never called back"
    return got[0]


def test_run_async_calls_back_as_onnx_runtime_does(scaled):
    _, sess, ref = scaled
    f = feed(2, 4)
    res, ud, err = run_async_and_wait(sess, ["y", "z"], f)
    want = run_async_and_wait(ref, ["y", "z"], f)
    assert (ud, err) == (want[1], want[2]) == ("user data", "")
    for g, w in zip(res, want[0]):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    bad = dict(f, x=f["x"].astype(np.float64))
    res, ud, err = run_async_and_wait(sess, None, bad)
    want = run_async_and_wait(ref, None, bad)
    assert (res, ud, err) == (want[0], want[1], want[2]) and "tensor(double)" in err


# ---- options ---------------------------------------------------------------------------------------------------


def test_threads_become_the_streams_cube_cores(scaled):
    data, _, _ = scaled
    so = gert.SessionOptions()
    so.intra_op_num_threads = 1
    with gert.InferenceSession(data, so) as sess:
        assert sess.get_session_options() is so
        streams = sess.model.stats()["streams"]
        assert [s["cube_cores"] for s in streams] == [1] * len(streams) and len(streams) >= 2


def test_a_session_without_streams_named_gets_two_per_core_sharing_them_by_load(scaled):
    """Callers from threads run side by side, as on ONNX Runtime's shared session: two streams per cube core of the
    device, without core limits (a lone run has them all); streams named as an option stay as named."""
    data, _, _ = scaled
    cores = _cann.get_device_info(0, _cann.DEV_ATTR_CUBE_CORE_NUM)
    with gert.InferenceSession(data) as sess:
        streams = sess.model.stats()["streams"]
        assert len(streams) == default_streams(cores) == max(2, min(16, 2 * cores))
        assert all(w.core_share is not None for w in sess.model.pool.workers)  # cores by load, no fixed limits
    with gert.InferenceSession(data, streams=1) as sess:
        assert len(sess.model.stats()["streams"]) == 1


def test_free_dimension_override_fixes_the_dim_as_in_onnx_runtime(scaled):
    data, _, _ = scaled
    so = gert.SessionOptions()
    so.add_free_dimension_override_by_name("N", 2)
    with gert.InferenceSession(data, so) as sess:
        ref = reference(data, so)
        assert described(sess.get_inputs()) == described(ref.get_inputs())
        assert sess.get_inputs()[0].shape == [2, 3, None]
        np.testing.assert_allclose(sess.run(["y"], feed(2))[0], ref.run(["y"], feed(2))[0], rtol=1e-6)
        with pytest.raises(Exception) as want:
            ref.run(None, feed(3))
        with pytest.raises(InvalidArgument) as got:
            sess.run(None, feed(3))
        assert isinstance(got.value, type(want.value)) and str(got.value) == str(want.value)


def test_options_gert_does_not_apply_are_named_once(scaled):
    from gert import ort_providers

    data, _, _ = scaled
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.enable_profiling = False  # the default: not named
    ort_providers._warned.discard("so.log_severity_level")
    with pytest.warns(UserWarning, match="log_severity_level") as record:
        gert.InferenceSession(data, so).close()
    assert not any("enable_profiling" in str(r.message) for r in record)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gert.InferenceSession(data, so).close()  # once per process


def test_providers_and_provider_options(scaled):
    data, _, _ = scaled
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = gert.InferenceSession(
            data, providers=[("CANNExecutionProvider", {"device_id": 0, "streams": "2"}), "CPUExecutionProvider"]
        )
    with sess:
        assert sess.get_providers() == ["CANNExecutionProvider", "CPUExecutionProvider"]
        assert sess.get_provider_options()["CANNExecutionProvider"] == {"device_id": "0", "streams": "2"}
        assert len(sess.model.stats()["streams"]) == 2
        with pytest.raises(gert.GertError, match="device 5 does not exist"):
            gert.InferenceSession(data, providers=["CANNExecutionProvider"], provider_options=[{"device_id": 5}])


# ---- patching --------------------------------------------------------------------------------------------------


def test_patch_routes_cann_sessions_to_gert_and_unpatch_restores(scaled):
    data, _, _ = scaled
    original = ort.InferenceSession
    with gert.patch_onnxruntime():
        assert "CANNExecutionProvider" in ort.get_available_providers()
        with pytest.raises(gert.GertError, match="already patched"):
            gert.patch_onnxruntime()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = ort.InferenceSession(data, providers=["CANNExecutionProvider", "CPUExecutionProvider"])
        theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        assert isinstance(ours, gert.InferenceSession) and not isinstance(theirs, gert.InferenceSession)
        assert isinstance(theirs, original) and theirs.get_providers() == ["CPUExecutionProvider"]
        np.testing.assert_allclose(ours.run(["y"], feed())[0], theirs.run(["y"], feed())[0], rtol=1e-6)
        ours.close()
    assert ort.InferenceSession is original and "CANNExecutionProvider" not in ort.get_available_providers()
    gert.patch_onnxruntime(when="always")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        assert isinstance(s, gert.InferenceSession)
        s.close()
    finally:
        gert.unpatch_onnxruntime()
    with pytest.raises(gert.GertError, match="when must be one of"):
        gert.patch_onnxruntime(when="sometimes")


def test_importing_gert_patches_nothing():
    code = (
        "import gert, onnxruntime as ort; from onnxruntime.capi.onnxruntime_inference_collection import "
        "InferenceSession; assert ort.InferenceSession is InferenceSession; "
        "assert 'CANNExecutionProvider' not in ort.get_available_providers(); print('ok')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_session_compiles_at_creation_and_runs_any_batch_unpadded(scaled):
    """As ONNX Runtime: the compile happens when the session is made, and any batch size runs as it comes."""
    data, _, ref = scaled
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = gert.InferenceSession(data)
    with sess:
        assert sess.model.plan.dims["batch"].policy == "auto"
        assert sess.model.stats()["compiles"] >= 1, "compiled at creation"
        for n in (1, 3, 5, 3):
            f = feed(n, 4, seed=n)
            for g, w in zip(sess.run(None, f), ref.run(None, f)):
                np.testing.assert_allclose(g, w, rtol=1e-6)
        st = sess.model.stats()
        assert st["request_path_compiles"] == 0
        assert all(g["padding_ratio"] == 0 for g in st["gears"].values()), st["gears"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gert.InferenceSession(data, shape_policy={"batch": "pad"}, gears={"batch": [4]}) as padded:
            padded.run(None, feed(3))
            assert padded.model.stats()["gears"], "the caller's own batch policy wins"
            assert any(g["padding_ratio"] > 0 for g in padded.model.stats()["gears"].values())


# ---- issue 31 R9: the feeds, run_options and run variants of ONNX Runtime ------------------------------------------


def scalar_mul_model() -> bytes:
    """y = x * s over x f32[N, 4] and a 0-d s."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    m = helper.make_model(
        helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "smul", [x, s], [y]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    m.ir_version = 8
    return m.SerializeToString()


@pytest.fixture(scope="module")
def smul():
    data = scalar_mul_model()
    sess = gert.InferenceSession(data)
    yield data, sess, reference(data)
    sess.close()


X24 = np.arange(8, dtype=np.float32).reshape(2, 4)


def same_error(sess, ref, *args) -> BaseException:
    """The call raises on both, gert's error is of ONNX Runtime's class (and a GertError); returns gert's."""
    with pytest.raises(Exception) as want:
        ref.run(*args)
    with pytest.raises(Exception) as got:
        sess.run(*args)
    assert isinstance(got.value, type(want.value)), (type(got.value), type(want.value))
    assert isinstance(got.value, gert.GertError)
    return got.value


@pytest.mark.parametrize("name", ["x", "s"])
def test_none_for_an_input_fails_as_a_missing_input_as_in_onnx_runtime(smul, name):
    _, sess, ref = smul
    f = {"x": X24, "s": np.array(2, np.float32), name: None}
    e = same_error(sess, ref, None, f)
    assert isinstance(e, ort.capi.onnxruntime_pybind11_state.Fail) and f"Missing Input: {name}" in str(e)


@pytest.mark.parametrize("shape", [(1,), (1, 1)])
def test_a_one_element_array_for_a_0d_input_runs_as_the_scalar_as_in_onnx_runtime(smul, shape):
    _, sess, ref = smul
    f = {"x": X24, "s": np.full(shape, 3.0, np.float32)}
    (got,), (want,) = sess.run(None, f), ref.run(None, f)
    assert got.shape == want.shape and np.array_equal(got, want)


SMUL_BAD_FEEDS = {
    "missing input": lambda f: {"x": f["x"]},
    "unknown input": lambda f: dict(f, q=np.ones(1, np.float32)),
    "wrong dtype": lambda f: dict(f, x=f["x"].astype(np.float64)),
    "wrong rank": lambda f: dict(f, x=f["x"][0]),
    "scalar as a 1-element array of another dtype": lambda f: dict(f, s=np.ones(1, np.float64)),
}


def test_a_signature_that_ran_takes_the_compiled_lane_and_bad_feeds_still_get_onnx_runtimes_errors(smul):
    """A dict of arrays whose signature ran before runs by the compiled lane (Model.run_compiled, as Model.run: no
    second check); each bad feed after it still misses that lane and gets ONNX Runtime's error and message."""
    _, sess, ref = smul
    f = {"x": X24, "s": np.array(3.0, np.float32)}
    hits = sess.model.stats()["hot_path"]["hits"]
    deadline = time.monotonic() + 30  # the first runs prepare the lane, again once auto's static graph is in
    while sess.model.stats()["hot_path"]["hits"] == hits and time.monotonic() < deadline:
        (got,), (want,) = sess.run(None, f), ref.run(None, f)
    assert sess.model.stats()["hot_path"]["hits"] > hits, "the compiled lane never took a signature it knows"
    engine, checks = sess.model.engine, []
    validate = engine.validate
    engine.validate = lambda feed: checks.append(1) or validate(feed)  # counted: a run by the lane checks nothing
    try:
        hits = sess.model.stats()["hot_path"]["hits"]
        for _ in range(20):
            sess.run(None, f)
        took = sess.model.stats()["hot_path"]["hits"] - hits
        assert took > 0 and len(checks) == 20 - took, (took, len(checks))
    finally:
        del engine.validate
    hits = sess.model.stats()["hot_path"]["hits"]
    assert got.shape == want.shape and np.array_equal(got, want)
    for case, bad in SMUL_BAD_FEEDS.items():
        e = same_error(sess, ref, None, bad(f))
        with pytest.raises(Exception) as want_error:
            ref.run(None, bad(f))
        assert str(e) == str(want_error.value), case
    with pytest.raises(InvalidArgument, match="nope"):  # an unknown output name: refused before any run
        sess.run(["nope"], f)
    assert sess.model.stats()["hot_path"]["hits"] == hits, "a bad feed ran by the compiled lane"


def test_a_one_element_array_for_a_0d_input_after_the_scalar_ran_still_runs_as_the_scalar(smul):
    """The compiled lane knows the 0-d signature after the scalar ran; a one-element array misses it and is taken
    as ONNX Runtime takes it (the scalar, and ONNX Runtime's output shape)."""
    _, sess, ref = smul
    for _ in range(3):
        sess.run(None, {"x": X24, "s": np.array(3.0, np.float32)})
    f = {"x": X24, "s": np.full((1,), 3.0, np.float32)}
    (got,), (want,) = sess.run(None, f), ref.run(None, f)
    assert got.shape == want.shape and np.array_equal(got, want)


def test_more_than_one_element_for_a_0d_input_is_refused_naming_it(smul):
    _, sess, _ = smul
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match="input 's' is 0-d"):
        sess.run(None, {"x": X24, "s": np.ones(2, np.float32)})


@pytest.mark.parametrize("value", [2.0, 2, np.float32(2), "abc"])
def test_scalars_and_strings_as_feeds_raise_onnx_runtimes_runtime_error(smul, value):
    _, sess, ref = smul
    e = same_error(sess, ref, None, {"x": X24, "s": value})
    assert isinstance(e, RuntimeError)


def test_run_options_terminate_fails_the_run_as_onnx_runtime_does(smul):
    _, sess, ref = smul
    f = {"x": X24, "s": np.array(2, np.float32)}
    ro = ort.RunOptions()
    np.testing.assert_array_equal(sess.run(None, f, ro)[0], ref.run(None, f, ro)[0])
    ro.terminate = True
    e = same_error(sess, ref, None, f, ro)
    want = "[ONNXRuntimeError] : 1 : FAIL : Exiting due to terminate flag being set to true."
    assert str(e) == want
    with pytest.raises(TypeError):
        sess.run(None, f, "not run options")
    done, got = threading.Event(), []
    sess.run_async(None, f, lambda res, ud, err: (got.append((res, err)), done.set()), None, ro)
    assert done.wait(30) and got[0][0] == [] and "terminate flag" in got[0][1]


def test_io_binding_runs_as_in_onnx_runtime(smul):
    _, sess, ref = smul
    s = np.array(2, np.float32)
    outs = {}
    for name, session in (("gert", sess), ("ort", ref)):
        b = session.io_binding()
        b.bind_cpu_input("x", X24)
        b.bind_ortvalue_input("s", ort.OrtValue.ortvalue_from_numpy(s))
        b.bind_output("y")
        session.run_with_iobinding(b)
        ov = b.get_outputs()[0]
        outs[name] = (b.copy_outputs_to_cpu()[0], ov.numpy(), ov.shape(), ov.data_type(), type(ov).__name__)
    assert outs["gert"][2:] == outs["ort"][2:] == ([2, 4], "tensor(float)", "OrtValue")
    np.testing.assert_array_equal(outs["gert"][0], outs["ort"][0])
    np.testing.assert_array_equal(outs["gert"][1], X24 * 2)


def test_io_binding_writes_preallocated_outputs_and_ortvalues(smul):
    _, sess, _ = smul
    b = sess.io_binding()
    b.bind_cpu_input("x", X24)
    b.bind_cpu_input("s", np.array(3, np.float32))
    out = np.zeros((2, 4), np.float32)
    b.bind_output("y", "cpu", 0, np.float32, out.shape, out.ctypes.data)
    sess.run_with_iobinding(b)
    np.testing.assert_array_equal(out, X24 * 3)
    ov = ort.OrtValue.ortvalue_from_numpy(np.zeros((2, 4), np.float32))
    b.bind_ortvalue_output("y", ov)
    sess.run_with_iobinding(b)
    np.testing.assert_array_equal(ov.numpy(), X24 * 3)
    with pytest.raises(ValueError, match="element_type"):
        b.bind_output("y", "cpu", 0, None, None, out.ctypes.data)


def test_io_binding_errors_are_onnx_runtimes(smul):
    _, sess, ref = smul
    for session in (sess, ref):
        b = session.io_binding()
        with pytest.raises(RuntimeError, match="Failed to find NodeArg with name: zz in the def list"):
            b.bind_cpu_input("zz", X24)
        with pytest.raises(Exception, match="Unsupported device type: foo"):
            b.bind_output("y", "foo", 0)
        b.bind_cpu_input("x", X24)
        b.bind_cpu_input("s", np.array(2, np.float32))
        with pytest.raises(RuntimeError, match="^Error in execution: At least one output should be requested.$"):
            session.run_with_iobinding(b)
        b.bind_output("y")
        ro = ort.RunOptions()
        ro.terminate = True
        with pytest.raises(RuntimeError, match="Error in execution: Exiting due to terminate flag"):
            session.run_with_iobinding(b, ro)
    with pytest.raises(ValueError, match="IOBinding must be used with the session that created it."):
        sess.run_with_iobinding(ref.io_binding())


def test_run_with_ort_values_as_in_onnx_runtime(smul):
    _, sess, ref = smul
    f = {"x": ort.OrtValue.ortvalue_from_numpy(X24), "s": ort.OrtValue.ortvalue_from_numpy(np.array(2, np.float32))}
    got, want = sess.run_with_ort_values(None, f), ref.run_with_ort_values(None, f)
    assert [type(v).__name__ for v in got] == [type(v).__name__ for v in want] == ["OrtValue"]
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    with pytest.raises(ValueError) as g:
        sess.run_with_ort_values(None, {"x": f["x"]})
    with pytest.raises(ValueError) as w:
        ref.run_with_ort_values(None, {"x": f["x"]})
    assert str(g.value) == str(w.value)


@pytest.mark.parametrize("source", ["bytes", "path"])
def test_set_providers_loads_the_model_again_with_the_new_options(tmp_path, source):
    """From the bytes given, or from the file read again (a session made from a file keeps only its path, as ONNX
    Runtime does: issue 28)."""
    model = scalar_mul_model()
    if source == "path":
        (tmp_path / "m.onnx").write_bytes(model)
        model = str(tmp_path / "m.onnx")
    with gert.InferenceSession(model) as sess:
        first = sess.model
        sess.set_providers([("CANNExecutionProvider", {"streams": 2})])
        assert first.closed and sess.model.num_streams == 2
        assert sess.get_providers() == ["CANNExecutionProvider", "CPUExecutionProvider"]
        assert sess.get_provider_options()["CANNExecutionProvider"] == {"streams": "2"}
        np.testing.assert_array_equal(sess.run(None, {"x": X24, "s": np.array(2, np.float32)})[0], X24 * 2)
        sess.disable_fallback()
        sess.enable_fallback()


def test_end_profiling_as_in_onnx_runtime(tmp_path):
    data = scalar_mul_model()
    with gert.InferenceSession(data) as sess:
        assert sess.end_profiling() == reference(data).end_profiling() == ""
    so = gert.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = gert.InferenceSession(data, so)
    with sess:
        assert sess.get_profiling_start_time_ns() > 0
        for _ in range(3):
            sess.run(None, {"x": X24, "s": np.array(2, np.float32)})
        path = sess.end_profiling()
    import json

    assert path.startswith(str(tmp_path / "prof_")) and path.endswith(".json")
    events = json.load(open(path))
    assert [e["name"] for e in events] == ["model_run"] * 3 and all(e["ph"] == "X" for e in events)
