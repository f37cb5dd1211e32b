"""The host NPU's ONNX Runtime sessions a loaded model keeps (issue 41, serving memory): each session holds its own
optimized copy of the model's weights, so a model keeps only the sessions its runs take."""

import gc
import os
import subprocess
import sys

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import gert
from _helpers import REPO, RUNTIME, run_python_result
from gert import _cann
from gert.hostnpu import ort_provider as _ort_provider

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # inspects the host NPU's compute provider


def _scale(factor: float) -> bytes:
    """y = factor * x, x: [batch, 4] float32 (each factor its own model digest: sessions of its own)."""
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])
    k = onnx.numpy_helper.from_array(np.array(factor, np.float32), "k")
    m = oh.make_model(
        oh.make_graph([oh.make_node("Mul", ["x", "k"], ["y"])], "scale", [x], [y], [k]),
        opset_imports=[oh.make_opsetid("", 17)],
    )
    m.ir_version = 8
    return m.SerializeToString()


def _live(model: bytes) -> set:
    """(threads, spinning) of the live ONNX Runtime sessions of ``model`` in this process."""
    gc.collect()
    provider = gert.hostnpu.host_provider()
    digest = provider.digest(model)
    return {(threads, spin) for d, _size, threads, _overrides, spin in provider.sessions() if d == digest}


def _cores() -> int:
    return _cann.get_device_info(0, _cann.DEV_ATTR_CUBE_CORE_NUM)


def test_streams_of_one_core_keep_no_session_of_all_the_cores():
    """Compile validates a graph with a session of all the device's cores (what a stream without core limits runs
    alone on); streams of one core each (gert_triton's default layout on two cores) run on one-thread sessions, so
    the validation session goes when LoadGraph prepares theirs instead of staying for the process's life: PP-OCR rec's
    was ~16 MB of each Triton stub. The rows stay ONNX Runtime's."""
    if _ort_provider._device_threads() < 2 or _cores() < 2:
        pytest.skip("needs a device of 2 cube cores or more")
    model = _scale(3.25)
    with gert.load(model, streams=2, cube_cores=1, gears={"batch": [1, 2, 4]}, split_batch=True) as m:
        assert m.warmup() == 6  # 3 gears x 2 streams: every compile after the first validates on a live session
        x = np.arange(24, dtype=np.float32).reshape(6, 4)
        np.testing.assert_array_equal(m.run({"x": x})["y"], 3.25 * x)
        np.testing.assert_array_equal(m.run({"x": x[:1]})["y"], 3.25 * x[:1])
        assert _live(model) == {(1, False)}


def test_a_stream_without_limits_keeps_the_validation_session():
    """A stream without core limits runs alone on the session compile validated with: it is kept (not made twice)."""
    threads = _ort_provider._device_threads()
    if _cores() != threads:
        pytest.skip("the device's cube cores are not the host's CPUs")
    model = _scale(5.5)
    with gert.load(model, streams=1, gears={"batch": [1, 2]}) as m:
        m.warmup()
        x = np.ones((2, 4), np.float32)
        np.testing.assert_array_equal(m.run({"x": x})["y"], 5.5 * x)
        live = _live(model)  # (and a share's, made by a run that came within 50 ms of another test's run)
        assert (threads, _ort_provider._SPIN and threads > 1) in live and live <= {
            (threads, _ort_provider._SPIN and threads > 1),
            (max(1, threads // 2), False),
        }, live


def test_streams_of_one_core_validate_on_a_session_of_one_thread(monkeypatch):
    """Compile validates on the session its runs alone take: with ge.aicoreNum (gert's cube_cores) a session of that
    many threads, so no session of all the device's cores is made, only to be dropped at LoadGraph (it left ~10 MB
    more of PP-OCR rec's Triton stub heap in use, issue 41). The rows stay ONNX Runtime's."""
    if _ort_provider._device_threads() < 2 or _cores() < 2:
        pytest.skip("needs a device of 2 cube cores or more")
    made = []
    real = _ort_provider._ort_session
    monkeypatch.setattr(
        _ort_provider,
        "_ort_session",
        lambda model, **kw: made.append(kw["sess_options"].intra_op_num_threads) or real(model, **kw),
    )
    model = _scale(4.75)
    with gert.load(model, streams=2, cube_cores=1, gears={"batch": [1, 2]}, split_batch=True) as m:
        assert m.warmup() == 4
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        np.testing.assert_array_equal(m.run({"x": x})["y"], 4.75 * x)
        assert _live(model) == {(1, False)}
    assert made == [1], made


@pytest.mark.parametrize(
    "kw, planned",
    [
        ({"gears": {"batch": [1, 2, 4]}}, True),  # the pad policy's gears: static graphs only
        ({"shape_policy": {"batch": "dynamic"}}, False),  # a dynamic-shape graph: any shape may come
    ],
)
def test_a_model_of_static_graphs_plans_its_runs_memory_and_a_dynamic_one_does_not(kw, planned):
    """A model whose first graph is static runs its sessions with ONNX Runtime's memory pattern on the shared arena
    (its shapes are the few gert compiles ahead; two streams' runs at once then do not wait for each other at the
    arena's lock at every operator); a model with a dynamic-shape graph keeps it off (issue 28: over varied shapes
    the pattern's blocks fragment the arena). The values stay ONNX Runtime's either way, from two streams at once."""
    if _ort_provider._ARENA != "shared" or _ort_provider._MEM_PATTERN:
        pytest.skip("the shared arena without GERT_HOST_ORT_MEM_PATTERN (the default) decides per model")
    model = _scale(5.5 if planned else 6.5)
    with gert.load(model, streams=2, cube_cores=1, split_batch=True, **kw) as m:
        m.warmup()
        x = np.arange(16, dtype=np.float32).reshape(4, 4)
        for rows in (4, 3, 1):
            np.testing.assert_array_equal(m.run({"x": x[:rows]})["y"], np.float32(5.5 if planned else 6.5) * x[:rows])
        patterns = gert.hostnpu.host_provider().memory_patterns(gert.hostnpu.host_provider().digest(model))
        assert patterns and all(p is planned for p in patterns), patterns


def test_a_model_above_the_planned_limit_runs_its_static_graphs_on_its_one_unplanned_session(monkeypatch):
    """A model larger than _PLANNED_MAX_BYTES (PP-OCR det, rec: the planned session's second copy of the weights
    costs ~4x the model's bytes and saves no measurable time on their long operators) holds one session without the
    memory pattern for its dynamic graph and its static ones alike; a model within the limit keeps the planned one
    for its static graphs (the test above). Values stay ONNX Runtime's on both kinds of graph."""
    if _ort_provider._ARENA != "shared" or _ort_provider._MEM_PATTERN:
        pytest.skip("the shared arena without GERT_HOST_ORT_MEM_PATTERN (the default) decides per graph")
    model = _scale(8.5)
    monkeypatch.setattr(_ort_provider, "_PLANNED_MAX_BYTES", len(model) - 1)
    provider = gert.hostnpu.host_provider()
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    with gert.load(model, streams=1, shape_policy={"batch": "dynamic"}) as dynamic:
        with gert.load(model, streams=1, gears={"batch": [1, 2, 4]}) as geared:
            geared.warmup()
            for rows in (4, 3, 1):
                np.testing.assert_array_equal(geared.run({"x": x[:rows]})["y"], np.float32(8.5) * x[:rows])
                np.testing.assert_array_equal(dynamic.run({"x": x[:rows]})["y"], np.float32(8.5) * x[:rows])
            # (sessions per share of the device: a run beside another of an earlier test's takes one of fewer
            # threads; none of them planned)
            assert set(provider.memory_patterns(provider.digest(model))) == {False}


@pytest.mark.parametrize("setting, planned", [(None, True), ("0", False)])
def test_the_planned_limit_comes_from_the_variable(setting, planned):
    """A fresh process: by default (2 MiB) a small model's gear graphs take the planned session; with
    GERT_HOST_ORT_PLANNED_MAX_BYTES=0 they run unplanned."""
    code = """
        import onnx, onnx.helper as oh
        x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])
        y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])
        m = oh.make_model(oh.make_graph([oh.make_node("Add", ["x", "x"], ["y"])], "double", [x], [y]),
                          opset_imports=[oh.make_opsetid("", 17)])
        m.ir_version = 8
        data = m.SerializeToString()
        with gert.load(data, streams=1, gears={"batch": [1, 2]}) as model:
            model.warmup()
            assert (model.run({"x": np.ones((2, 4), np.float32)})["y"] == 2).all()
            p = gert.hostnpu.host_provider()
            emit({"patterns": p.memory_patterns(p.digest(data))})
    """
    res = run_python_result(code, env={} if setting is None else {"GERT_HOST_ORT_PLANNED_MAX_BYTES": setting})
    assert res["patterns"] and set(res["patterns"]) == {planned}, res


def test_a_planned_limit_that_is_not_a_number_is_named():
    """GERT_HOST_ORT_PLANNED_MAX_BYTES that is not a whole number of bytes fails `import gert` naming the variable
    and the value, not with int()'s message."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GERT_")}
    env.update(PYTHONPATH=REPO, GERT_HOST_ORT_PLANNED_MAX_BYTES="2MB")
    p = subprocess.run([sys.executable, "-c", "import gert"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "GERT_HOST_ORT_PLANNED_MAX_BYTES must be a whole number of bytes, got '2MB'" in p.stderr, p.stderr


def test_each_graph_decides_its_sessions_plan_not_the_models_first_graph():
    """The same model loaded with a dynamic-shape policy, then with the pad policy's gears (both held): the dynamic
    graph's runs take a session without ONNX Runtime's memory pattern, the gears' static graphs one with it. The
    decision is the graph's (its inputs' shape), not the first graph's the model ever had, so a model served on gears
    or hot sizes plans those runs whatever loaded it before. Values stay ONNX Runtime's on both."""
    if _ort_provider._ARENA != "shared" or _ort_provider._MEM_PATTERN:
        pytest.skip("the shared arena without GERT_HOST_ORT_MEM_PATTERN (the default) decides per graph")
    model = _scale(7.5)
    provider = gert.hostnpu.host_provider()
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    with gert.load(model, streams=1, shape_policy={"batch": "dynamic"}) as dynamic:
        for rows in (4, 3, 1):
            np.testing.assert_array_equal(dynamic.run({"x": x[:rows]})["y"], np.float32(7.5) * x[:rows])
        # (sessions per share of the device: a run beside another of an earlier test's takes one of fewer threads)
        assert set(provider.memory_patterns(provider.digest(model))) == {False}
        with gert.load(model, streams=1, gears={"batch": [1, 2, 4]}) as geared:
            geared.warmup()
            for rows in (4, 3, 1):
                np.testing.assert_array_equal(geared.run({"x": x[:rows]})["y"], np.float32(7.5) * x[:rows])
                np.testing.assert_array_equal(dynamic.run({"x": x[:rows]})["y"], np.float32(7.5) * x[:rows])
            assert set(provider.memory_patterns(provider.digest(model))) == {False, True}
