"""The host NPU's compute provider: ONNX Runtime sessions shared per GE Session (spinning pools) or by all streams
(no spinning), one environment arena, and requests (fused static ones, dynamic-shape ones) that run inline on the
waiting thread while other threads queue work on the same stream."""

import gc
import threading
import time

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import gert
from _helpers import RUNTIME, compiled_from, run_python_result
from gert import _ort_provider
from model_helpers import check_echo, echo_input, echo_model

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # inspects the host NPU's compute provider


def _double(batch_dim):
    """y = 2x, x: [batch_dim, 4] float32 (batch_dim None: an unnamed dynamic dim, as PP-OCR cls has)."""
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch_dim, 4])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch_dim, 4])
    two = onnx.numpy_helper.from_array(np.array(2, np.float32), "two")
    m = oh.make_model(
        oh.make_graph([oh.make_node("Mul", ["x", "two"], ["y"])], "double", [x], [y], [two]),
        opset_imports=[oh.make_opsetid("", 17)],
    )
    m.ir_version = 8
    return m.SerializeToString()


def _sessions_of(model) -> dict:
    """The ONNX Runtime sessions the host provider keeps for a gert.Model's graphs: {(threads, spin): {id, ...}}."""
    import gc

    from gert._ort_provider import OrtExecutable

    gc.collect()
    groups = {w.session.session_id for w in model.pool.workers}
    out: dict = {}
    for e in gc.get_objects():
        if isinstance(e, OrtExecutable) and e.group in groups:
            for key, sess in e._sessions.items():
                out.setdefault(key, set()).add(id(sess))
    return out


def test_gears_of_all_streams_share_one_onnxruntime_session_per_share_of_the_device():
    """Gears without named dims (no overrides) of both streams run on one ONNX Runtime session per share of the
    device a run gets. LoadGraph prepares only the session of a run alone on the device (all its cube cores); the
    share's (one core beside another run) is made by the first run beside another, not before (issue 28: a process
    whose graphs never run side by side holds one session per graph)."""
    with gert.load(_double(None), streams=2, gears={"batch": [1, 2, 4, 8]}) as model:
        assert model.warmup() == 8  # 4 gears x 2 streams
        cores = model.pool.workers[0].stream.cube_cores
        sessions = _sessions_of(model)
        expected = {(cores, _ort_provider._SPIN and cores > 1)}
        assert set(sessions) == expected and all(len(ids) == 1 for ids in sessions.values()), sessions
        x = np.arange(20, dtype=np.float32).reshape(5, 4)
        np.testing.assert_array_equal(model.run({"x": x})["y"], 2 * x)


def test_the_gears_of_a_named_batch_dim_share_one_session(monkeypatch):
    """Issue 28: a named batch dim's gears are static graphs at different sizes of one model; they run on one ONNX
    Runtime session (one optimized graph, one copy of the weights), not one per size (free-dimension overrides), and
    each computes its own size right. GERT_HOST_ORT_SESSION_PER_SIZE=1 keeps a session per size."""
    for per_size, sessions in ((False, 1), (True, 2)):
        monkeypatch.setattr(_ort_provider, "_SESSION_PER_SIZE", per_size)
        with gert.load(_double("N"), streams=1, gears={"batch": [1, 2]}) as model:
            model.warmup()
            cores = model.pool.workers[0].stream.cube_cores
            assert len(_sessions_of(model)[(cores, _ort_provider._SPIN and cores > 1)]) == sessions
            for n in (1, 2):
                x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
                np.testing.assert_array_equal(model.run({"x": x})["y"], 2 * x)


@pytest.mark.parametrize("spinning", [False, True])
def test_a_run_spins_only_when_alone_on_the_device_and_asked_to(monkeypatch, spinning):
    """By default (the provider's _SPIN; GERT_HOST_ORT_SPINNING=0 turns it off) the session a run alone on its device
    takes lets its pool threads spin (busy-wait between parallel sections) and stops them when the run ends (an idle
    pool never spins against the next run); a run that shares the device never spins."""
    from gert import _ort_provider
    from gert.dtypes import ge_dtype

    monkeypatch.setattr(_ort_provider, "_SPIN", spinning)
    p = _ort_provider.OrtGraphProvider()
    f32 = ge_dtype(np.dtype(np.float32))
    exe, _, _ = p.compile(echo_model(), [("x", f32, (1, 3, 2))], [("y", f32, (-1, -1, 2)), ("s", f32, (-1,))])

    def entry(sess, key: str) -> str:
        return sess.get_session_options().get_session_config_entry(key)

    assert exe.session(1, False) is None and (1, False) not in exe._sessions  # LoadGraph: a share's is not made
    alone, shared = exe.run_session(2, True), exe.run_session(2, False)
    assert entry(shared, "session.intra_op.allow_spinning") == "0"
    if spinning:
        assert alone is not shared and entry(alone, "session.force_spinning_stop") == "1"
    else:
        assert alone is shared
    assert exe.run_session(1, True) is exe.run_session(1, False)  # one thread: nothing to spin
    assert entry(exe.run_session(1, True), "session.intra_op.allow_spinning") == "0"


@pytest.mark.parametrize("setting", [None, "0"])
def test_a_lone_run_spins_by_default_and_the_variable_turns_it_off(setting):
    """A fresh process (GERT_HOST_ORT_SPINNING unset): a run alone on its device takes the spinning session, as ONNX
    Runtime's default session spins; GERT_HOST_ORT_SPINNING=0: no session spins."""
    res = run_python_result(
        """
        import onnx, onnx.helper as oh
        from gert.hostnpu import memory_report
        x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])
        y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])
        m = oh.make_model(oh.make_graph([oh.make_node("Add", ["x", "x"], ["y"])], "double", [x], [y]),
                          opset_imports=[oh.make_opsetid("", 17)])
        m.ir_version = 8
        with gert.load(m.SerializeToString(), streams=1) as model:
            model.warmup()
            assert (model.run({"x": np.ones((2, 4), np.float32)})["y"] == 2).all()
            emit({"by_threads": [k for mm in memory_report()["models"] for k in mm["by_threads"]],
                  "cores": model.pool.workers[0].stream.cube_cores})
    """,
        env={} if setting is None else {"GERT_HOST_ORT_SPINNING": setting},
    )
    spinning = [k for k in res["by_threads"] if k.endswith(" spinning")]
    if setting == "0" or res["cores"] == 1:
        assert not spinning, res
    else:
        assert spinning == [f"{res['cores']} spinning"], res


def test_fused_runs_inline_while_other_threads_queue_on_the_same_stream():
    """A fused request runs on the waiting thread once the stream is idle; host functions that another thread
    queues meanwhile run after it, in order, and nothing is lost or run twice."""
    with gert.load(_double(None), streams=1, gears={"batch": [4]}) as model:
        model.warmup()
        stream = model.pool.workers[0].stream
        log = []
        stop = threading.Event()

        def flood():
            i = 0
            while not stop.is_set() and i < 400:
                stream.launch_host_func(lambda i=i: log.append(i))
                i += 1
            return i

        sent = []
        t = threading.Thread(target=lambda: sent.append(flood()))
        t.start()
        rng = np.random.default_rng(0)
        for _ in range(200):
            x = rng.standard_normal((4, 4)).astype(np.float32)
            np.testing.assert_array_equal(model.run({"x": x})["y"], 2 * x)
        stop.set()
        t.join(30)
        stream.synchronize(timeout=30)
        assert log == list(range(sent[0])), "host functions ran out of order, twice, or not at all"


def _session_config(sess, key: str) -> str:
    return sess.get_session_options().get_session_config_entry(key)


def test_streams_share_the_static_sessions_of_a_hot_size():
    """Policy auto compiles a hot size for every stream; those graphs run on the same ONNX Runtime sessions, so the
    second stream's compile creates none. No session the host NPU makes keeps an arena of its own (by default none,
    with GERT_HOST_ORT_ARENA=shared ONNX Runtime's environment arena, one device workspace)."""
    with gert.load(echo_model(), streams=2, gears={"batch": [1]}, hot_after=1) as model:
        model.warmup()
        x = echo_input(7, 1, 3)
        for _ in range(3):
            check_echo(model.run({"x": x}), x)
        deadline = time.monotonic() + 30
        while model.stats()["tiers"]["pending"] and time.monotonic() < deadline:
            time.sleep(0.01)
        workers = model.pool.workers
        static = [w.graphs[k] for w in workers for k in w.graphs if k != model.pool.tiers.fallback_key]
        assert len(static) == 2, "the hot size was not compiled for both streams"
        provider = gert.hostnpu.host_provider()
        digests = {
            e.digest
            for e in gc.get_objects()
            if isinstance(e, _ort_provider.OrtExecutable) and e.group in {w.session.session_id for w in workers}
        }
        items = [(k, s) for k, s in list(provider._shared.items()) if k[0] in digests]
        shared = [s for _, s in items]
        shares = [(k[1], k[3], k[4]) for k, _ in items]
        # one session per share of the device (alone; beside another run once one ran so) and kind of graph (the
        # hot size's static graphs planned, the dynamic one not), not one per stream
        cores = workers[0].stream.cube_cores
        assert (cores, _ort_provider._SPIN and cores > 1, True) in shares
        assert len(shares) == len(set(shares)), "each stream made its own session for the hot size"
        assert {s[:2] for s in shares} <= {(cores, _ort_provider._SPIN and cores > 1), (max(1, cores // 2), False)}
        # no arena (issue 28: an arena keeps its peak for the life of the process): intermediates come from the
        # heap; GERT_HOST_ORT_ARENA=shared: ONNX Runtime's environment arena, shared by every session
        if _ort_provider._ARENA == "shared":
            assert all(_session_config(s, "session.use_env_allocators") == "1" for s in shared)
        else:
            assert all(not s.get_session_options().enable_cpu_mem_arena for s in shared)
        for _ in range(2):
            check_echo(model.run({"x": x}), x)
        assert model.stats()["static_hits"] >= 2


def test_dynamic_graph_runs_on_the_calling_thread_and_keeps_other_threads_work_in_order(monkeypatch):
    """A request on a dynamic-shape graph (no timeout) runs its work on the calling thread once the stream is idle
    (host NPU inline mode: no hand-offs to the stream's worker); host functions that another thread queues on the
    same stream meanwhile run after it, in order, once each."""
    from gert._ort_provider import OrtExecutable

    ran_on = []
    real_run = OrtExecutable.run

    def recording_run(self, *args, **kwargs):
        ran_on.append(threading.get_ident())
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(OrtExecutable, "run", recording_run)
    with gert.load(_double(None), streams=1, shape_policy={"batch": "dynamic"}) as model:
        model.warmup()
        stream = model.pool.workers[0].stream
        ran_on.clear()
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        np.testing.assert_array_equal(model.run({"x": x})["y"], 2 * x)
        assert ran_on == [threading.get_ident()], "the dynamic graph's run was handed to the stream's worker"
        log, stop, sent = [], threading.Event(), []

        def flood():
            i = 0
            while not stop.is_set() and i < 400:
                stream.launch_host_func(lambda i=i: log.append(i))
                i += 1
            sent.append(i)

        t = threading.Thread(target=flood)
        t.start()
        rng = np.random.default_rng(1)
        for n in range(1, 80):
            x = rng.standard_normal((n % 7 + 1, 4)).astype(np.float32)
            np.testing.assert_array_equal(model.run({"x": x})["y"], 2 * x)
        stop.set()
        t.join(30)
        stream.synchronize(timeout=30)
        assert log == list(range(sent[0])), "host functions ran out of order, twice, or not at all"


def test_runs_on_two_streams_at_once_share_the_devices_cube_cores():
    """A device's cube cores are shared by the graph runs in progress on it (as a device's AI cores are by its
    streams' kernels): a run alone computes with its stream's limit (all the cores), two at once with half each."""

    from gert import _cann
    from model_helpers import matmul_chain_model

    cores = _cann.get_device_info(0, _cann.DEV_ATTR_CUBE_CORE_NUM)
    if cores < 2:
        pytest.skip("needs a device with 2 cube cores")
    data = matmul_chain_model(384, 8, seed=4242)  # bytes unique to this test

    def thread_counts() -> set:
        exes = [w for w in gert.hostnpu.host_executables() if compiled_from(w.executable, data)]
        return {k[0] for w in exes for k in w.replay_keys()}  # the provider replays a run keyed by its thread count

    with gert.load(data, streams=2, gears={"batch": [32]}) as model:
        model.warmup()
        x = np.random.default_rng(0).standard_normal((32, 384)).astype(np.float32)
        expected = model.run({"x": x})["y"]
        assert thread_counts() == {cores}, "a run alone on the device did not get all its cube cores"
        go = threading.Barrier(2)
        results = []

        def client():
            go.wait()
            results.extend(model.run({"x": x})["y"] for _ in range(40))

        threads = [threading.Thread(target=client) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 80 and all(np.array_equal(r, expected) for r in results)
        assert cores // 2 in thread_counts(), "runs on both streams at once each computed with all the cores"


def test_a_model_compiled_at_many_sizes_is_copied_and_hashed_once():
    """Every compile of one GE graph's model (the dynamic graph and each hot size, on every stream) hands the provider
    the same bytes object, so the model is copied out of the graph and hashed once, not per compile."""
    import gc

    from gert._ort_provider import OrtExecutable

    data = echo_model()
    with gert.load(data, streams=2, gears={"batch": [1]}, hot_after=1) as model:
        model.warmup()
        for n in (2, 3):
            x = echo_input(n, 1, n)
            check_echo(model.run({"x": x}), x)
        deadline = time.monotonic() + 30
        while model.stats()["background_compiles"] < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        gc.collect()
        groups = {w.session.session_id for w in model.pool.workers}
        exes = [o for o in gc.get_objects() if isinstance(o, OrtExecutable) and o.group in groups]
        assert len(exes) == 6  # the dynamic graph and 2 sizes, on 2 streams
        assert len({id(e.model) for e in exes}) == 1 and len({e.digest for e in exes}) == 1


def test_a_repeated_static_run_replays_its_binding_from_the_c_cache():
    """A static graph run again on the same device buffers (the executor's steady state) is replayed by the host
    NPU's C-level cache (cbindings/_provider.pxi): ONNX Runtime's native run_with_iobinding on the binding the first
    run made, no Python frame. It reads the buffers' current contents; other buffers get a binding of their own."""
    data = _double(3)  # a fixed [3, 4] graph whose bytes no other test compiles
    x1 = np.arange(12, dtype=np.float32).reshape(3, 4)
    graph = gert.Graph.from_onnx(data, {"input_shape": "x:3,4"})
    with gert.Stream() as stream, gert.Session() as session:
        session.add_graph(1, graph)
        session.compile_graph(1)
        session.load_graph(1, stream)
        (wrapped,) = [w for w in gert.hostnpu.host_executables() if compiled_from(w.executable, data)]
        x = gert.DeviceTensor.from_numpy(x1)
        y = gert.DeviceTensor.empty((3, 4), np.float32)
        for k in range(3):
            x.buffer.copy_from(x1 + k)  # new contents, same buffer: the replay reads them
            session.execute_async(1, stream, [x], [y])
            stream.synchronize()
            np.testing.assert_array_equal(y.to_numpy(), 2 * (x1 + k))
        # A run's key holds whether it ran alone on the device (ComputeShare): a thread another test left in this
        # process (a background compile) can make one of the runs a shared one, bound once more. Every run at a key
        # seen before is a replay.
        keys = len(wrapped.replay_keys())
        assert keys in (1, 2) and wrapped.replayed == 3 - keys
        y2 = gert.DeviceTensor.empty((3, 4), np.float32)
        session.execute_async(1, stream, [x], [y2])  # another output buffer: bound anew, then kept too
        stream.synchronize()
        np.testing.assert_array_equal(y2.to_numpy(), 2 * (x1 + 2))
        assert wrapped.replayed == 3 - keys and len(wrapped.replay_keys()) == keys + 1


def test_a_repeated_run_graph_of_a_static_graph_replays_its_binding_and_returns_arrays_of_its_own():
    """Session.run_graph (GE's RunGraph: host arrays in and out) on a static graph stages its tensors in the graph's
    own buffers, as GE copies them to device memory and back (cbindings/hostnpu/ge_session.cpp stage_run_graph): new
    input arrays every call still give the provider the same tensors, so the runs after the first replay the binding.
    Each call's results are fresh arrays (a later run does not change them); from two threads at once, each gets its
    own inputs' results."""
    data = _double(6)  # a fixed [6, 4] graph whose bytes no other test compiles
    graph = gert.Graph.from_onnx(data, {"input_shape": "x:6,4"})
    base = np.arange(24, dtype=np.float32).reshape(6, 4)
    with gert.Session() as session:
        session.add_graph(1, graph)
        results = [session.run_graph(1, [base + k])[0] for k in range(4)]  # a new input array each call
        (wrapped,) = [w for w in gert.hostnpu.host_executables() if compiled_from(w.executable, data)]
        assert wrapped.replayed == 3 and len(wrapped.replay_keys()) == 1
        for k, y in enumerate(results):
            np.testing.assert_array_equal(y, 2 * (base + k))
        failures = []

        def many(offset: float) -> None:
            try:
                for k in range(200):
                    x = base + offset + k
                    np.testing.assert_array_equal(session.run_graph(1, [x])[0], 2 * x)
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                failures.append(e)

        threads = [threading.Thread(target=many, args=(1000.0 * (t + 1),)) for t in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads) and failures == []


def _bound_double() -> tuple:
    """(session, IOBinding, x, y): _double(3) on ONNX Runtime's CPU provider, x [3, 4] of ones and y bound."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(_double(3), so, providers=["CPUExecutionProvider"])
    io = sess.io_binding()
    x = np.ones((3, 4), np.float32)
    y = np.zeros((3, 4), np.float32)
    io.bind_input("x", "cpu", 0, np.float32, [3, 4], x.ctypes.data)
    io.bind_output("y", "cpu", 0, np.float32, [3, 4], y.ctypes.data)
    return sess, io, x, y


def test_the_replay_calls_onnxruntimes_native_run_without_the_python_wrapper():
    """ONNX Runtime's InferenceSession.run_with_iobinding checks WebGPU graph capture at each call (Python and two
    calls into its module); the replay calls the native method it ends in, with the same binding."""
    sess, io, x, y = _bound_double()
    import inspect

    call, args, keep = _ort_provider._replay(sess, io)
    assert not inspect.isfunction(getattr(call, "__func__", call)), "the replay calls ONNX Runtime's Python wrapper"
    assert keep is io
    call(*args)
    np.testing.assert_array_equal(y, 2 * x)


def test_the_replay_passes_default_run_options_of_its_own_not_none():
    """ONNX Runtime runs a binding without run options with default ones; the replay passes a default RunOptions of
    its own instead of None, which pybind11 matches only after a failed foreign-type lookup on NoneType (an
    AttributeError built per call, about 0.7 us of a one-node replay). Same run: every option at its default."""
    import onnxruntime as ort

    sess, io, _, _ = _bound_double()
    _, args, _ = _ort_provider._replay(sess, io)
    options = args[-1]
    assert isinstance(options, ort.RunOptions)
    default = ort.RunOptions()
    for name in ("log_severity_level", "log_verbosity_level", "logid", "only_execute_path_to_fetches", "terminate"):
        assert getattr(options, name) == getattr(default, name), name
    _, again, _ = _ort_provider._replay(sess, sess.io_binding())
    assert again[-1] is not options  # each binding's own: no options object shared between threads' bindings


def _dynamic_model(value_dependent: bool) -> bytes:
    """x: [n, 4] float32 -> y: Relu(x) of the same shape, or (value_dependent) NonZero(x): [2, count of non-zeros]."""
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 4])
    if value_dependent:
        y = oh.make_tensor_value_info("y", onnx.TensorProto.INT64, [2, None])
        node = oh.make_node("NonZero", ["x"], ["y"])
    else:
        y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 4])
        node = oh.make_node("Relu", ["x"], ["y"])
    m = oh.make_model(
        oh.make_graph([node], "dyn_vd" if value_dependent else "dyn", [x], [y]), opset_imports=[oh.make_opsetid("", 17)]
    )
    m.ir_version = 8
    return m.SerializeToString()


def _run_dynamic(session, stream, array):
    (out,) = session.execute_async(1, stream, [gert.DeviceTensor.from_numpy(array)])  # GE allocates the output
    stream.synchronize()
    return out.to_numpy()


@pytest.mark.parametrize("value_dependent,predict", [(False, True), (False, False), (True, True)])
def test_dynamic_outputs_are_written_straight_into_device_memory_once_their_shape_is_known(
    monkeypatch, value_dependent, predict
):
    """A dynamic graph's output is bound to device memory at the shape shape inference tells for the run's input
    shapes (issue 41: no copy from ONNX Runtime's own buffer at the first run of a shape either, which held every
    output twice at once; asked of a graph whose copies reached _PREDICT_BYTES, here 0), or without that
    (GERT_HOST_ORT_PREDICT=0) at the shape a run at the same input shapes produced. A graph whose output shape follows
    input values (inference cannot tell it) fails ONNX Runtime's check of the bound shape once, runs again unbound
    (right result) and stops binding; the device buffer allocated for the failed attempt is freed."""
    import ctypes

    monkeypatch.setattr(_ort_provider, "_PREDICT", predict)
    monkeypatch.setattr(_ort_provider, "_PREDICT_BYTES", 0)
    copies = []
    memmove = ctypes.memmove
    monkeypatch.setattr(ctypes, "memmove", lambda dst, src, n: (copies.append(n), memmove(dst, src, n))[1])
    data = _dynamic_model(value_dependent)
    graph = gert.Graph.from_onnx(data)
    rng = np.random.default_rng(7)
    with gert.Stream() as stream, gert.Session() as session:
        session.add_graph(1, graph)
        session.compile_graph(1)
        session.load_graph(1, stream)
        (wrapped,) = [w for w in gert.hostnpu.host_executables() if compiled_from(w.executable, data)]
        import gc

        gc.collect()  # an earlier test's garbage freed now, not during the runs
        in_use = gert.host_counters()["device_memory_in_use"]
        for k in range(4):
            x = rng.standard_normal((3, 4)).astype(np.float32)
            x[x < (0.5 if k % 2 else -0.5)] = 0  # different non-zero counts at the same input shape
            got = _run_dynamic(session, stream, x)
            np.testing.assert_array_equal(got, np.stack(np.nonzero(x)) if value_dependent else np.maximum(x, 0))
            del got
        gc.collect()
        assert gert.host_counters()["device_memory_in_use"] == in_use  # nothing left of the failed attempt
        if value_dependent:
            assert copies and not wrapped.executable._learning  # every run copies: the shape is never known
        else:  # the first run only, or none when inference told its shape: the others wrote into device memory
            assert len(copies) == (0 if predict else 1)
            assert wrapped.executable.outputs_copied == len(copies)


def test_shape_inference_binds_new_shapes_of_a_graph_with_large_outputs_only(monkeypatch):
    """Issue 41: inference is asked at new input shapes only of a graph that copied an output of _PREDICT_BYTES or
    more (here 1 KB): a graph whose outputs are small copies them (cheaper than inference at every new shape), one
    with a large output copies only its first."""
    monkeypatch.setattr(_ort_provider, "_PREDICT", True)
    monkeypatch.setattr(_ort_provider, "_PREDICT_BYTES", 1024)
    data = _dynamic_model(False)
    graph = gert.Graph.from_onnx(data)
    with gert.Stream() as stream, gert.Session() as session:
        session.add_graph(1, graph)
        session.compile_graph(1)
        session.load_graph(1, stream)
        (wrapped,) = [w for w in gert.hostnpu.host_executables() if compiled_from(w.executable, data)]
        for n in (1, 2, 3):  # 16-48 bytes: copied at every new shape
            _run_dynamic(session, stream, np.ones((n, 4), np.float32))
        assert wrapped.executable.outputs_copied == 3
        for n in (100, 200, 300):  # 1.6-4.8 KB: the first copied, the next bound at their inferred shapes
            x = np.arange(n * 4, dtype=np.float32).reshape(n, 4) - 10
            np.testing.assert_array_equal(_run_dynamic(session, stream, x), np.maximum(x, 0))
        assert wrapped.executable.outputs_copied == 4


def test_sessions_use_the_environment_arena_and_follow_the_application_only_when_asked(monkeypatch):
    """Issue 28: the host NPU's sessions take their intermediates from ONNX Runtime's one environment arena (never an
    arena per session), as GE's graphs take feature memory from one pool, also for a model whose application turned
    ONNX Runtime's arena off (SessionOptions.enable_cpu_mem_arena = False, as RapidOCR does). With
    GERT_HOST_ORT_ARENA=app such a model's sessions take no arena."""
    import onnxruntime as ort

    from gert import _ort_provider

    if _ort_provider._ARENA == "none":
        pytest.skip("GERT_HOST_ORT_ARENA=none: no session takes an arena")
    no_arena = ort.SessionOptions()
    no_arena.enable_cpu_mem_arena = False
    for mode, name, want_arena in (("shared", None, True), ("shared", "A", True), ("app", "M", False)):
        monkeypatch.setattr(_ort_provider, "_ARENA", mode)
        model = _double(name)  # its own digest: new sessions
        so = None if name is None else no_arena
        with gert.InferenceSession(model, so) as s:
            x = np.ones((3, 4), np.float32)
            np.testing.assert_array_equal(s.run(None, {"x": x})[0], 2 * x)
            held = [v for k, v in _live_sessions() if k[0] == _digest(model)]
            assert held, (mode, name)
            if want_arena:
                assert all(_session_config(v, "session.use_env_allocators") == "1" for v in held), (mode, name)
            else:
                assert all(not v.get_session_options().enable_cpu_mem_arena for v in held), (mode, name)


def _digest(model: bytes) -> bytes:
    return gert.hostnpu.host_provider().digest(model)


def _live_sessions() -> list:
    return list(gert.hostnpu.host_provider()._shared.items())


def _conv_model(static: bool, channels: int = 64) -> bytes:
    """y = Conv(x, w), w channels x 8x3x3 (4608 elements at 64: a weight the shape work never reads), x [2, 8, 6, 6]
    (static) or [N, 8, H, W]."""
    w = onnx.numpy_helper.from_array(np.random.default_rng(28).random((channels, 8, 3, 3), dtype=np.float32), "w")
    dims = [2, 8, 6, 6] if static else ["N", 8, "H", "W"]
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, dims)
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    m = oh.make_model(
        oh.make_graph([oh.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv", [x], [y], [w]),
        opset_imports=[oh.make_opsetid("", 17)],
    )
    m.ir_version = 8
    return m.SerializeToString()


def test_the_model_kept_for_shape_inference_is_a_skeleton():
    """Issue 28: the provider keeps a ModelProto per model for the shape inference of each static graph it compiles:
    the model's skeleton (gert/core/skeleton.py), not a parsed copy of its weights."""
    import hashlib

    model = _conv_model(static=True)
    with gert.load(model) as m:
        m.run({"x": np.ones((2, 8, 6, 6), np.float32)})
        parsed = gert.hostnpu.memory_report()["parsed_models"]
        key = hashlib.blake2b(model, digest_size=16).hexdigest()[:12]
        assert key in parsed, parsed
        assert parsed[key] < len(model) // 10, (parsed[key], len(model))


def _live_copies(size: int) -> int:
    """Distinct bytes objects of ``size`` bytes that Python objects hold. gc tracks neither bytes nor tuples and dicts
    that hold only such atoms: they are found as referents of tracked objects, through untracked tuples and dicts."""
    gc.collect()
    found, seen = set(), set()
    todo = [ref for obj in gc.get_objects() for ref in gc.get_referents(obj) if type(ref) in (bytes, tuple, dict)]
    while todo:
        ref = todo.pop()
        if type(ref) is bytes:
            if len(ref) == size:
                found.add(id(ref))
            continue
        if id(ref) in seen or gc.is_tracked(ref):  # a tracked container is among gc's objects already
            continue
        seen.add(id(ref))
        items = list(ref.keys()) + list(ref.values()) if type(ref) is dict else list(ref)
        todo.extend(r for r in items if type(r) in (bytes, tuple, dict))
    return len(found)


@pytest.mark.parametrize("arena", [True, False])
def test_an_inference_session_keeps_no_copy_of_its_model_in_python(tmp_path, arena):
    """Issues 28 and 41: a gert.InferenceSession made from a file holds no copy of the model's bytes on the Python
    side: the host NPU's GE graph holds them (C++), lent to the provider as a buffer, and ONNX Runtime's sessions
    their own optimized model. The session kept the file's bytes too, a model whose application turned the arena off
    was kept once more by its digest (issue 28), and the provider kept a bytes copy of the graph's (issue 41)."""
    import onnxruntime as ort

    model = _conv_model(static=False, channels=64 if arena else 65)  # a size of its own: found by it
    path = tmp_path / "conv.onnx"
    path.write_bytes(model)
    size = len(model)
    del model
    so = ort.SessionOptions()
    so.enable_cpu_mem_arena = arena
    with gert.InferenceSession(str(path), so) as s:
        out = s.run(None, {"x": np.ones((1, 8, 5, 4), np.float32)})[0]
        assert out.shape == (1, 64 if arena else 65, 5, 4)
        assert _live_copies(size) == 0


def test_executables_lend_the_graphs_model_bytes_until_released(tmp_path):
    """Issue 41: every graph compiled from one model parsed from memory (sizes, streams) shares one view of the GE
    graph's bytes, not a copy each or one for all; once the model is closed the view refuses to be read (the bytes
    may be freed) instead of reading freed memory, and a model loaded again gets a valid view of its own. (A model
    parsed from a file holds no bytes between compiles: tests/test_model_file.py.)"""
    import onnxruntime as ort

    path = tmp_path / "conv.onnx"
    path.write_bytes(_conv_model(static=False, channels=66))  # a size of its own: found by it
    size = path.stat().st_size
    x = np.ones((2, 8, 5, 4), np.float32)
    m = gert.load(path.read_bytes(), shape_policy={"batch": "exact", "H": "exact", "W": "exact"})
    try:
        for b in (1, 2, 3):  # a static graph per size
            m.run({"x": np.ones((b, 8, 5, 4), np.float32)})
        exes = [w.executable for w in gert.hostnpu.host_executables() if len(w.executable.source) == size]
        assert len(exes) == 3
        assert _live_copies(size) == 0
        assert len({id(e.source) for e in exes}) == 1 and not isinstance(exes[0].source, bytes)
        assert exes[0].model == path.read_bytes()  # (a copy made when asked)
    finally:
        m.close()
    del m
    gc.collect()
    with pytest.raises(ValueError, match="gone"):
        bytes(exes[0].source)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with gert.load(str(path)) as again:
        np.testing.assert_allclose(again.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_sessions_on_the_shared_arena_plan_no_memory_pattern(monkeypatch):
    """Issue 28: a host NPU session on the environment arena takes each intermediate from it as a chunk of its own,
    not a memory pattern's one block per input shape (blocks of many sizes fragment the arena: RapidOCR x24 peaked
    at 1.37 GB with them, 0.99 GB without); a session without an arena keeps ONNX Runtime's default."""
    import onnxruntime as ort

    if _ort_provider._ARENA == "none" or _ort_provider._MEM_PATTERN:
        pytest.skip("GERT_HOST_ORT_ARENA=none or GERT_HOST_ORT_MEM_PATTERN=1")
    no_arena = ort.SessionOptions()
    no_arena.enable_cpu_mem_arena = False
    for mode, name, pattern in (("shared", "P", False), ("app", "Q", True)):
        monkeypatch.setattr(_ort_provider, "_ARENA", mode)
        model = _double(name)
        with gert.InferenceSession(model, no_arena if mode == "app" else None) as s:
            x = np.ones((3, 4), np.float32)
            np.testing.assert_array_equal(s.run(None, {"x": x})[0], 2 * x)
            held = [v for k, v in _live_sessions() if k[0] == _digest(model)]
            assert held, mode
            assert all(v.get_session_options().enable_mem_pattern is pattern for v in held), mode


def _weights_charged(used0: int, in_use0: int) -> int:
    """Device memory aclrtGetMemInfo reports in use beyond the aclrtMalloc'd buffers, since (used0, in_use0)."""
    return (gert.memory_info(0).used - used0) - (gert.host_counters()["device_memory_in_use"] - in_use0)


def test_loaded_graphs_charge_their_models_weights_once_against_device_memory():
    """Issue 28: a loaded graph's weights count against the device's memory (aclrtGetMemInfo), as a device's const
    memory does; every graph of one model (each gear, on each stream) runs on the provider's one session and its one
    copy of the weights, so the model is charged once, and released when its last graph goes."""
    model = _conv_model(static=False, channels=66)
    used0, in_use0 = gert.memory_info(0).used, gert.host_counters()["device_memory_in_use"]
    with gert.load(model, streams=2, gears={"H": [4, 8], "W": [4, 8]}) as m:
        m.warmup()
        graphs = m.stats()["graphs"]  # every gear's graph, loaded on both streams
        assert len(graphs) >= 4 and all(g["streams"] == 2 for g in graphs.values()), graphs
        out = m.run({"x": np.ones((1, 8, 4, 8), np.float32)})
        assert out["y"].shape == (1, 66, 4, 8)
        assert _weights_charged(used0, in_use0) == len(model)
        with gert.load(model) as again:  # another parse of the same bytes: the provider's same session
            again.warmup()
            assert _weights_charged(used0, in_use0) == len(model)
        assert _weights_charged(used0, in_use0) == len(model)
    assert _weights_charged(used0, in_use0) == 0


def test_load_graph_refuses_weights_beyond_the_device_memory():
    """A model whose weights do not fit the device's free memory fails at LoadGraph with GE's memory allocation error
    naming the bytes, and the device keeps working (issue 28)."""
    res = run_python_result(
        """
        import onnx, onnx.helper as oh
        w = onnx.numpy_helper.from_array(np.ones((64, 8, 3, 3), np.float32), "w")
        x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 4, 4])
        y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
        m = oh.make_model(oh.make_graph([oh.make_node("Conv", ["x", "w"], ["y"])], "conv", [x], [y], [w]),
                          opset_imports=[oh.make_opsetid("", 17)])
        m.ir_version = 8
        err = None
        try:
            gert.load(m.SerializeToString()).warmup()
        except Exception as e:  # noqa: BLE001 - what the load raised, checked by the test
            err = f"{type(e).__name__}: {e}"
        emit({"err": err, "used": gert.memory_info().used, "ok": roundtrip(n=100)})
    """,
        env={"GERT_HOST_DEVICE_MEMORY": "16K"},
    )
    assert res["err"] and "out of memory for the graph's weights" in res["err"], res
    assert res["used"] == 0 and res["ok"], res
