"""In-process dynamic batching (issue 27): concurrent run() / submit() / run_async() callers batched against the
compiled gears by the Engine's one batcher (gert/core/engine.py, gert/core/dynamic.py, gert/dispatch.py).

Batches are made to happen, never hoped for: the test holds the model's only stream (it takes it from the stream
queue, as a long request would), queues N requests, waits until the queue holds them, and gives the stream back;
the request that waited longest takes the others along. Every result is compared with ONNX Runtime run on that
request alone.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gert
from _helpers import RUNTIME
from gert.core.dynamic import BatchingConfig, wait_samples
from test_pipeline_property import FAMILIES, assert_alone, load

pytestmark = RUNTIME
WAIT = 30.0  # seconds: the bound for a thread to get where the test expects (never reached when things work)
AFFINE = FAMILIES["named"][0]


def _x(rng, rows: int = 1, width: int = 4) -> dict:
    return {"x": rng.integers(-50, 50, (rows, width)).astype(np.float32)}


def _until(cond, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


class Held:
    """Every stream of the model, taken from its stream queue (as long requests hold them) until release()."""

    def __init__(self, m: gert.Model):
        self.m = m
        self.queue = m.pool.queue
        self.workers = [self.queue.acquire(m.pool.workers) for _ in m.pool.workers]

    def queued(self) -> int:
        return self.m.stats()["batching"]["queued"]

    def release(self) -> None:
        for w in self.workers:
            self.queue.release(w)


def _in_threads(fn, items: list, held: Held | None = None, before: int = 0) -> tuple:
    """fn(item) in one thread per item, started in order (each queued before the next starts when ``held``);
    (results or errors in the items' order, the threads)."""
    out: list = [None] * len(items)

    def one(i, item):
        try:
            out[i] = fn(item)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            out[i] = e

    threads = []
    for i, item in enumerate(items):
        t = threading.Thread(target=one, args=(i, item), daemon=True)
        t.start()
        threads.append(t)
        if held is not None:
            _until(lambda i=i: held.queued() == before + i + 1, f"request {i} did not queue")
    return out, threads


def run_queued(m: gert.Model, model: bytes, reqs: list) -> list:
    """``reqs`` from one thread each, queued one by one behind the held stream and let go together (so batched as
    far as they fit); each result checked against ONNX Runtime on its request alone. The results."""
    held = Held(m)
    results, threads = _in_threads(m.run, reqs, held)
    held.release()
    _join(threads)
    for i, (r, got) in enumerate(zip(reqs, results)):
        assert_alone(model, r, got, f"request {i}")
    return results


def _join(threads: list) -> None:
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive(), "a caller is still waiting"


def _batching(m: gert.Model) -> dict:
    return m.stats()["batching"]


# ---- the stream queue's batch hand-off (gert/dispatch.py) ------------------------------------------------------------


class _Item:
    """A queued request as the stream queue sees it: a name and the wake-up its thread sleeps on."""

    def __init__(self, name: str):
        from gert.core.wakeup import new_wakeup

        self.name, self.wakeup = name, new_wakeup()

    def __repr__(self) -> str:
        return self.name


def test_stream_queue_hands_a_freed_stream_to_the_oldest_request_with_its_company():
    """Queued in turn: a (key K, 2 rows), p (plain), b (K, 1 row), c (key C), d (K, 2 rows: a + b + d would be 5
    rows, over the limit of 4), e (K, may not run on this stream). The freed stream goes to a with b along; b sleeps
    on until its result is delivered (one wake per request); then the stream goes to p alone, to c alone; close()
    fails d and e."""
    from gert.dispatch import StreamQueue

    s, other = object(), object()
    q = StreamQueue([s])
    lone = _Item("lone")
    assert q.acquire_batch([s], lone, ("K",), 1, 4) == (s, [lone])  # a free stream: taken at once, alone
    got: dict = {}
    items = {n: _Item(n) for n in "abcde"}

    def call(name, fn):
        try:
            got[name] = fn()
        except gert.GertError as e:
            got[name] = e

    def wait(name, fn):
        t = threading.Thread(target=call, args=(name, fn), daemon=True)
        t.start()
        _until(lambda: q.waiting() == len(threads) + 1, f"{name} did not queue")
        threads.append(t)
        return t

    threads: list = []
    wait("a", lambda: q.acquire_batch([s], items["a"], ("K",), 2, 4))
    wait("p", lambda: q.acquire([s]))
    b = wait("b", lambda: q.acquire_batch([s], items["b"], ("K",), 1, 4))
    wait("c", lambda: q.acquire_batch([s], items["c"], ("C",), 1, 4))
    wait("d", lambda: q.acquire_batch([s], items["d"], ("K",), 2, 4))
    wait("e", lambda: q.acquire_batch([other], items["e"], ("K",), 1, 4))
    q.release(s)
    _until(lambda: "a" in got, "a's batch was not handed over")
    assert got["a"] == (s, [items["a"], items["b"]]) and q.waiting() == 4
    b.join(0.2)
    assert "b" not in got and b.is_alive()  # taken along: asleep until its leader delivers its result
    items["b"].wakeup.release()  # the delivery (gert.core.dynamic.Pending)
    _until(lambda: "b" in got, "b was not woken by its result")
    assert got["b"] == (None, [])
    q.release(s)  # the plain request next, alone
    _until(lambda: "p" in got, "p did not get the stream")
    assert got["p"] is s
    q.release(s)
    _until(lambda: "c" in got, "c did not get the stream")
    assert got["c"] == (s, [items["c"]])
    q.close()
    _join(threads)
    assert all(isinstance(got[n], gert.GertError) for n in "de"), got


def test_a_leaders_fit_leaves_the_rest_queued_to_lead_the_next_batch_and_a_failing_fit_takes_all():
    """With ``fit`` (gear_pieces.first_batch on one stream) the leader takes as many queued requests as it says, in
    arrival order; the others keep their place and the oldest of them leads the next batch. A fit that raises while
    the stream is handed over (under the queue's lock) takes everything rather than strand the stream."""
    from gert.dispatch import StreamQueue

    s = object()
    q = StreamQueue([s])
    assert q.acquire_batch([s], _Item("lone"), ("K",), 1, 8)[0] is s
    got: dict = {}
    items = {n: _Item(n) for n in "abcdefg"}
    for item in items.values():
        item.rows = 1
    threads: list = []

    def broken(rows: list) -> int:
        raise RuntimeError("dictionary changed size during iteration")

    def wait(name, fit):
        def call():
            got[name] = q.acquire_batch([s], items[name], ("K",), 1, 8, fit)

        queued = q.waiting()
        t = threading.Thread(target=call, daemon=True)
        t.start()
        threads.append(t)
        _until(lambda: q.waiting() == queued + 1, f"{name} did not queue")

    for name in "abcd":
        wait(name, lambda rows: 2)
    q.release(s)
    _until(lambda: "a" in got, "a's batch was not handed over")
    assert got["a"] == (s, [items["a"], items["b"]]) and q.waiting() == 2  # c and d keep their place
    items["b"].wakeup.release()
    q.release(s)
    _until(lambda: "c" in got, "c did not lead the next batch")
    assert got["c"] == (s, [items["c"], items["d"]]) and q.waiting() == 0
    items["d"].wakeup.release()
    for name in "efg":
        wait(name, broken)
    q.release(s)
    _until(lambda: "e" in got, "the stream was stranded by a failing fit")
    assert got["e"] == (s, [items["e"], items["f"], items["g"]])
    for name in "fg":
        items[name].wakeup.release()
    q.close()
    _join(threads)


def test_a_batch_gives_its_stream_back_before_its_callers_are_woken():
    """The leader delivers its members' results after the stream is given back (StreamPool.dispatch_batch calls the
    delivery ``lead`` returns once it released the stream): the next batch does not wait for this one's callers to
    be woken."""
    from gert.core.dynamic import Pending

    with gert.load(AFFINE, streams=1) as m:
        pool = m.engine.pool
        seen: dict = {}

        def lead(group, run):
            seen["during"] = pool.queue.idle()

            def deliver():
                seen["delivering"] = pool.queue.idle()
                for p in group:
                    p.set_result({"done": True})

            return deliver

        p = Pending({}, {}, 1, ("K",), None, None, 8)
        assert pool.dispatch_batch(p, lead, lambda group: (None, None)) == {"done": True}
        assert seen == {"during": 0, "delivering": 1}, seen


# ---- batches form when a stream comes free ------------------------------------------------------------------------


def test_queued_requests_form_one_batch_when_the_stream_comes_free():
    rng = np.random.default_rng(0)
    reqs = [_x(rng) for _ in range(5)]
    with gert.load(AFFINE) as m:
        run_queued(m, AFFINE, reqs)
        b = _batching(m)
        assert b["batch_sizes"] == {5: 1} and b["batches"] == 1 and b["requests"] == 5, b
        assert b["gears"] == {"batch=8": {"batches": 1, "requests": 5, "mean_batch_size": 5.0}}, b
        assert sum(s["requests"] for s in m.stats()["streams"]) == 1  # one graph run for the five
        assert b["mean_batch_size"] == 5.0 and b["p99_batch_size"] == 5
        shown = str(m.stats())
        assert "dynamic batching" in shown and "dynamic batches per gear" in shown and "batch=8" in shown


def test_out_arrays_of_batched_requests_are_filled():
    rng = np.random.default_rng(14)
    reqs = [_x(rng) for _ in range(3)]
    outs = [{"y": np.empty((1, 4), np.float32)} for _ in reqs]
    with gert.load(AFFINE) as m:
        held = Held(m)
        results, threads = _in_threads(lambda i: m.run(reqs[i], out=outs[i]), list(range(3)), held)
        held.release()
        _join(threads)
        for r, got, out in zip(reqs, results, outs):
            assert got["y"] is out["y"]
            assert_alone(AFFINE, r, got, "out=")
        assert _batching(m)["batch_sizes"] == {3: 1}


def test_many_threads_on_two_streams_each_get_their_own_results():
    """Not held: 12 threads x 6 requests of 1..3 rows over two streams, batches forming as they may."""
    model, kwargs, make = FAMILIES["scalar_empty"]
    rng = np.random.default_rng(15)
    work = [[make(rng, int(rng.integers(1, 4))) for _ in range(6)] for _ in range(12)]
    with gert.load(model, streams=2, gears={"batch": [1, 2, 4, 8]}, **kwargs) as m:
        results, threads = _in_threads(lambda reqs: [m.run(r) for r in reqs], work)
        _join(threads)
        for t, (reqs, got) in enumerate(zip(work, results)):
            assert not isinstance(got, BaseException), got
            for i, (r, g) in enumerate(zip(reqs, got)):
                assert_alone(model, r, g, f"thread {t} request {i}")
        assert _batching(m)["requests"] == 72


def test_a_lone_request_runs_at_once_alone():
    rng = np.random.default_rng(1)
    with gert.load(AFFINE) as m:
        r = _x(rng, 3)
        assert_alone(AFFINE, r, m.run(r), "lone")
        b = _batching(m)
        assert b["enabled"] and b["batch_sizes"] == {1: 1} and b["queued"] == 0, b


def test_a_batch_takes_at_most_the_largest_gear_and_only_its_own_key():
    """Gears [1, 2, 4]: six one-row requests of one shape and one of another, queued in turn: batches of 4 and 2
    of the first shape (arrival order), the other shape alone."""
    rng = np.random.default_rng(2)
    wide = FAMILIES["scalar_empty"][0]
    reqs = [
        {
            "x": rng.integers(-9, 9, (1, 3)).astype(np.float32),
            "k": np.array(k, np.float32),
            "e": np.zeros((1, 0), np.float32),
        }
        for k in (3, 3, 3, 5, 3, 3, 3)
    ]  # k: no batch axis, part of the key
    with gert.load(wide, batch_dim="N", gears={"batch": [1, 2, 4]}) as m:
        run_queued(m, wide, reqs)
        b = _batching(m)
        assert b["batch_sizes"] == {4: 1, 2: 1, 1: 1} and b["max_batch"] == 4, b


def test_dynamic_batching_false_runs_each_request_alone():
    rng = np.random.default_rng(3)
    reqs = [_x(rng) for _ in range(3)]
    with gert.load(AFFINE, streams=1, dynamic_batching=False) as m:
        held = Held(m)
        results, threads = _in_threads(m.run, reqs, None)
        _until(lambda: held.queued() == 3, "the requests did not queue")
        held.release()
        _join(threads)
        for r, got in zip(reqs, results):
            assert_alone(AFFINE, r, got, "off")
        assert m.stats()["streams"][0]["requests"] == 3
        b = _batching(m)
        assert not b["enabled"] and b["batches"] == 0, b
        assert "dynamic batching" in str(m.stats()) and "off" in str(m.stats())


def test_models_whose_outputs_do_not_carry_the_batch_are_never_merged():
    """plan.unsplit (a max over the batch): each request runs alone, its own max."""
    model, _, make = FAMILIES["reduce"]
    rng = np.random.default_rng(4)
    reqs = [make(rng, n) for n in (1, 2, 1)]
    with gert.load(model, streams=1) as m:
        assert m.plan.unsplit and not _batching(m)["enabled"]
        held = Held(m)
        results, threads = _in_threads(m.run, reqs, None)
        _until(lambda: held.queued() == 3, "the requests did not queue")
        held.release()
        _join(threads)
        for r, got in zip(reqs, results):
            assert_alone(model, r, got, "reduce")
        assert m.stats()["streams"][0]["requests"] == 3


def test_value_dependent_models_are_never_merged():
    """NonZero's count depends on the values: merged, one request's output would take the batch's size."""
    from onnx import helper

    from models import make_model, vi

    model = make_model(
        [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Relu", ["x"], ["y"])],
        [vi("x", np.float32, ["batch", 4])],
        [vi("nz", np.int64, [2, "k"]), vi("y", np.float32, ["batch", 4])],
        name="nonzero",
    )
    try:
        m = gert.load(model, shape_policy={"batch": "exact"})
    except gert.GertError as e:
        pytest.skip(f"gert refuses this model: {e}")
    with m:
        assert m.value_dependent and not _batching(m)["enabled"]


# ---- a bad request fails alone; a device fault fails only its request ----------------------------------------------


def test_a_bad_request_fails_alone_before_the_batch_runs():
    rng = np.random.default_rng(5)
    good = [_x(rng) for _ in range(3)]
    with gert.load(AFFINE) as m:
        held = Held(m)
        results, threads = _in_threads(m.run, good, held)
        with pytest.raises(gert.GertError, match="input 'x': expected dtype float32, got float64"):
            m.run({"x": np.zeros((1, 4))})  # refused at once: it never queued
        with pytest.raises(gert.GertError, match="input 'x': expected axis 1 of size 4, got 5"):
            m.run({"x": np.zeros((1, 5), np.float32)})
        assert held.queued() == 3
        held.release()
        _join(threads)
        for r, got in zip(good, results):
            assert_alone(AFFINE, r, got, "good")
        assert _batching(m)["batch_sizes"] == {3: 1}


def test_requests_with_other_timeouts_share_a_batch_run_with_the_smallest():
    """The timeout is not part of the batch key (gert/core/batch_queue.py): queued requests with timeouts of 60 s,
    none and 30 s form one batch, which runs with the smallest of them (30 s: the stats say one batch of 3)."""
    rng = np.random.default_rng(16)
    reqs = [_x(rng) for _ in range(3)]
    timeouts = [60.0, None, 30.0]
    with gert.load(AFFINE) as m:
        held = Held(m)
        results, threads = _in_threads(lambda i: m.run(reqs[i], timeout=timeouts[i]), [0, 1, 2], held)
        held.release()
        _join(threads)
        for r, got in zip(reqs, results):
            assert_alone(AFFINE, r, got, "timeouts")
        assert _batching(m)["batch_sizes"] == {3: 1}, _batching(m)


@pytest.mark.hostnpu_only
def test_a_merged_batch_waits_with_its_members_smallest_timeout():
    """A hung run of a batch of requests with timeouts of 60 s and 0.2 s ends at 0.2 s: every member gets the
    RequestTimeout that names it (a timeout is not retried member by member), and the stream serves again."""
    rng = np.random.default_rng(17)
    reqs = [_x(rng) for _ in range(2)]
    timeouts = [60.0, 0.2]
    with gert.load(AFFINE) as m:
        m.warmup()
        held = Held(m)
        results, threads = _in_threads(lambda i: m.run(reqs[i], timeout=timeouts[i]), [0, 1], held)
        gert.inject_fault("hang", duration_ms=0)  # until aborted
        try:
            t0 = time.monotonic()
            held.release()
            _join(threads)
        finally:
            gert.clear_faults()
        assert time.monotonic() - t0 < WAIT
        for got in results:
            assert isinstance(got, gert.RequestTimeout) and "0.2 s" in str(got), got
        assert _batching(m)["batch_sizes"] == {2: 1}
        assert_alone(AFFINE, reqs[0], m.run(reqs[0]), "the model keeps serving")


@pytest.mark.hostnpu_only
def test_a_device_fault_in_a_merged_batch_fails_only_the_request_that_fails_alone():
    """The merged run fails (an injected AI Core fault, 507015) and so does the first request's own retry: the
    batch is retried request by request, so only that request fails; the others get their own results."""
    rng = np.random.default_rng(6)
    reqs = [_x(rng) for _ in range(4)]
    with gert.load(AFFINE) as m:
        m.warmup()
        held = Held(m)
        results, threads = _in_threads(m.run, reqs, held)
        gert.inject_fault("execute", count=2)  # the batch's run, then request 0's retry
        try:
            held.release()
            _join(threads)
        finally:
            gert.clear_faults()
        assert isinstance(results[0], gert.AclError) and results[0].code == 507015, results[0]
        for i in (1, 2, 3):
            assert_alone(AFFINE, reqs[i], results[i], f"request {i}")
        b = _batching(m)
        assert b["retried_batches"] == 1 and b["batch_sizes"] == {4: 1}, b
        assert_alone(AFFINE, reqs[0], m.run(reqs[0]), "the model keeps serving")


@pytest.mark.hostnpu_only
def test_a_device_fault_in_run_list_fails_only_the_request_that_fails_alone():
    """run(list) / gert_triton's execute (Engine.run_many): a group merged by the caller whose run faults is
    retried request by request too."""
    rng = np.random.default_rng(13)
    reqs = [_x(rng) for _ in range(3)]
    with gert.load(AFFINE) as m:
        m.warmup()
        gert.inject_fault("execute", count=2)  # the group's run, then request 0's retry
        try:
            results = m.engine.run_many(reqs, return_exceptions=True)
        finally:
            gert.clear_faults()
        assert isinstance(results[0], gert.AclError) and results[0].code == 507015, results[0]
        for i in (1, 2):
            assert_alone(AFFINE, reqs[i], results[i], f"request {i}")


# ---- futures, asyncio, close() ------------------------------------------------------------------------------------


def test_submitted_futures_are_batched_each_resolving_to_its_own_request_and_cancel_before_start():
    """Gears [1, 2, 4]: submit()'s pool runs 5 at once (4 + one per stream); the 6th and 7th wait in the pool, and
    cancelling the 7th there means it never runs."""
    rng = np.random.default_rng(7)
    reqs = [_x(rng) for _ in range(7)]
    with gert.load(AFFINE, streams=1, gears={"batch": [1, 2, 4]}) as m:
        held = Held(m)
        futures = [m.submit(r) for r in reqs]
        _until(lambda: held.queued() == 5, "the pool's requests did not queue")
        assert not futures[0].cancel()  # running (queued for a stream): as concurrent.futures, not cancellable
        assert futures[6].cancel() and futures[6].cancelled()
        held.release()
        for i in range(6):
            assert_alone(AFFINE, reqs[i], futures[i].result(WAIT), f"future {i}")
        b = _batching(m)
        assert b["requests"] == 6 and sorted(b["batch_sizes"]) in ([1, 4], [2, 4]), b


def test_run_async_callers_share_a_batch():
    rng = np.random.default_rng(8)
    reqs = [_x(rng) for _ in range(3)]
    with gert.load(AFFINE) as m:
        held = Held(m)

        async def main():
            tasks = [asyncio.ensure_future(m.run_async(r)) for r in reqs]
            await asyncio.get_running_loop().run_in_executor(
                None, _until, lambda: held.queued() == 3, "the async requests did not queue"
            )
            held.release()
            return await asyncio.wait_for(asyncio.gather(*tasks), WAIT)

        for r, got in zip(reqs, asyncio.run(main())):
            assert_alone(AFFINE, r, got, "async")
        assert _batching(m)["batch_sizes"] == {3: 1}


def test_inference_session_run_from_threads_is_batched():
    """gert.InferenceSession (ONNX Runtime's API) called from threads: its model's batcher merges the calls; each
    gets what ONNX Runtime gives for its feed."""
    rng = np.random.default_rng(11)
    reqs = [_x(rng) for _ in range(4)]
    sess = gert.InferenceSession(AFFINE)
    try:
        held = Held(sess.model)
        results, threads = _in_threads(lambda r: sess.run(None, r), reqs, held)
        held.release()
        _join(threads)
        names = [o.name for o in sess.get_outputs()]
        for r, got in zip(reqs, results):
            assert_alone(AFFINE, r, dict(zip(names, got)), "InferenceSession")
        assert _batching(sess.model)["batch_sizes"] == {4: 1}
    finally:
        sess.close()


def test_close_fails_the_queued_requests_and_returns():
    rng = np.random.default_rng(9)
    m = gert.load(AFFINE)
    held = Held(m)
    results, threads = _in_threads(m.run, [_x(rng) for _ in range(3)], held)
    closer = threading.Thread(target=m.close, kwargs={"timeout": WAIT}, daemon=True)
    closer.start()
    _join(threads + [closer])
    for e in results:
        assert isinstance(e, gert.GertError) and "closed before this request started" in str(e), e
    held.release()


def test_max_queue_delay_waits_for_a_preferred_batch_and_close_ends_the_wait():
    """max_queue_delay_ms (60 s here) with preferred_batch_size 2: a lone request keeps the free stream and waits;
    the second one completes the batch, which runs at once (long before the delay). A third waits again until
    close() ends the wait: it fails as closed."""
    rng = np.random.default_rng(10)
    reqs = [_x(rng) for _ in range(3)]
    m = gert.load(AFFINE, streams=1, dynamic_batching={"max_queue_delay_ms": 60_000, "preferred_batch_size": [2]})
    try:
        first, t1 = _in_threads(m.run, reqs[:1])
        _until(lambda: m.pool.idle() == 0, "the first request did not take the stream")
        second, t2 = _in_threads(m.run, reqs[1:2])
        _join(t1 + t2)
        assert_alone(AFFINE, reqs[0], first[0], "first")
        assert_alone(AFFINE, reqs[1], second[0], "second")
        assert _batching(m)["batch_sizes"] == {2: 1}
        third, t3 = _in_threads(m.run, reqs[2:])
        _until(lambda: m.pool.idle() == 0, "the third request did not take the stream")
    finally:
        m.close(timeout=WAIT)
    _join(t3)
    assert isinstance(third[0], gert.GertError) and "closed" in str(third[0]), third[0]


def test_latency_slo_waits_only_once_the_gear_run_time_is_known():
    """latency_slo_ms (60 s) with preferred_batch_size 2: before any run time is measured the lone request runs at
    once (no room is known); once measured, a lone request waits for company, and the second completes the batch."""
    rng = np.random.default_rng(12)
    reqs = [_x(rng) for _ in range(3)]
    with gert.load(AFFINE, streams=1, dynamic_batching={"latency_slo_ms": 60_000, "preferred_batch_size": 2}) as m:
        assert_alone(AFFINE, reqs[0], m.run(reqs[0]), "first")  # nothing measured at gear 2: runs at once
        assert _batching(m)["batch_sizes"] == {1: 1}
        for n in (1, 2):  # two queued requests: a batch of 2 runs at once (nothing measured at gear 2 yet; the first
            held = Held(m)  # run at a size is left out, the second measured)
            both, t0 = _in_threads(m.run, reqs[:2], held)
            held.release()
            _join(t0)
            assert _batching(m)["batch_sizes"] == {1: 1, 2: n}
        first, t1 = _in_threads(m.run, reqs[1:2])
        _until(lambda: m.pool.idle() == 0, "the lone request did not take the stream")
        second, t2 = _in_threads(m.run, reqs[2:])
        _join(t1 + t2)
        assert_alone(AFFINE, reqs[1], first[0], "second")
        assert_alone(AFFINE, reqs[2], second[0], "third")
        assert _batching(m)["batch_sizes"] == {1: 1, 2: 3}, _batching(m)


def test_settings_are_checked():
    assert BatchingConfig.parse(True) == BatchingConfig() and BatchingConfig.parse(False) is None
    for bad, what in (
        ({"max_delay": 1}, "unknown setting"),
        ({"max_queue_delay_ms": -1}, "max_queue_delay_ms"),
        ({"max_batch": 0}, "max_batch"),
        ({"preferred_batch_size": [0]}, "preferred_batch_size"),
        ({"max_batch": 2, "preferred_batch_size": 4}, "beyond max_batch"),
        ("yes", "True, False"),
        ({"latency_slo_ms": 0}, "latency_slo_ms"),
    ):
        with pytest.raises(gert.GertError, match=what):
            BatchingConfig.parse(bad)
    with pytest.raises(gert.GertError, match="beyond the largest batch"):
        gert.load(AFFINE, gears={"batch": [1, 2]}, dynamic_batching={"preferred_batch_size": 4})
    with gert.load(AFFINE, dynamic_batching={"max_batch": 3}) as m:
        assert _batching(m)["max_batch"] == 3


# ---- the property -------------------------------------------------------------------------------------------------

_MODELS: dict = {}


def _model(family: str, gears, by_axis: bool):
    key = (family, tuple(gears) if gears else None, by_axis)
    if key not in _MODELS:
        model, kwargs, _ = FAMILIES[family]
        # one stream: queued requests then always merge (with several, only where the measured times say merging
        # runs rows faster: gear_pieces.company), so the property checks the merged batches' rows
        one = {} if "streams" in kwargs else {"streams": 1}
        _MODELS[key] = load(
            model, kwargs, gears, ("x:1" if family == "axis1" else "x:0") if by_axis else "batch", **one
        )
    return _MODELS[key]


@pytest.fixture(scope="module", autouse=True)
def _close_models():
    yield
    for m in _MODELS.values():
        if m is not None:
            m.close()
    _MODELS.clear()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    family=st.sampled_from(["named", "unnamed", "unnamed_batch_dim", "axis1", "scalar_empty"]),
    gears=st.sampled_from([None, [1, 2, 4], [2, 8], [3]]),
    by_axis=st.booleans(),
    held=st.booleans(),
    rows=st.lists(st.integers(1, 3), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
)
def test_every_concurrent_caller_gets_exactly_its_own_result(family, gears, by_axis, held, rows, seed):
    """Threads (one per request, 1..8), request sizes 1..3 (within every largest gear: nothing runs in chunks), gears
    with padding, unnamed batch dims and the batch on axis 1: each caller's outputs equal ONNX Runtime run on its
    request alone. ``held``: all queue behind the held stream, so that they are batched (as many as the largest gear
    takes)."""
    m = _model(family, gears, by_axis)
    if m is None:
        return
    _, _, make = FAMILIES[family]
    rng = np.random.default_rng(seed)
    reqs = [make(rng, n) for n in rows]
    before = _batching(m)["batches"]
    hold = Held(m) if held else None
    try:
        results, threads = _in_threads(m.run, reqs)
        if hold is not None:
            _until(
                lambda: hold.queued() + sum(t.is_alive() is False for t in threads) == len(reqs),
                "the requests did not queue",
            )
    finally:
        if hold is not None:
            hold.release()
    _join(threads)
    for i, (r, got) in enumerate(zip(reqs, results)):
        if isinstance(got, gert.GertError) and "gear" in str(got):
            continue  # a size the gears do not take (exact policy), refused by name
        assert not isinstance(got, BaseException), got
        assert_alone(FAMILIES[family][0], r, got, f"{family} gears={gears} request {i} of {rows}")
    b = _batching(m)
    # two requests fit in one batch: whichever leads first, some leader takes another along. Under the pad policy a
    # batch takes only what its padded gear computes well by the measured run times (gear_pieces.first_batch: rows
    # [2, 1] padded to gear 4 may cost more than [2] at gear 2 on a loaded machine): all of them for sure only when
    # their rows fill a gear
    together = sum(sorted(rows)[:2]) <= b["max_batch"]
    batch = m.plan.batch
    if batch is not None and batch.policy == "pad":
        together = sum(rows) in batch.gears and sum(rows) <= b["max_batch"]
    if held and b["enabled"] and len(reqs) > 1 and together:
        assert b["batches"] - before < len(reqs), "queued requests were not batched"


@settings(deadline=None, max_examples=200)
@given(
    waits=st.lists(st.floats(1e-6, 1.0), max_size=60),
    dropped=st.integers(0, 100),
    free=st.integers(0, 300),
    kept=st.integers(1, 400),
)
def test_wait_samples_keep_the_waits_quantiles(waits, dropped, free, kept):
    """The compiled path's lone waits as stats samples (gert/core/dynamic.py wait_samples): ``waited`` requests
    waited (``waits`` the latest of those waits: the C ring drops the oldest), ``free`` found a stream free. All of
    them, zeros for the free ones, while they fit in ``kept`` and none was dropped; else at most ``kept`` values whose
    share of waits and range are those of all (a p99 is not pulled down to a mean)."""
    waited = len(waits) + (dropped if waits else 0)
    requests = waited + free
    got = wait_samples(requests, waited, waits, kept)
    if requests <= kept and waited == len(waits):
        assert sorted(got) == sorted([0.0] * free + waits)
        return
    assert len(got) == min(requests, kept)
    share = sum(1 for w in got if w > 0) / len(got)
    assert abs(share - waited / requests) <= 1 / len(got) + 1e-9
    if any(w > 0 for w in got):
        assert max(got) <= max(waits) and min(w for w in got if w > 0) >= min(waits)
        if share * len(got) >= 2:
            assert max(got) >= sorted(waits)[len(waits) // 2]  # the top of the waits stays near the top
