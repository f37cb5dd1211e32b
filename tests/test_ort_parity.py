"""ONNX Runtime applications run unchanged (issue 38): each behaviour runs against ONNX Runtime's own session and
gert.InferenceSession with the same test body (the ``api`` fixture: the session, options and adapter classes of
one of them), so a new ONNX Runtime version's differences show up here as failures. Behaviours only gert has (the
CPU fallback's warning, isinstance under the patch, refusing hostile external data in gert's own reader) are
tested on gert alone."""

from __future__ import annotations

import copy
import gc
import os
import subprocess
import sys
import textwrap
import threading
import types
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper
from onnxruntime.capi import onnxruntime_pybind11_state as C

import gert
from gert.ort_fallback import cpu_session

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _ort_api():
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

    return types.SimpleNamespace(
        name="ort",
        InferenceSession=InferenceSession,
        SessionOptions=ort.SessionOptions,
        RunOptions=ort.RunOptions,
        LoraAdapter=ort.LoraAdapter,
    )


def _gert_api():
    return types.SimpleNamespace(
        name="gert",
        InferenceSession=gert.InferenceSession,
        SessionOptions=gert.SessionOptions,
        RunOptions=gert.RunOptions,
        LoraAdapter=gert.LoraAdapter,
    )


@pytest.fixture(params=["ort", "gert"])
def api(request):
    return _ort_api() if request.param == "ort" else _gert_api()


def _model(nodes, inputs, outputs, inits=(), opset=13) -> onnx.ModelProto:
    return h.make_model(
        h.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=[h.make_opsetid("", opset)]
    )


def _vi(name, shape, elem=T.FLOAT):
    return h.make_tensor_value_info(name, elem, shape)


def _add_w() -> onnx.ModelProto:
    return _model(
        [h.make_node("Add", ["X", "W"], ["Y"])],
        [_vi("X", [4])],
        [_vi("Y", [4])],
        [numpy_helper.from_array(np.arange(4, dtype=np.float32), "W")],
    )


def _save_external(m: onnx.ModelProto, directory, location="m.onnx.data", name="m.onnx") -> str:
    path = os.path.join(directory, name)
    onnx.save_model(copy.deepcopy(m), path, save_as_external_data=True, location=location, size_threshold=0)
    return path


def _relocate(path: str, location: str) -> str:
    """The model file at ``path`` rewritten with every external location set to ``location`` (a new file)."""
    m = onnx.load(path, load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    out = path.replace(".onnx", "_moved.onnx")
    onnx.save(m, out)
    return out


ONES4 = {"X": np.ones(4, np.float32)}


# ---- 1. external data ----------------------------------------------------------------------------------------


def test_external_data_resolves_next_to_the_model(api, tmp_path):
    path = _save_external(_add_w(), tmp_path)
    sess = api.InferenceSession(path)
    np.testing.assert_array_equal(sess.run(None, ONES4)[0], [1, 2, 3, 4])
    if api.name == "gert":
        assert sess.model is not None  # computed by gert, not by the CPU fallback


def test_external_data_in_a_subdirectory_and_many_files(api, tmp_path):
    m = _model(
        [h.make_node("Mul", ["X", "A"], ["T"]), h.make_node("Add", ["T", "B"], ["Y"])],
        [_vi("X", [4])],
        [_vi("Y", [4])],
        [
            numpy_helper.from_array(np.full(4, 3, np.float32), "A"),
            numpy_helper.from_array(np.arange(4, dtype=np.float32), "B"),
        ],
    )
    (tmp_path / "w").mkdir()
    onnx.save_model(
        m, str(tmp_path / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0
    )
    m2 = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    for t in m2.graph.initializer:  # move each file into w/
        loc = next(e for e in t.external_data if e.key == "location")
        os.rename(tmp_path / loc.value, tmp_path / "w" / loc.value)
        loc.value = f"w/{loc.value}"
    onnx.save(m2, str(tmp_path / "m.onnx"))
    y = api.InferenceSession(str(tmp_path / "m.onnx")).run(None, ONES4)[0]
    np.testing.assert_array_equal(y, [3, 4, 5, 6])


@pytest.mark.parametrize(
    "location, message",
    [
        ("../evil.data", "escapes model directory"),
        ("sub/../../evil.data", "escapes model directory"),
        ("/etc/passwd", "Absolute path not allowed"),
    ],
)
def test_external_data_outside_the_model_directory_is_refused(api, tmp_path, location, message):
    d = tmp_path / "model"
    d.mkdir()
    (tmp_path / "evil.data").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    path = _relocate(_save_external(_add_w(), d), location)
    with pytest.raises(C.Fail, match=message):
        api.InferenceSession(path).run(None, ONES4)


def test_external_data_symlinked_out_of_the_directory_is_refused(api, tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    _save_external(_add_w(), tmp_path, location="real.data", name="outside.onnx")
    path = _save_external(_add_w(), d, location="link.data")
    os.remove(d / "link.data")
    os.symlink(tmp_path / "real.data", d / "link.data")
    with pytest.raises(C.Fail, match="escapes model directory"):
        api.InferenceSession(path).run(None, ONES4)


def test_gert_load_refuses_escaping_external_data_before_parsing_weights(tmp_path):
    """gert's own reader (the small constants of shape work) makes ONNX Runtime's check first."""
    d = tmp_path / "model"
    d.mkdir()
    (tmp_path / "evil.data").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    path = _relocate(_save_external(_add_w(), d), "../evil.data")
    with pytest.raises(gert.GertError, match="escapes model directory"):
        gert.load(path)


def test_gert_load_by_path_resolves_external_data_and_skips_the_compile_cache(tmp_path):
    path = _save_external(_add_w(), tmp_path)
    with pytest.warns(UserWarning, match="compile cache is not used"):
        model = gert.load(path, cache_dir=str(tmp_path / "cache"))
    with model:
        np.testing.assert_array_equal(model.run(ONES4)["Y"], [1, 2, 3, 4])


def _external_w_model() -> bytes:
    w = numpy_helper.from_array(np.zeros(4, np.float32), "W")
    w.ClearField("raw_data")
    w.data_location = T.EXTERNAL
    w.external_data.add(key="location", value="W_not_on_disk.bin")
    return _model([h.make_node("Add", ["X", "W"], ["Y"])], [_vi("X", [4])], [_vi("Y", [4])], [w]).SerializeToString()


def test_add_external_initializers_from_ortvalues(api):
    so = api.SessionOptions()
    wv = ort.OrtValue.ortvalue_from_numpy(np.arange(4, dtype=np.float32))
    so.add_external_initializers(["W"], [wv])
    np.testing.assert_array_equal(api.InferenceSession(_external_w_model(), so).run(None, ONES4)[0], [1, 2, 3, 4])


def test_add_external_initializers_from_files_in_memory(api):
    so = api.SessionOptions()
    blob = np.arange(4, dtype=np.float32).tobytes()
    so.add_external_initializers_from_files_in_memory(["W_not_on_disk.bin"], [blob], [len(blob)])
    np.testing.assert_array_equal(api.InferenceSession(_external_w_model(), so).run(None, ONES4)[0], [1, 2, 3, 4])


@pytest.mark.parametrize(
    "name, model, message",
    [("Q", "external", "Failed to find existing initializer"), ("W", "inline", "non-external initializer")],
)
def test_add_external_initializers_errors(api, name, model, message):
    so = api.SessionOptions()
    wv = ort.OrtValue.ortvalue_from_numpy(np.arange(4, dtype=np.float32))
    so.add_external_initializers([name], [wv])
    data = _external_w_model() if model == "external" else _add_w().SerializeToString()
    with pytest.raises(C.Fail, match=message):
        api.InferenceSession(data, so)


# ---- 2. options that change results --------------------------------------------------------------------------


def _mul_w() -> bytes:
    return _model(
        [h.make_node("Mul", ["X", "W"], ["Y"])],
        [_vi("X", [3, 2])],
        [_vi("Y", [3, 2])],
        [numpy_helper.from_array(np.ones((3, 2), np.float32), "W")],
    ).SerializeToString()


def test_add_initializer_overrides_the_models(api):
    so = api.SessionOptions()
    w2 = ort.OrtValue.ortvalue_from_numpy(np.full((3, 2), 2.0, np.float32))
    so.add_initializer("W", w2)
    y = api.InferenceSession(_mul_w(), so).run(None, {"X": np.ones((3, 2), np.float32)})[0]
    assert np.all(y == 2.0), y


def test_add_initializer_of_an_unknown_name_is_ignored(api):
    so = api.SessionOptions()
    w2 = ort.OrtValue.ortvalue_from_numpy(np.full((3, 2), 2.0, np.float32))
    so.add_initializer("not_in_model", w2)
    y = api.InferenceSession(_mul_w(), so).run(None, {"X": np.ones((3, 2), np.float32)})[0]
    assert np.all(y == 1.0), y


def test_lora_adapter_is_applied_per_run(api, tmp_path):
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "a"], ["y"])],
        "g",
        [_vi("x", [1, 2]), _vi("a", [2, 1])],
        [_vi("y", [1, 1])],
        [h.make_tensor("a", T.FLOAT, [2, 1], [0, 0])],
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 13)]).SerializeToString()
    fmt = ort.AdapterFormat()
    fmt.set_parameters({"a": ort.OrtValue.ortvalue_from_numpy(np.ones((2, 1), np.float32))})
    path = str(tmp_path / "a.onnx_adapter")
    fmt.export_adapter(path)
    adapter = api.LoraAdapter()
    adapter.Load(path)
    ro = api.RunOptions()
    ro.add_active_adapter(adapter)
    sess = api.InferenceSession(model)
    x = {"x": np.ones((1, 2), np.float32)}
    assert sess.run(None, x, ro)[0][0, 0] == 2.0
    assert sess.run(None, x)[0][0, 0] == 0.0  # without the adapter: the base weights


def test_lora_adapter_gert_cannot_read_is_refused_not_ignored(tmp_path):
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "a"], ["y"])],
        "g",
        [_vi("x", [1, 2]), _vi("a", [2, 1])],
        [_vi("y", [1, 1])],
        [h.make_tensor("a", T.FLOAT, [2, 1], [0, 0])],
    )
    fmt = ort.AdapterFormat()
    fmt.set_parameters({"a": ort.OrtValue.ortvalue_from_numpy(np.ones((2, 1), np.float32))})
    path = str(tmp_path / "a.onnx_adapter")
    fmt.export_adapter(path)
    adapter = ort.LoraAdapter()  # onnxruntime's own: its parameters are not readable
    adapter.Load(path)
    ro = gert.RunOptions()
    ro.add_active_adapter(adapter)
    sess = gert.InferenceSession(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]).SerializeToString())
    with pytest.raises(C.NotImplemented, match="gert.LoraAdapter"):
        sess.run(None, {"x": np.ones((1, 2), np.float32)}, ro)


def test_intra_op_num_threads_on_the_first_session_of_a_process(api):
    script = textwrap.dedent(f"""
        import numpy as np, onnxruntime as ort, gert
        from onnx import helper as h, TensorProto as T
        v = lambda n: h.make_tensor_value_info(n, T.FLOAT, [3, 2])
        model = h.make_model(h.make_graph([h.make_node("Mul", ["X", "X"], ["Y"])], "g", [v("X")], [v("Y")]),
                             opset_imports=[h.make_opsetid("", 13)]).SerializeToString()
        cls = gert.InferenceSession if "{api.name}" == "gert" else ort.InferenceSession
        so = (gert.SessionOptions if "{api.name}" == "gert" else ort.SessionOptions)()
        so.intra_op_num_threads = 2
        y = cls(model, so).run(None, {{"X": np.full((3, 2), 2, np.float32)}})[0]
        assert np.array_equal(y, np.full((3, 2), 4, np.float32)), y
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_run_async_finishes_when_the_session_is_dropped(api):
    model = _model([h.make_node("Mul", ["X", "X"], ["Y"])], [_vi("X", [3, 2])], [_vi("Y", [3, 2])])
    done, got = threading.Event(), {}
    sess = api.InferenceSession(model.SerializeToString())
    sess.run_async(
        ["Y"],
        {"X": np.full((3, 2), 3, np.float32)},
        lambda res, data, err: (got.update(res=res, err=err), done.set()),
        None,
    )
    del sess
    gc.collect()
    assert done.wait(30) and got["err"] == "", got
    np.testing.assert_array_equal(got["res"][0], np.full((3, 2), 9, np.float32))


def _relu(name="relu_0") -> bytes:
    return _model(
        [h.make_node("Relu", ["X"], ["Y"], name=name)], [_vi("X", [3, 2])], [_vi("Y", [3, 2])]
    ).SerializeToString()


def test_set_providers_with_an_unknown_provider_raises(api):
    sess = api.InferenceSession(_relu(), providers=["CPUExecutionProvider"])
    with pytest.raises(RuntimeError, match="Unknown Provider Type: InvalidProvider"):
        sess.set_providers(["InvalidProvider"])
    # (ONNX Runtime 1.32's session cannot run after this; gert's runs on as it was: not compared)


def test_free_dimension_override_by_denotation(api):
    x = _vi("x", ["N", 5])
    x.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    model = _model([h.make_node("Abs", ["x"], ["y"])], [x], [_vi("y", ["N", 5])]).SerializeToString()
    so = api.SessionOptions()
    so.add_free_dimension_override_by_denotation("DATA_BATCH", 3)
    sess = api.InferenceSession(model, so)
    assert sess.get_inputs()[0].shape == [3, 5]
    assert sess.run(None, {"x": -np.ones((3, 5), np.float32)})[0].sum() == 15
    with pytest.raises(C.InvalidArgument, match="Got invalid dimensions for input: x"):
        sess.run(None, {"x": np.ones((4, 5), np.float32)})


def test_load_config_from_model(api, monkeypatch):
    import json

    m = _model([h.make_node("Relu", ["X"], ["Y"])], [_vi("X", [2])], [_vi("Y", [2])])
    h.set_model_props(
        m, {"ort_config": json.dumps({"session_options": {"inter_op_num_threads": 5, "intra_op_num_threads": 2}})}
    )
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    so = api.InferenceSession(m.SerializeToString()).get_session_options()
    assert (so.inter_op_num_threads, so.intra_op_num_threads) == (5, 2)


@pytest.mark.parametrize(
    "data, cls",
    [
        (b"not an onnx model", "InvalidProtobuf"),
        (
            _model(
                [h.make_node("Add", ["X", "Z"], ["Y"])], [_vi("X", [2]), _vi("Z", [2], T.INT64)], [_vi("Y", [2])]
            ).SerializeToString(),
            "Fail",
        ),
    ],
)
def test_load_errors_are_onnx_runtimes_classes(api, data, cls):
    with pytest.raises(getattr(C, cls)):
        api.InferenceSession(data)


def test_a_missing_file_is_no_such_file(api, tmp_path):
    with pytest.raises(C.NoSuchFile):
        api.InferenceSession(str(tmp_path / "absent.onnx"))


def test_isinstance_holds_under_the_patch():
    original = ort.InferenceSession
    with gert.patch_onnxruntime(when="always"):
        sess = ort.InferenceSession(_relu())
        assert isinstance(sess, ort.InferenceSession) and isinstance(sess, original)
        assert isinstance(sess, gert.InferenceSession)
        assert type(sess).__module__ == "gert.ort_session"
        np.testing.assert_array_equal(sess.run(None, {"X": -np.ones((3, 2), np.float32)})[0], np.zeros((3, 2)))


# ---- 3. CPU fallback ----------------------------------------------------------------------------------------


def _string_identity(node: str = "id") -> bytes:
    v = lambda n: _vi(n, [2, 2], T.STRING)  # noqa: E731
    return _model(
        [h.make_node("Identity", ["input:0"], ["output:0"], name=node)], [v("input:0")], [v("output:0")]
    ).SerializeToString()


def _sequence_length() -> bytes:
    seq = h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, shape=None))
    g = h.make_graph(
        [h.make_node("SequenceLength", ["X"], ["Y"])], "g", [h.make_value_info("X", seq)], [_vi("Y", [], T.INT64)]
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 11)]).SerializeToString()


def _optional_identity() -> bytes:
    opt = h.make_optional_type_proto(h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, shape=[5])))
    g = h.make_graph(
        [h.make_node("Identity", ["opt_in"], ["opt_out"])],
        "g",
        [h.make_value_info("opt_in", opt)],
        [h.make_value_info("opt_out", opt)],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 16)]).SerializeToString()


def _no_input() -> bytes:
    c = h.make_node("Constant", [], ["y"], value=h.make_tensor("v", T.FLOAT, [2], [1.5, 2.5]))
    return h.make_model(
        h.make_graph([c], "const", [], [_vi("y", [2])]), opset_imports=[h.make_opsetid("", 17)]
    ).SerializeToString()


FALLBACK_CASES = {
    "string": (_string_identity, {"input:0": np.array([["this", "is"], ["identity", "test"]], dtype=str)}),
    "sequence": (_sequence_length, {"X": [np.zeros((2, 3), np.float32)] * 2}),
    "optional": (_optional_identity, {"opt_in": [np.arange(5, dtype=np.float32)]}),
    "no_input": (_no_input, {}),
}


@pytest.mark.parametrize("case", sorted(FALLBACK_CASES))
@pytest.mark.parametrize("providers", [None, ["CANNExecutionProvider", "CPUExecutionProvider"]])
def test_models_ge_refuses_run_on_the_cpu_provider(api, case, providers):
    make, feed = FALLBACK_CASES[case]
    sess = api.InferenceSession(make(), providers=providers)
    want = cpu_session(make(), None).run(None, feed)
    got = sess.run(None, feed)
    for a, b in zip(got, want):
        np.testing.assert_equal(a, b)
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_cpu_fallback_warns_once_naming_the_nodes():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            gert.InferenceSession(
                _string_identity("warned"), providers=["CANNExecutionProvider", "CPUExecutionProvider"]
            )
    told = [str(w.message) for w in caught if "CPUExecutionProvider" in str(w.message)]
    assert len(told) == 1 and "Identity('warned')" in told[0] and "DT_STRING" in told[0], told


def test_without_the_cpu_provider_a_model_ge_refuses_fails():
    with pytest.raises(C.Fail, match="fallback to CPU EP has been explicitly disabled") as e:
        gert.InferenceSession(_string_identity(), providers=["CANNExecutionProvider"])
    assert isinstance(e.value, gert.GertError) and "aclgrphParseONNX" in str(e.value.gert_error)


# ---- 4. the rest of the 1.32 session API ----------------------------------------------------------------------


def test_memory_infos_and_ep_devices(api):
    sess = api.InferenceSession(_relu())
    ins, outs = sess.get_input_memory_infos(), sess.get_output_memory_infos()
    assert len(ins) == 1 and len(outs) == 1
    assert ins[0].name == outs[0].name == "Cpu"
    assert [d.ep_name for d in sess.get_input_epdevices()] == ["CPUExecutionProvider"]


def test_graph_assignment_info(api):
    with pytest.raises(C.Fail, match="session.record_ep_graph_assignment_info"):
        api.InferenceSession(_relu()).get_provider_graph_assignment_info()
    so = api.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    subgraphs = api.InferenceSession(_relu(), so).get_provider_graph_assignment_info()
    assert [(n.name, n.op_type) for s in subgraphs for n in s.get_nodes()] == [("relu_0", "Relu")]


def test_run_with_ortvaluevector(api):
    sess, feeds, fetches = api.InferenceSession(_relu()), C.OrtValueVector(), C.OrtValueVector()
    x = ort.OrtValue.ortvalue_from_numpy(-np.ones((3, 2), np.float32))
    feeds.push_back(x._get_c_value())
    sess.run_with_ortvaluevector(
        ort.RunOptions(), ["X"], feeds, ["Y"], fetches, [ort.OrtDevice.make("cpu", 0)._get_c_device()]
    )
    gc.collect()
    np.testing.assert_array_equal(fetches[0].numpy(), np.zeros((3, 2), np.float32))


def test_create_ortvalue_from_shape_and_type_feeds_a_run(api):
    sess = api.InferenceSession(_relu())
    x = sess.create_ortvalue_from_shape_and_type([3, 2], np.float32, "cpu")
    x.update_inplace(np.full((3, 2), 2, np.float32))
    np.testing.assert_array_equal(sess.run(None, {"X": x})[0], np.full((3, 2), 2, np.float32))


def test_what_gert_cannot_honour_is_not_implemented():
    sess = gert.InferenceSession(_relu())
    for call in (sess.get_tuning_results, lambda: sess.set_ep_dynamic_options({"k": "v"})):
        with pytest.raises(C.NotImplemented):
            call()


def test_every_public_method_of_onnx_runtimes_session_exists():
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

    missing = [m for m in dir(InferenceSession) if not m.startswith("_") and not hasattr(gert.InferenceSession, m)]
    assert missing == []


_MEMORY_SCRIPT = textwrap.dedent("""
    import resource, sys, numpy as np, onnxruntime as ort, gert
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cls = gert.InferenceSession if sys.argv[2] == "gert" else InferenceSession
    y = cls(sys.argv[1]).run(None, {"X": np.zeros(1, np.float32)})[0]
    assert y[0] == int(sys.argv[3]), y
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
""")


def test_external_weights_are_not_read_twice(tmp_path):
    """A model's external weights cost gert what they cost ONNX Runtime (peak RSS of a process that loads and runs
    it once): gert reads none of them itself."""
    n = 16 * 1024 * 1024  # 64 MB of float32
    m = _model(
        [h.make_node("ReduceSum", ["W"], ["S"], keepdims=0), h.make_node("Add", ["X", "S"], ["Y"])],
        [_vi("X", [1])],
        [_vi("Y", [1])],
        [numpy_helper.from_array(np.ones(n, np.float32), "W")],
    )
    path = _save_external(m, tmp_path)
    grown = {}
    for side in ("ort", "gert"):
        out = subprocess.run(
            [sys.executable, "-c", _MEMORY_SCRIPT, path, side, str(n)], capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-2000:]
        grown[side] = int(out.stdout.split()[-1])
    assert grown["gert"] < grown["ort"] + 0.5 * 4 * n, grown  # a second copy would add 4n bytes


def test_optimized_model_filepath_writes_a_model_that_computes_the_same(api, tmp_path):
    """ONNX Runtime writes its optimized graph there; gert the ONNX model GE compiled."""
    so = api.SessionOptions()
    out = tmp_path / "optimized.onnx"
    so.optimized_model_filepath = str(out)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    y = api.InferenceSession(_mul_w(), so).run(None, {"X": x})[0]
    written = cpu_session(out.read_bytes(), None).run(None, {"X": x})[0]
    np.testing.assert_array_equal(written, y)


def test_optimized_model_filepath_holds_the_session_initializers(tmp_path):
    """gert's written model is the one GE compiled: add_initializer's value in it. (ONNX Runtime 1.32 segfaults on
    this combination of options, so this test is gert's alone.)"""
    so = gert.SessionOptions()
    out = tmp_path / "optimized.onnx"
    so.optimized_model_filepath = str(out)
    so.add_initializer("W", ort.OrtValue.ortvalue_from_numpy(np.full((3, 2), 3.0, np.float32)))
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    y = gert.InferenceSession(_mul_w(), so).run(None, {"X": x})[0]
    np.testing.assert_array_equal(y, x * 3.0)
    np.testing.assert_array_equal(cpu_session(out.read_bytes(), None).run(None, {"X": x})[0], y)


def test_optimized_model_filepath_in_ort_format_is_refused_clearly(tmp_path):
    so = gert.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "m.ort")
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail, match="ORT format"):
        gert.InferenceSession(_mul_w(), so)
