"""The compiled hot path (issue 23, gert/core/_hotpath.pyx): a request whose signature ran before runs in one
compiled call; its results are the Python path's, never another request's rows nor a buffer another request reuses;
it is forgotten whenever what it prepared changes (buffers grown, graphs released, a device recovered, close); and
every front door and feature that needs Python keeps working."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from gert import _cann
from gert.core.transfers import Transfers
from gert.errors import GertError
from models import scale_model

pytestmark = RUNTIME


def _x(rows: int, seed: int, cols: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


def _hot(m) -> dict:
    return m.stats()["hot_path"]


@pytest.fixture
def geared(device):
    m = gert.load(scale_model(2.0, shape=("batch", 4)), streams=1, gears={"batch": [1, 4, 8]})
    yield m
    m.close()


def test_a_seen_signature_runs_on_the_compiled_path_with_the_python_paths_results(geared):
    x = _x(3, 0)  # 3 rows padded to gear 4 and sliced back
    first = geared.run({"x": x})["y"]
    assert _hot(geared)["hits"] == 0 and _hot(geared)["prepared"] == 1
    again = [geared.run({"x": _x(3, i)})["y"] for i in range(1, 4)]
    assert _hot(geared)["hits"] == 3
    np.testing.assert_array_equal(first, x * 2)
    for i, y in enumerate(again, 1):
        assert y.shape == (3, 4)  # never the padding row
        np.testing.assert_array_equal(y, _x(3, i) * 2)
    # each result its own array: a later request does not write into an earlier result
    assert len({id(y) for y in again}) == 3 and not any(np.shares_memory(again[0], y) for y in again[1:])
    np.testing.assert_array_equal(again[0], _x(3, 1) * 2)


def test_stats_count_the_compiled_runs_as_the_python_path_does(geared):
    for i in range(5):
        geared.run({"x": _x(3, i)})
    st = geared.stats()
    assert st["hot_path"]["hits"] == 4
    assert st["streams"][0]["requests"] == 5 and st["static_hits"] == 5
    assert st["gears"]["batch=4"]["hits"] == 5
    assert st["gears"]["batch=4"]["padding_ratio"] == pytest.approx(0.25)
    # every run padded 3 rows to 4: a quarter of the stream's busy time, the compiled runs' included
    busy = sum(s["busy_seconds"] for s in st["streams"])
    assert st["gears"]["batch=4"]["padding_seconds"] == pytest.approx(0.25 * busy, rel=1e-9)
    assert st["batching"]["batches"] == 5 and st["batching"]["batch_sizes"] == {1: 5}


def test_buffers_grown_by_a_larger_gear_are_not_used_through_an_old_preparation(geared):
    """Gear 1 prepares over the stream's first buffers; gear 8 grows (frees and reallocates) them, so the
    preparation of gear 1 is forgotten, not run over freed device memory."""
    geared.run({"x": _x(1, 0)})
    geared.run({"x": _x(1, 1)})
    assert _hot(geared) == dict(_hot(geared), hits=1, prepared=1)
    geared.run({"x": _x(8, 2)})  # grows the buffers: the gear-1 preparation goes
    assert _hot(geared)["prepared"] == 1
    for i in range(3, 6):
        np.testing.assert_array_equal(geared.run({"x": _x(1, i)})["y"], _x(1, i) * 2)
    np.testing.assert_array_equal(geared.run({"x": _x(8, 9)})["y"], _x(8, 9) * 2)


def test_out_of_memory_release_forgets_the_streams_preparations(geared):
    """Worker.release (after out of device memory) frees the buffers and the other graphs."""
    geared.run({"x": _x(3, 0)})
    geared.run({"x": _x(1, 0)})  # gear 1 fits gear 4's buffers
    assert _hot(geared)["prepared"] == 2
    w = geared.pool.workers[0]
    with w.lock:
        w.release(keep=(("batch", 4),))
    assert _hot(geared)["prepared"] == 0
    for rows in (1, 3, 1, 3):
        np.testing.assert_array_equal(geared.run({"x": _x(rows, rows)})["y"], _x(rows, rows) * 2)


def test_close_forgets_everything_and_refuses(geared):
    geared.run({"x": _x(3, 0)})
    geared.run({"x": _x(3, 1)})
    geared.close()
    assert geared._hot.size == 0 and geared._hot.closed
    with pytest.raises(GertError, match="closed"):
        geared.run({"x": _x(3, 2)})


def test_features_that_need_python_take_the_python_path(geared):
    x = _x(3, 0)
    geared.run({"x": x})
    hits = _hot(geared)["hits"]
    out = {"y": np.empty((3, 4), np.float32)}
    assert geared.run({"x": x}, out=out)["y"] is out["y"]
    np.testing.assert_array_equal(out["y"], x * 2)
    np.testing.assert_array_equal(geared.run({"x": x}, timeout=5.0)["y"], x * 2)
    big = _x(20, 1)  # above the largest gear: chunks
    np.testing.assert_array_equal(geared.run({"x": big})["y"], big * 2)
    strided = _x(6, 2)[::2]  # not C-contiguous: the Python path copies it
    np.testing.assert_array_equal(geared.run({"x": strided})["y"], strided * 2)
    with pytest.raises(GertError, match="input 'x': expected dtype float32"):
        geared.run({"x": x.astype(np.float64)})
    assert _hot(geared)["hits"] == hits
    with gert.trace():
        np.testing.assert_array_equal(geared.run({"x": x})["y"], x * 2)
    assert _hot(geared)["hits"] == hits  # tracing: the Python path, traced


def test_front_doors_run_list_and_inference_session(device, tmp_path):
    model = scale_model(3.0, shape=("batch", 4))
    with gert.load(model, streams=1, gears={"batch": [1, 4, 8]}) as m:
        reqs = [{"x": _x(1, i)} for i in range(8)]
        for _ in range(2):
            outs = m.run(reqs)
            for r, o in zip(reqs, outs):
                np.testing.assert_array_equal(o["y"], r["x"] * 3)
    path = tmp_path / "scale.onnx"
    path.write_bytes(scale_model(3.0, shape=(2, 4)))  # the facade's symbolic dims are auto (tiered): a static model
    sess = gert.InferenceSession(str(path))
    try:
        for i in range(4):  # a lone caller stays on one stream: prepared by its first run, a hit after
            (y,) = sess.run(None, {"x": _x(2, i)})
            np.testing.assert_array_equal(y, _x(2, i) * 3)
        assert _hot(sess._model)["hits"] == 3 and _hot(sess._model)["prepared"] == 1
    finally:
        sess._model.close()


def test_concurrent_callers_on_two_streams_get_their_own_rows(device):
    with gert.load(scale_model(2.0, shape=("batch", 4)), streams=2, gears={"batch": [4]}) as m:
        errors = []

        def client(seed: int) -> None:
            try:
                for i in range(200):
                    x = _x(3, seed * 1000 + i)
                    y = m.run({"x": x})["y"]
                    if y.shape != (3, 4) or not np.array_equal(y, x * 2):
                        errors.append((seed, i))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=client, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        st = m.stats()
        assert st["hot_path"]["hits"] > 0
        assert (
            sum(s["requests"] for s in st["streams"]) + 0
            >= 800 - st["batching"]["requests"] + st["batching"]["requests"]
        )


@pytest.mark.hostnpu_only
def test_a_device_fault_on_the_compiled_path_fails_only_its_request(geared):
    gert.clear_faults()
    try:
        geared.run({"x": _x(3, 0)})
        gert.inject_fault("execute", after=1)
        results = []
        for i in range(4):
            try:
                np.testing.assert_array_equal(geared.run({"x": _x(3, i)})["y"], _x(3, i) * 2)
                results.append("ok")
            except gert.AclError as e:
                results.append(e.code)
    finally:
        gert.clear_faults()
    assert results == ["ok", 507015, "ok", "ok"]
    st = geared.stats()
    assert st["failed_tasks"] == 1 and st["hot_path"]["hits"] >= 3


@pytest.mark.hostnpu_only
def test_a_recovered_device_is_not_run_through_preparations_of_its_old_stream(geared):
    """A device-wide fault: the stream and Session are replaced; what the hot path prepared over the old ones is
    forgotten, and the next requests prepare again on the new stream."""
    gert.clear_faults()
    try:
        geared.run({"x": _x(3, 0)})
        geared.run({"x": _x(3, 1)})
        old_stream = geared.pool.workers[0].stream
        gert.inject_fault("sticky", after=0)
        with pytest.raises(gert.AclError):
            geared.run({"x": _x(3, 2)})
    finally:
        gert.clear_faults()
    assert geared.stats()["recoveries"] == 1
    assert geared.pool.workers[0].stream is not old_stream
    assert _hot(geared)["prepared"] == 0
    for i in range(3):
        np.testing.assert_array_equal(geared.run({"x": _x(3, i)})["y"], _x(3, i) * 2)
    assert _hot(geared)["prepared"] == 1


def test_auto_tier_promotion_runs_on_the_static_graph(device):
    """Policy auto: a size runs on the dynamic graph (never prepared), and once promoted on its static graph."""
    import time

    with gert.load(scale_model(2.0, shape=("batch", 4)), streams=1, shape_policy={"batch": "auto"}, hot_after=2) as m:
        x = _x(3, 0)
        for _ in range(2):
            np.testing.assert_array_equal(m.run({"x": x})["y"], x * 2)
        deadline = time.monotonic() + 30
        while not all(w.has((("batch", 3),)) for w in m.pool.workers):
            assert time.monotonic() < deadline, "the static graph of the hot size"
            time.sleep(0.01)
        before = m.stats()["static_hits"]
        for i in range(3):
            np.testing.assert_array_equal(m.run({"x": _x(3, i)})["y"], _x(3, i) * 2)
        assert m.stats()["static_hits"] == before + 3
        assert _hot(m)["prepared"] == 1 and _hot(m)["hits"] >= 2  # the static graph's runs: the compiled path


def test_auto_tier_counts_the_compiled_paths_runs(device):
    """A promoted size served by the compiled path is still counted by the tiers (Tiers.seen), so a size seen far
    less often does not take its place in a full static set (max_exact_graphs=1: admission compares counts)."""
    import time

    def wait(until, what):
        deadline = time.monotonic() + 30
        while not until():
            assert time.monotonic() < deadline, what
            time.sleep(0.01)

    with gert.load(
        scale_model(2.0, shape=("batch", 4)), streams=1, shape_policy={"batch": "auto"}, hot_after=2, max_exact_graphs=1
    ) as m:
        for i in range(2):
            m.run({"x": _x(3, i)})
        wait(lambda: all(w.has((("batch", 3),)) for w in m.pool.workers), "the static graph of the hot size")
        for i in range(30):
            np.testing.assert_array_equal(m.run({"x": _x(3, i)})["y"], _x(3, i) * 2)
        assert _hot(m)["hits"] >= 28
        for i in range(8):  # a second size, hot but seen 8 times against the first one's 32
            np.testing.assert_array_equal(m.run({"x": _x(5, i)})["y"], _x(5, i) * 2)
        wait(lambda: m.stats()["tiers"]["pending"] == 0 and m.stats()["tiers"]["rejections"] >= 1, "a turn-down")
        assert all(w.has((("batch", 3),)) and not w.has((("batch", 5),)) for w in m.pool.workers)
        assert m.stats()["tiers"]["evictions"] == 0


def test_exact_sizes_run_on_the_compiled_path_and_its_runs_keep_their_graph(device):
    """An exact size's graph (evictable: max_exact_graphs bounds them) is prepared for the compiled path like a
    gear's, and its runs there count as hits in the eviction order (StreamGraphs.exact): a scan of one-off sizes
    afterwards evicts other one-offs, not the size in use."""
    with gert.load(
        scale_model(3.0, shape=("batch", 4)), shape_policy={"batch": "exact"}, max_exact_graphs=2, streams=1
    ) as m:
        for i in range(10):
            np.testing.assert_array_equal(m.run({"x": _x(3, i)})["y"], _x(3, i) * 3)
        assert _hot(m)["prepared"] == 1 and _hot(m)["hits"] == 9
        for n in (5, 6, 7, 9):  # one-off sizes: each compiled, and evicted by the next
            np.testing.assert_array_equal(m.run({"x": _x(n, n)})["y"], _x(n, n) * 3)
        assert all(w.has((("batch", 3),)) for w in m.pool.workers), "the size in use was evicted as cold"
        assert not any(w.has((("batch", 5),)) for w in m.pool.workers)
        for i in range(3):
            np.testing.assert_array_equal(m.run({"x": _x(3, 20 + i)})["y"], _x(3, 20 + i) * 3)


def test_fused_call_checks_its_buffers(device):
    """gert._cann.FusedCall, the prepared call: host buffers of the wrong size are refused."""
    m = gert.load(scale_model(2.0, shape=(1, 4)), streams=1)
    try:
        m.run({"x": _x(1, 0)})
        w = m.pool.workers[0]
        entry = next(iter(w.graphs.values()))
        inb, outb = next(iter(w.in_bufs.values())), next(iter(w.out_bufs.values()))
        call = _cann.FusedCall(
            w.session,
            entry.graph_id,
            w.stream,
            [(inb.ptr, inb.nbytes, 16)],
            [],
            [(inb.ptr, 16, entry.in_meta["x"][2], (1, 4))],
            [(outb.ptr, 16, entry.out_meta[0][2], (1, 4))],
            [(outb.ptr, 16)],
        )
        y = np.empty((1, 4), np.float32)
        call([_x(1, 5)], [y])
        np.testing.assert_array_equal(y, _x(1, 5) * 2)
        with pytest.raises(ValueError, match="upload 0 holds 32 bytes, the copy is 16"):
            call([_x(2, 5)], [y])
    finally:
        m.close()


def test_run_list_merges_on_the_compiled_path_and_splits_each_requests_rows(geared):
    """run(list): the merged batch's signature (8 rows) is prepared by its first run (Rows laid one after the
    other); the next lists of that total run in one call, each request getting its own rows."""
    lists = [[{"x": _x(n, 100 * k + i)} for i, n in enumerate((1, 3, 2, 2))] for k in range(3)]
    outs = [geared.run(reqs) for reqs in lists]
    assert _hot(geared)["hits"] == 2
    for reqs, res in zip(lists, outs):
        assert [o["y"].shape for o in res] == [(1, 4), (3, 4), (2, 4), (2, 4)]
        for r, o in zip(reqs, res):
            np.testing.assert_array_equal(o["y"], r["x"] * 2)
    assert not np.shares_memory(outs[1][0]["y"], outs[2][0]["y"])
    one = _x(8, 7)  # a single request of the merged signature runs on the same preparation
    np.testing.assert_array_equal(geared.run({"x": one})["y"], one * 2)
    assert _hot(geared)["hits"] == 3
    st = geared.stats()
    assert st["streams"][0]["requests"] == 4 and st["batching"]["batches"] == 0
    mixed = [{"x": _x(2, 1)}, {"x": _x(2, 2).astype(np.float64)}]  # a bad request: the Python path's error
    with pytest.raises(GertError, match="input 'x': expected dtype float32"):
        geared.run(mixed)
    # other non-batch shapes whose rows and bytes add up to the prepared batch's (8 rows of 4): not one batch for
    # the compiled path's merge (gert/core/_merge.pyx join), so never run as one; the Python path's error
    odd = [{"x": _x(2, 1)}, {"x": _x(1, 2, 8)}, {"x": _x(1, 3, 0)}, {"x": _x(4, 4)}]
    with pytest.raises(GertError, match="input 'x'"):
        geared.run(odd)
    assert _hot(geared)["hits"] == 3


@pytest.mark.hostnpu_only
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled_path", "python_path"])
@pytest.mark.parametrize("cols, uploads", [(4, 1), (4096, 4)])
def test_run_list_gathers_small_pieces_into_one_upload_and_copies_large_ones_piece_by_piece(
    device, cols, uploads, compiled
):
    """A merged run(list): an input of at most 64 KiB is gathered on the host and uploaded in one copy
    (cbindings/_fused.pxi _GATHER_MAX: a copy costs more than a few bytes), a larger one is copied piece by piece;
    each request gets its own rows either way. The same copies on the compiled path and on the Python path (the
    binding places a merged batch's pieces for both: _push_pieces; gert/core/_merge.pyx lay_out only lists them).
    Counted by the host NPU's stream tasks: the uploads, the run and the download of the 8 merged rows (no
    padding)."""
    m = gert.load(scale_model(2.0, shape=("batch", cols)), streams=1, gears={"batch": [1, 4, 8]})
    try:
        m.engine.hot.enabled = compiled
        sizes = (1, 3, 2, 2)
        m.run([{"x": _x(n, i, cols)} for i, n in enumerate(sizes)])  # compiles the gear, prepares the signature
        reqs = [{"x": _x(n, 10 + i, cols)} for i, n in enumerate(sizes)]
        before = gert.host_counters()
        res = m.run(reqs)
        after = gert.host_counters()
        assert _hot(m)["hits"] == (1 if compiled else 0)
        assert after["tasks"] - before["tasks"] == uploads + 2
        assert after["bytes_h2d"] - before["bytes_h2d"] == 8 * cols * 4
        for r, o in zip(reqs, res):
            np.testing.assert_array_equal(o["y"], r["x"] * 2)
    finally:
        m.close()


def _prepare_on_both_streams(m, seconds=None) -> None:
    """A batch-1 request of ``m`` (two streams) prepared on the compiled path of each stream (the first held while the
    second runs it); with ``seconds`` (batch size -> run time), those run times as if measured, and the batch queue's
    verdict read again from them."""
    import time

    from gert.core.batch_queue import VERDICT_S

    q = m.pool.queue
    m.run({"x": _x(1, 0)})
    held = q.acquire(m.pool.workers)
    m.run({"x": _x(1, 1)})
    q.release(held)
    if seconds:
        for _ in range(9):
            for size, s in seconds.items():
                m.pool.run_times.add(size, s)
                m.pool.run_times.add(size, s)
        time.sleep(VERDICT_S * 1.5)


def _run_behind_busy_streams(m, xs: list, busy_s: float = 0.0) -> list:
    """Every stream of ``m`` taken; a thread per input of ``xs`` runs it and waits for a stream (each queued before
    the next starts); ``busy_s`` later the streams are given back. Each thread's output, in order."""
    import time

    q = m.pool.queue
    both = [q.acquire(m.pool.workers) for _ in m.pool.workers]
    out: list = [None] * len(xs)

    def call(i: int) -> None:
        out[i] = m.run({"x": xs[i]})["y"]

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(len(xs))]
    for i, t in enumerate(threads):
        t.start()
        _wait_for(lambda i=i: q.waiting() == i + 1, f"request {i} to wait for a stream")
    time.sleep(busy_s)
    for w in both:
        q.release(w)
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    return out


def _wait_for(cond, what: str, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


@pytest.mark.hostnpu_only
def test_close_aborts_a_request_stuck_on_the_compiled_path_without_recovering_the_device(geared):
    """close(timeout) waits for the compiled path's request in flight, then aborts its stream: the request fails
    with the abort's code, as on the Python path, and the device is not recovered (no aclrtDeviceTaskAbort)."""
    from gert.core import recovery

    x = _x(3, 0)
    geared.run({"x": x})
    before = gert.host_counters()
    gert.clear_faults()
    gert.inject_fault("hang", count=1)
    res: dict = {}

    def call() -> None:
        try:
            res["run"] = geared.run({"x": x})
        except BaseException as e:  # noqa: BLE001 - examined below
            res["run"] = e

    t = threading.Thread(target=call, daemon=True)
    t.start()
    try:
        _wait_for(lambda: gert.host_counters()["faults"]["hang"] > before["faults"]["hang"], "the run to hang")
        assert geared._hot.in_flight == 1  # on the compiled path
        closer = threading.Thread(target=geared.close, args=(0.3,), daemon=True)
        closer.start()
        closer.join(30)
        assert not closer.is_alive(), "close(timeout=0.3) waited for the stuck request"
        t.join(30)
        assert not t.is_alive()
    finally:
        gert.clear_faults()
    assert isinstance(res["run"], gert.AclError) and res["run"].code in recovery.RECOVERING_CODES, res
    assert gert.host_counters()["device_task_aborts"] == before["device_task_aborts"]
    assert geared.pool.recovery.stats.recoveries == 0


def test_sequential_requests_stay_on_one_warm_stream_and_an_overlapping_one_gets_prepared(device):
    """Two streams, one caller: it stays on the most recently freed stream, prepared once (one set of buffers), every
    later request a hit; a request that overlaps it (its stream held) runs on the other stream's Python path (the
    hot path gives back a stream it has not prepared: StreamQueue.untake), which prepares that stream too."""
    with gert.load(scale_model(2.0, shape=("batch", 4)), streams=2, gears={"batch": [4]}) as m:
        for i in range(10):
            np.testing.assert_array_equal(m.run({"x": _x(3, i)})["y"], _x(3, i) * 2)
        st = m.stats()
        assert sorted(s["requests"] for s in st["streams"]) == [0, 10], st["streams"]
        assert st["hot_path"]["prepared"] == 1 and st["hot_path"]["hits"] == 9
        held = m.pool.queue.acquire(m.pool.workers)
        try:
            for i in range(3):
                np.testing.assert_array_equal(m.run({"x": _x(3, i)})["y"], _x(3, i) * 2)
        finally:
            m.pool.queue.release(held)
        st = m.stats()
        assert sorted(s["requests"] for s in st["streams"]) == [3, 10], st["streams"]
        assert st["hot_path"]["prepared"] == 2 and st["hot_path"]["hits"] == 11


def test_a_batched_sequence_step_gathers_and_scatters_inside_the_fused_call(device, monkeypatch):
    """A step of several sequences on a static graph: its gather (zero fill of the pad rows, then each state's rows)
    and scatter copies ride in the one fused call (Session.run_fused's before / after: on the host NPU they run on
    the calling thread), instead of separate stream work and a second synchronize; results equal ONNX Runtime's."""
    from recurrent_models import HIDDEN, INPUT, gru_model, reference

    gru = gru_model()
    rng = np.random.default_rng(0)
    with gert.load(gru, streams=1, state={"h": "h_out"}, batch_dim="N", gears={"batch": [1, 4, 8]}) as model:
        seqs = [model.sequence() for _ in range(3)]  # 3 rows padded to gear 4: a zero fill first, then the copies
        refs = [{"h": np.zeros((1, 1, HIDDEN), np.float32)} for _ in seqs]
        separate = []  # device copies queued as separate stream work (gert/core/transfers.py)
        real = Transfers.enqueue
        monkeypatch.setattr(
            Transfers, "enqueue", staticmethod(lambda handle, ops: (separate.append(len(ops)), real(handle, ops)))
        )
        for step in range(4):
            feeds = [rng.standard_normal((1, 1, INPUT)).astype(np.float32) for _ in seqs]
            outs = model.step([(s, {"x": x}) for s, x in zip(seqs, feeds)])
            for x, out, ref in zip(feeds, outs, refs):
                want = reference(gru, [{"x": x}], ref, {"h": "h_out"})[0]
                np.testing.assert_allclose(out["y"], want["y"], rtol=1e-5, atol=1e-6, err_msg=f"step {step}")
        assert separate == []


def test_a_request_of_another_shape_with_the_same_bytes_is_not_run_through_the_last_signatures_run(device):
    """The compiled path checks a request against the last signature it found first (no key, no hash): a request
    of the same bytes and dtype but another shape must still find its own prepared run (its own graph and slicing),
    alternating both ways, with each result of its request's shape and values."""
    m = gert.load(scale_model(3.0, shape=("n", "m")), streams=1, gears={"n": [1, 2], "m": [32, 64]})
    try:
        wide, tall = _x(1, 0, cols=64), _x(2, 1, cols=32)  # 256 bytes each
        for x in (wide, wide, tall, tall, wide, tall, wide):
            y = m.run({"x": x})["y"]
            assert y.shape == x.shape
            np.testing.assert_array_equal(y, x * 3)
        assert _hot(m)["prepared"] == 2 and _hot(m)["hits"] == 5
    finally:
        m.close()


@pytest.mark.parametrize("streams", [1, 2])
def test_compiled_and_python_path_requests_at_once_share_the_streams_queue(device, streams):
    """Threads send requests that take the compiled path and requests that take the Python path (timeout=) to the
    same streams at once: both take and give back a stream with the queue's one implementation (FreeStreams), so
    every result is right and afterwards every stream is free exactly once, unlocked, and no request waits."""
    with gert.load(scale_model(2.0, shape=("batch", 4)), streams=streams, gears={"batch": [4]}) as m:
        for i in range(2 * streams):  # prepared on every stream
            m.run({"x": _x(3, i)})
        wrong: list = []

        def send(seed: int, **kw) -> None:
            for i in range(150):
                x = _x(3, seed * 1000 + i)
                y = m.run({"x": x}, **kw)["y"]
                if not np.array_equal(y, x * 2):
                    wrong.append((seed, i))

        threads = [threading.Thread(target=send, args=(s,), daemon=True) for s in range(3)]
        threads += [threading.Thread(target=send, args=(s,), kwargs={"timeout": 30.0}, daemon=True) for s in (3, 4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert wrong == []
        q = m.pool.queue
        assert sorted(q.slots.free, key=m.pool.workers.index) == m.pool.workers
        assert q.idle() == streams and q.waiting() == 0 and not any(w.lock.locked() for w in m.pool.workers)
        st = m.stats()
        assert sum(s["requests"] for s in st["streams"]) == 2 * streams + 5 * 150
        hits = st["hot_path"]["hits"]
        np.testing.assert_array_equal(m.run({"x": _x(3, 9)})["y"], _x(3, 9) * 2)
        assert _hot(m)["hits"] == hits + 1  # the compiled path still takes its stream from the queue


@pytest.mark.parametrize("times", ["off", "cpu", "npu"])
def test_a_request_that_finds_no_stream_free_waits_for_one_on_the_compiled_path(device, times):
    """Every stream busy: a request whose signature is prepared waits in the stream queue's order on the compiled
    path (no Python pipeline per request) and runs there once a stream is given back: with dynamic batching off, and
    with it on where the measured run times say a queued request takes no company (a row costs the same merged:
    the host NPU's own); where they say merged rows run faster, it joins the batch queue (the Python path) and
    merges. Each gets its own rows."""

    kw = {"dynamic_batching": False} if times == "off" else {}
    with gert.load(scale_model(2.0, shape=("batch", 4)), streams=2, gears={"batch": [1, 2, 4]}, **kw) as m:
        _prepare_on_both_streams(m, {"cpu": {1: 0.1, 2: 0.2, 4: 0.4}, "npu": {1: 1.0, 2: 1.0, 4: 1.01}}.get(times))
        assert _hot(m)["prepared"] == 2
        hits, misses = _hot(m)["hits"], _hot(m)["misses"]
        xs = [_x(1, 10 + i) for i in range(3)]
        for x, y in zip(xs, _run_behind_busy_streams(m, xs)):
            np.testing.assert_array_equal(y, x * 2)
        hot = _hot(m)
        if times == "npu":
            assert (hot["hits"], hot["misses"]) == (hits, misses + 3), hot
            assert max(m.stats()["batching"]["batch_sizes"]) >= 2
        else:
            assert (hot["hits"], hot["misses"]) == (hits + 3, misses), hot
            if times == "cpu":
                b = m.stats()["batching"]
                assert b["batch_sizes"] == {1: b["requests"]} and b["mean_queue_wait_ms"] > 0, b


def test_the_p99_queue_wait_of_lone_compiled_runs_counts_each_wait_not_their_mean(device):
    """Lone requests on the compiled path (no company to wait for: a row costs the same merged) are counted in C and
    flushed to the batching stats: two of a hundred wait ~80 ms for a stream, the others find one free, so the p99
    wait is ~80 ms (it was their mean per flush, ~1.6 ms), and the mean is the mean."""

    with gert.load(scale_model(2.0, shape=("batch", 4)), streams=2, gears={"batch": [1, 2, 4]}) as m:
        _prepare_on_both_streams(m, {1: 0.1, 2: 0.2, 4: 0.4})  # merging saves nothing: lone requests take no company
        before = m.stats()
        xs = [_x(1, 10 + i) for i in range(100)]
        out = _run_behind_busy_streams(m, xs[:2], busy_s=0.08)
        out += [m.run({"x": x})["y"] for x in xs[2:]]  # each finds a stream free
        for x, y in zip(xs, out):
            np.testing.assert_array_equal(y, x * 2)
        after = m.stats()
        assert after["hot_path"]["hits"] - before["hot_path"]["hits"] == 100  # all on the compiled path
        b = after["batching"]
        assert b["requests"] - before["batching"]["requests"] == 100 and b["requests"] < 200, b
        assert b["p99_queue_wait_ms"] >= 70, b
        assert b["mean_queue_wait_ms"] < 0.1 * b["p99_queue_wait_ms"], b
