"""Many graphs on many streams at once: several sessions, several streams per session, several Python threads, runs
pipelined (many in flight per stream before one synchronize). Every graph has its own weights and every run its own
inputs, so a result computed by the wrong graph, from the wrong inputs or into the wrong buffer differs from its
reference (ONNX Runtime run directly, 1 thread; the streams' cube limit is 1, so equality is bitwise)."""

import threading

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from models import (
    CLS,
    DET,
    assert_same,
    attention_model,
    load,
    mlp_model,
    ort_run,
    ppocr_model,
    scale_model,
    text_image,
)

pytestmark = RUNTIME

N_SESSIONS = 3
STREAMS_PER_SESSION = 2
ITERATIONS = 48


def run_threads(fns, timeout=120):
    """Run each fn in its own thread, all released at once; re-raise the first exception."""
    barrier = threading.Barrier(len(fns))
    errors = []

    def wrap(fn):
        try:
            barrier.wait(timeout)
            fn()
        except BaseException as e:  # noqa: BLE001 - reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(fn,), name=f"gert-test-{i}") for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), f"{t.name} did not finish in {timeout} s"
    if errors:
        raise errors[0]


class Lane:
    """One stream, the session it launches through, and the graphs loaded on it (each with its model, whether it is
    static, and how to make inputs)."""

    def __init__(self, index, session, stream):
        self.index, self.session, self.stream = index, session, stream
        self.graphs = []  # (graph_id, model, static, make_inputs)

    def add(self, model, make_inputs, parser_params=None, options=None):
        gid = load(self.session, model, self.stream, parser_params, options)
        self.graphs.append((gid, model, self.session.summary(gid).is_static, make_inputs))


@pytest.fixture(scope="module")
def lanes(device):
    sessions = [gert.Session() for _ in range(N_SESSIONS)]
    streams = []
    result = []
    for session in sessions:
        for _k in range(STREAMS_PER_SESSION):
            st = gert.Stream(device)
            st.cube_cores = 1
            streams.append(st)
            lane = Lane(len(result), session, st)
            seed = 10 * lane.index
            # per lane: a static MLP, a dynamic MLP with other weights, an attention block (symbolic seq), and a
            # scale graph whose factor names the lane
            lane.add(
                mlp_model(seed),
                lambda rng: [rng.standard_normal((4, 16)).astype(np.float32)],
                {"input_shape": "x:4,16"},
            )
            lane.add(
                mlp_model(seed + 1), lambda rng: [rng.standard_normal((int(rng.integers(1, 9)), 16)).astype(np.float32)]
            )
            lane.add(
                attention_model(seed + 2),
                lambda rng: [rng.standard_normal((2, int(rng.integers(1, 12)), 16)).astype(np.float32)],
            )
            lane.add(
                scale_model(float(lane.index + 2), ("n", 4), name=f"scale{lane.index}"),
                lambda rng: [rng.standard_normal((3, 4)).astype(np.float32)],
                options={"ge.inputShape": "x:3,4"},
            )
            result.append(lane)
    yield result
    for st in streams:
        st.destroy()
    for s in sessions:
        s.close()


def _plan(lane, iterations, salt):
    """The runs a lane makes: (graph, inputs, reference outputs), references computed up front."""
    rng = np.random.default_rng(1000 * salt + lane.index)
    plan = []
    for it in range(iterations):
        gid, model, static, make_inputs = lane.graphs[it % len(lane.graphs)]
        ins = make_inputs(rng)
        plan.append((gid, static, ins, ort_run(model, ins, 1, static=static)))
    return plan


def _launch(lane, gid, static, ins):
    """Queue one run on the lane's stream; returns the host arrays its outputs will be copied into."""
    s, st = lane.session, lane.stream
    dins = [gert.DeviceTensor.from_numpy(a, st) for a in ins]
    if static:
        summ = s.summary(gid)
        outs = [gert.DeviceTensor.empty(shape, dt) for shape, dt in zip(summ.output_shapes, summ.output_dtypes)]
        s.execute_async(gid, st, dins, outs)
    else:
        outs = s.execute_async(gid, st, dins)  # GE allocates (waits for this run, not for the others)
    return [t.to_numpy(st) for t in outs]


def _verify(lane, plan, results):
    for it, ((gid, _, _, ref), got) in enumerate(zip(plan, results)):
        assert len(got) == len(ref)
        for k, (g, r) in enumerate(zip(got, ref)):
            assert_same(g, r, f"lane {lane.index} run {it} (graph {gid}) output {k}")


def test_threads_streams_sessions_pipelined(lanes):
    """One Python thread per stream (two threads per session), all started at once; each queues all its runs, then
    synchronizes once."""
    plans = [_plan(lane, ITERATIONS, 1) for lane in lanes]
    results = [None] * len(lanes)

    def worker(i):
        lane = lanes[i]

        def fn():
            lane.stream.use_in_current_thread()
            pending = [_launch(lane, gid, static, ins) for gid, static, ins, _ in plans[i]]
            lane.stream.synchronize()
            results[i] = pending

        return fn

    run_threads([worker(i) for i in range(len(lanes))])
    for lane, plan, got in zip(lanes, plans, results):
        _verify(lane, plan, got)


def test_one_thread_interleaves_all_streams(lanes):
    """One thread round-robins launches over every stream (graphs of three sessions in flight together)."""
    plans = [_plan(lane, ITERATIONS, 2) for lane in lanes]
    results = [[] for _ in lanes]
    for it in range(ITERATIONS):
        for i, lane in enumerate(lanes):
            gid, static, ins, _ = plans[i][it]
            results[i].append(_launch(lane, gid, static, ins))
    for lane in lanes:
        lane.stream.synchronize()
    for lane, plan, got in zip(lanes, plans, results):
        _verify(lane, plan, got)


def test_threads_sharing_streams(lanes):
    """Two threads per stream (launches from several threads interleave on one stream and one session): each thread
    synchronizes its stream after each run, so results belong to the run that produced them."""
    plans = {(i, k): _plan(lanes[i], ITERATIONS // 2, 3 + k) for i in range(len(lanes)) for k in range(2)}
    results = {}

    def worker(i, k):
        lane = lanes[i]

        def fn():
            got = []
            for gid, static, ins, _ in plans[(i, k)]:
                out = _launch(lane, gid, static, ins)
                lane.stream.synchronize()
                got.append(out)
            results[(i, k)] = got

        return fn

    run_threads([worker(i, k) for i in range(len(lanes)) for k in range(2)])
    for key, plan in plans.items():
        _verify(lanes[key[0]], plan, results[key])


def test_real_models_concurrently(device):
    """PP-OCR cls (static 8x3x48x192) in two sessions on two streams and det (dynamic, small pages) on a third,
    from three threads at once."""
    cls, det = ppocr_model(CLS), ppocr_model(DET)
    sessions = [gert.Session() for _ in range(3)]
    streams = [gert.Stream(device) for _ in range(3)]
    for st in streams:
        st.cube_cores = 1
    try:
        c0 = load(sessions[0], cls, streams[0], {"input_shape": "x:8,3,48,192"})
        c1 = load(sessions[1], cls, streams[1], {"input_shape": "x:8,3,48,192"})
        d2 = load(sessions[2], det, streams[2])
        jobs = [
            (sessions[0], streams[0], c0, cls, True, [text_image(8, 48, 192, 100 + i) for i in range(3)]),
            (sessions[1], streams[1], c1, cls, True, [text_image(8, 48, 192, 200 + i) for i in range(3)]),
            (
                sessions[2],
                streams[2],
                d2,
                det,
                False,
                [text_image(1, 64, 96, 300), text_image(2, 96, 64, 301), text_image(1, 32, 160, 302)],
            ),
        ]
        refs = [[ort_run(model, [x], 1, static=static)[0] for x in xs] for _, _, _, model, static, xs in jobs]
        results = [None] * len(jobs)

        def worker(j):
            s, st, gid, _, static, xs = jobs[j]
            lane = Lane(j, s, st)

            def fn():
                got = [_launch(lane, gid, static, [x]) for x in xs]
                st.synchronize()
                results[j] = got

            return fn

        run_threads([worker(j) for j in range(len(jobs))])
        for j, (got, ref) in enumerate(zip(results, refs)):
            for it, (g, r) in enumerate(zip(got, ref)):
                assert_same(g[0], r, f"job {j} run {it}")
        assert not np.array_equal(results[0][0][0], results[1][0][0]), "the two cls streams got the same inputs"
    finally:
        for st in streams:
            st.destroy()
        for s in sessions:
            s.close()


def test_run_graph_from_threads(device):
    """RunGraph (synchronous) from four threads over two sessions, each session holding two graphs."""
    sessions = [gert.Session({"ge.aicoreNum": "1|1"}) for _ in range(2)]
    models = {(si, g): mlp_model(500 + 2 * si + g) for si in range(2) for g in range(2)}
    try:
        for (si, g), model in models.items():
            sessions[si].add_graph(g, gert.Graph.from_onnx(model))
        plans = {}
        for (si, g), model in models.items():
            rng = np.random.default_rng(si * 10 + g)
            xs = [rng.standard_normal((int(rng.integers(1, 6)), 16)).astype(np.float32) for _ in range(8)]
            plans[(si, g)] = [(x, ort_run(model, [x], 1)) for x in xs]
        results = {}

        def worker(key):
            def fn():
                results[key] = [sessions[key[0]].run_graph(key[1], [x]) for x, _ in plans[key]]

            return fn

        run_threads([worker(k) for k in plans])
        for key, plan in plans.items():
            for it, ((_, ref), got) in enumerate(zip(plan, results[key])):
                for k, (g, r) in enumerate(zip(got, ref)):
                    assert_same(g, r, f"session {key[0]} graph {key[1]} run {it} output {k}")
    finally:
        for s in sessions:
            s.close()


def test_compile_and_load_in_a_session_do_not_hold_up_its_other_graphs(device):
    """GE's Session::CompileGraph and LoadGraph take no InnerSession::build_run_mutex_ (hicann/ge
    api/session/session/inner_session.cc: only the stream executes take it), so graph B compiles while graph A of
    the same Session keeps executing. The host NPU's compute provider holds B's compile until A has run 20 times."""
    from gert._ort_provider import OrtGraphProvider
    from models import execute

    gate, entered = threading.Event(), threading.Event()
    orig = OrtGraphProvider.compile

    def held(self, model, inputs, outputs, group=0):
        if inputs[0][2] == (3, 4):  # graph B's shape
            entered.set()
            if not gate.wait(60):
                raise TimeoutError("never released")
        return orig(self, model, inputs, outputs, group)

    session, stream = gert.Session(), gert.Stream()
    OrtGraphProvider.compile = held
    try:
        a = load(session, scale_model(2.0), stream, {"input_shape": "x:2,4"})
        b = 900001
        session.add_graph(b, gert.Graph.from_onnx(scale_model(3.0), {"input_shape": "x:3,4"}))
        compiler = threading.Thread(target=session.compile_graph, args=(b,))
        compiler.start()
        assert entered.wait(30)
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        for _ in range(20):
            (y,) = execute(session, a, stream, [x])
            assert np.array_equal(y, x * 2)
        assert compiler.is_alive(), "B's compile is still held: A ran beside it"
        gate.set()
        compiler.join(30)
        session.load_graph(b, stream)
        (y,) = execute(session, b, stream, [np.ones((3, 4), np.float32)])
        assert np.array_equal(y, np.full((3, 4), 3, np.float32))
    finally:
        OrtGraphProvider.compile = orig
        gate.set()
        session.close()
        stream.destroy()
