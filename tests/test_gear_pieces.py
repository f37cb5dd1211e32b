"""A merged batch under the pad policy runs as whole-request groups each padded to its own gear when the measured
run times say that is cheaper than padding the whole batch (gert/core/gear_pieces.py, BatchQueue.run_requests).

The choice is checked against a brute force over every cut; the runs against ONNX Runtime, each request alone,
with run times seeded so that the batcher cuts (the runs themselves would measure the tiny test models as costing
the same at every gear, and then nothing is cut)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gert
from _helpers import RUNTIME
from gert.core.dynamic import RunTimes
from gert.core.gear_pieces import MARGIN, cheapest_pieces, company, first_batch, gear_for
from test_inproc_batching import AFFINE, Held, _batching, _in_threads, _join, _until, _x, run_queued
from test_pipeline_property import FAMILIES, assert_alone

GEARS = (1, 2, 4, 8, 16, 32)


def brute_force(rows: list, gears: tuple, cost: dict) -> float:
    """The least summed cost over every cut of ``rows`` into consecutive groups that each fit a gear."""
    n, best = len(rows), float("inf")
    for k in range(n):
        for cuts in itertools.combinations(range(1, n), k):
            ends = [*cuts, n]
            total = 0.0
            for start, end in zip([0, *ends], ends):
                g = gear_for(sum(rows[start:end]), gears)
                if g is None:
                    break
                total += cost[g]
            else:
                best = min(best, total)
    return best


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.integers(1, 5), min_size=1, max_size=7),
    gears=st.sampled_from([(1, 2, 4, 8, 16, 32), (2, 8), (3, 6, 12), (1, 32)]),
    costs=st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=6, max_size=6),
)
def test_the_cut_chosen_is_whole_requests_in_order_and_the_cheapest(rows, gears, costs):
    cost = dict(zip(gears, costs))
    ends = cheapest_pieces(rows, gears, cost.get)
    assert ends == sorted(ends) and ends[-1] == len(rows) and len(set(ends)) == len(ends) and ends[0] > 0
    groups = [rows[s:e] for s, e in zip([0, *ends], ends)]
    whole = gear_for(sum(rows), gears)
    if whole is None:
        assert ends == [len(rows)]  # too large for one gear: left to the chunking that follows
        return
    chosen = sum(cost[gear_for(sum(g), gears)] for g in groups)
    assert chosen <= cost[whole] + 1e-12
    if whole == sum(rows):  # nothing padded: never cut
        assert ends == [len(rows)]
        return
    least = brute_force(rows, gears, cost)
    if len(groups) > 1:  # cut only when it saves MARGIN of the whole, and then at the least cost there is
        assert chosen < cost[whole] * (1 - MARGIN) and chosen == pytest.approx(least)
    else:
        assert least >= cost[whole] * (1 - MARGIN) - 1e-12


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.integers(1, 5), min_size=1, max_size=9),
    gears=st.sampled_from([(1, 2, 4, 8, 16, 32), (2, 8), (3, 6, 12), (1, 32)]),
    costs=st.lists(st.one_of(st.none(), st.floats(0.001, 10.0, allow_nan=False)), min_size=6, max_size=6),
)
def test_a_batch_takes_the_most_requests_whose_padded_run_is_within_the_margin_of_the_best_rate(rows, gears, costs):
    """first_batch against its definition, prefix by prefix: the largest k whose real rows per second (padded to its
    gear, by the cost of that gear) is within MARGIN of the best prefix's; all requests where they fill their gear,
    are too many for one gear, or a cost the whole batch needs is unknown."""
    cost = dict(zip(gears, costs))
    k = first_batch(rows, gears, cost.get)
    n, total = len(rows), sum(rows)
    assert 1 <= k <= n
    whole = gear_for(total, gears)
    if n == 1 or whole is None or whole == total or cost[whole] is None:
        assert k == n
        return
    rates = {}
    for j in range(1, n + 1):
        g = gear_for(sum(rows[:j]), gears)
        if g is not None and cost[g] is not None:
            rates[j] = sum(rows[:j]) / cost[g]
    best = max(rates.values())
    assert rates[k] >= best * (1 - MARGIN)
    assert all(rates[j] < best * (1 - MARGIN) for j in rates if j > k)


def test_from_sixteen_threads_batches_settle_at_the_gear_they_fill():
    """PP-OCR cls's measured shape of costs (a launch, then about the same per row; 16 rows cost 1.8 times 8):
    12 queued single rows take 8 (not 12 padded to 16, which left 4 to run alone next), 9 take 8 (not 8 + 1),
    7 take 7 (padded to 8: batches of 4 cost more per row), 16 take 16."""
    cost = {1: 0.9, 2: 1.2, 4: 2.3, 8: 4.0, 16: 7.2, 32: 14.0}.get
    assert [first_batch([1] * n, GEARS, cost) for n in (12, 9, 7, 16)] == [8, 8, 7, 16]


def test_nothing_is_cut_while_a_cost_it_needs_is_unknown():
    assert cheapest_pieces([1] * 10, GEARS, {16: 1.0, 8: 0.6}.get) == [10]  # 8 + 8 dearer; gear 2 unknown
    assert cheapest_pieces([1] * 10, GEARS, {16: 1.0, 8: 0.4}.get) == [5, 10]  # 8 + 8 cheaper
    assert cheapest_pieces([1] * 10, GEARS, {8: 0.4, 2: 0.1}.get) == [10]  # the whole batch's gear unknown
    assert cheapest_pieces([1] * 10, GEARS, {16: 1.0, 8: 0.4, 2: 0.1}.get) == [8, 10]
    assert cheapest_pieces([1] * 10, GEARS, {16: 0.5, 8: 0.4, 2: 0.1}.get) == [10]  # equal: one launch
    assert cheapest_pieces([1] * 10, GEARS, {16: 0.55, 8: 0.4, 2: 0.1}.get) == [10]  # saves under MARGIN


def test_run_times_cost_reads_a_line_through_what_was_measured():
    t = RunTimes()
    assert t.cost(4) is None
    t.add(8, 5.0)  # the first run at a size: left out (it allocates the buffers)
    assert t.cost(8) is None
    t.add(8, 0.9)
    assert t.cost(8) == 0.9 and t.cost(4) is None  # one size: no line
    seed_times(t, {16: 1.7})  # 0.1 s a launch, 0.1 s a row
    assert t.cost(2) == pytest.approx(0.3) and t.cost(32) == pytest.approx(3.3)
    seed_times(t, {1: 0.0})
    assert t.cost(1) == 0.0 and t.cost(4) >= 0.0  # measured wins; a line never gives a negative time


@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=30), st.integers(1, 9))
def test_run_times_are_the_statistics_median_of_the_last_kept_runs(runs, kept):
    import statistics

    t = RunTimes(kept=kept)
    t.add(4, 99.0)  # the first run at a size is left out
    for r in runs:
        t.add(4, r)
    assert t.estimate(4) == statistics.median(runs[-kept:])


def test_run_times_are_the_median_of_the_last_runs_so_one_stall_moves_nothing():
    t = RunTimes(kept=5)
    seed_times(t, {4: 0.001})
    t.add(4, 0.001)
    t.add(4, 0.5)  # preempted once
    assert t.cost(4) == 0.001
    for _ in range(5):
        t.add(4, 0.002)
    assert t.cost(4) == 0.002  # the last 5 runs only


def seed_times(t: RunTimes, seconds: dict) -> None:
    """Runs at each size as if measured (a first run, left out, then the time)."""
    for gear, s in seconds.items():
        t.add(gear, s)
        t.add(gear, s)


def seed(m: gert.Model, seconds: dict) -> None:
    """The model's measured run time per gear, as if measured (the streams' runs then add theirs: 9 runs kept)."""
    for _ in range(9):
        seed_times(m.pool.run_times, seconds)


def test_ten_queued_requests_run_as_batches_of_eight_and_two_when_that_is_cheaper_each_request_its_own_rows():
    """The leader takes the first 8 (first_batch); the 2 left queued lead the next batch."""
    rng = np.random.default_rng(0)
    reqs = [_x(rng) for _ in range(10)]
    with gert.load(AFFINE, streams=1) as m:
        seed(m, {1: 0.15, 2: 0.2, 4: 0.3, 8: 0.5, 16: 0.9, 32: 1.7})  # 0.1 s a launch, 0.05 s a row
        run_queued(m, AFFINE, reqs)
        b = _batching(m)
        assert b["batches"] == 2 and b["requests"] == 10 and b["batch_sizes"] == {8: 1, 2: 1}, b
        gears = m.stats()["gears"]
        nothing = {"hits": 1, "padding_ratio": 0.0, "padding_seconds": 0.0}
        assert gears == {"batch=8": nothing, "batch=2": nothing}, gears  # two graph runs, nothing padded


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.integers(1, 5), min_size=1, max_size=9),
    gears=st.sampled_from([(), (1, 2, 4, 8, 16, 32), (2, 8, 64), (3, 6, 12, 48)]),
    costs=st.dictionaries(st.integers(1, 64), st.one_of(st.none(), st.floats(0.001, 10.0, allow_nan=False))),
)
def test_with_several_streams_a_batch_takes_company_only_where_merged_rows_run_faster(rows, gears, costs):
    """company against its definition: the leader alone where no prefix runs real rows per second more than MARGIN
    faster than its own rows alone; else the largest prefix within MARGIN of the best rate; all of them while a cost
    a prefix needs is not measured (the merged run measures it)."""
    k = company(rows, gears, costs.get)
    n = len(rows)
    assert 1 <= k <= n
    sizes = [gear_for(sum(rows[:j]), gears) if gears else sum(rows[:j]) for j in range(1, n + 1)]
    fitting = [s for s in sizes if s is not None]
    if n == 1 or any(costs.get(s) is None for s in fitting):
        assert k == n
        return
    rates = {j: sum(rows[:j]) / costs[s] for j, s in enumerate(fitting, 1)}
    best = max(rates.values())
    if best <= rates[1] * (1 + MARGIN):
        assert k == 1
    else:
        assert rates[k] >= best * (1 - MARGIN) and all(rates[j] < best * (1 - MARGIN) for j in rates if j > k)


def test_company_on_a_cpu_and_on_an_npu():
    """The host NPU (a CPU): a row costs the same in a batch as alone, so each request runs alone on the next stream
    free; an NPU-like cost (a launch, little per row): 12 queued take 8 (12 padded to 16 computes 4 rows nobody sent
    for no faster rate), 16 take 16; no per-row measure yet: all."""
    cpu = {1: 1.0, 2: 2.0, 4: 4.1, 8: 7.9, 16: 16.0}.get
    npu = {1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2, 16: 2.3}.get
    assert [company([1] * n, GEARS, cpu) for n in (2, 9, 16)] == [1, 1, 1]
    assert [company([1] * n, GEARS, npu) for n in (2, 12, 16)] == [2, 8, 16]
    assert company([1] * 5, GEARS, {1: 1.0}.get) == 5
    assert company([1, 1, 1], (), {1: 1.0, 2: 2.0, 3: 2.9}.get) == 1  # no gears: the run's size is its rows


@pytest.mark.parametrize("shape", ["cpu", "npu"])
def test_with_two_streams_queued_requests_merge_only_where_the_measured_times_say_so(shape):
    """Two streams held, 6 requests queued behind them, let go: with per-row times (the host NPU's own) each runs
    alone, queued for the next stream free as with batching off (not through the batch queue: its gather, merge and
    fan-out would buy nothing), counted as batches of one with their waits; with launch-bound times they go through
    the batch queue and merge. Each result is its own request's (against ONNX Runtime)."""
    rng = np.random.default_rng(5)
    reqs = [_x(rng) for _ in range(6)]
    times = {"cpu": {1: 0.1, 2: 0.2, 4: 0.4, 8: 0.8}, "npu": {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.01}}[shape]
    with gert.load(AFFINE, streams=2) as m:
        batches = m.engine.batches
        assert batches.fit == batches.company
        seed(m, times)
        submitted: list = []
        submit = batches.submit
        batches.submit = lambda pending, *a, **k: submitted.append(pending.rows) or submit(pending, *a, **k)
        run_queued(m, AFFINE, reqs)
        b = _batching(m)
        sizes = b["batch_sizes"]
        assert sum(k * v for k, v in sizes.items()) == 6 == b["requests"], b
        assert b["mean_queue_wait_ms"] > 0, b  # each waited for a held stream
        if shape == "cpu":
            assert set(sizes) == {1} and submitted == [], (sizes, submitted)
        else:
            assert max(sizes) >= 3 and len(submitted) == 6, (sizes, submitted)


def test_whether_requests_take_the_batch_queue_follows_the_measured_times():
    """takes_company: with one stream every queueable request takes the batch queue; with several, only while a queue
    of such requests would merge (company > 1), read again from the run times once VERDICT_S has passed."""
    import time

    from gert.core.batch_queue import VERDICT_S

    with gert.load(AFFINE, streams=2) as m, gert.load(AFFINE, streams=1) as one:
        seed(one, {1: 0.1, 2: 0.2, 4: 0.4, 8: 0.8})
        assert one.engine.batches.takes_company(1)
        batches = m.engine.batches
        assert batches.takes_company(1)  # nothing measured: merged runs measure it
        seed(m, {1: 0.1, 2: 0.2, 4: 0.4, 8: 0.8, 16: 1.6})
        time.sleep(VERDICT_S * 1.5)
        assert not batches.takes_company(1) and not batches.takes_company(2)
        seed(m, {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.01, 16: 1.02})
        assert not batches.takes_company(1)  # the verdict holds for VERDICT_S
        time.sleep(VERDICT_S * 1.5)
        assert batches.takes_company(1) and batches.takes_company(2)


def test_requests_that_run_alone_have_merged_runs_measured_again_once_a_probe_is_due(monkeypatch):
    """Run times that say no company are not trusted for ever (merged sizes that never run again are never measured
    again): once PROBE_S has passed with a size's requests running alone, for VERDICT_S they take the batch queue and
    a batch takes every queued request (new times at merged sizes); then the run times decide again. Each result is
    its own request's (against ONNX Runtime)."""
    import time

    from gert.core import batch_queue

    monkeypatch.setattr(batch_queue, "VERDICT_S", 0.3)
    monkeypatch.setattr(batch_queue, "PROBE_S", 1.0)
    rng = np.random.default_rng(7)
    with gert.load(AFFINE, streams=2) as m:
        batches = m.engine.batches
        seed(m, {1: 0.1, 2: 0.2, 4: 0.4, 8: 0.8, 16: 1.6})  # a row costs the same merged: no company
        time.sleep(0.45)
        started = time.monotonic()
        assert not batches.takes_company(1) and not batches.probing(1)
        run_queued(m, AFFINE, [_x(rng) for _ in range(6)])
        assert set(_batching(m)["batch_sizes"]) == {1}, _batching(m)  # each alone
        time.sleep(max(0.0, started + 1.0 + 0.35 - time.monotonic()))
        assert batches.takes_company(1) and batches.probing(1)  # a probe is due: merged runs measured again
        run_queued(m, AFFINE, [_x(rng) for _ in range(6)])
        sizes = _batching(m)["batch_sizes"]
        assert max(sizes) >= 2 and sum(k * v for k, v in sizes.items()) == 12, sizes
        time.sleep(0.35)
        assert not batches.probing(1) and not batches.takes_company(1)  # the times still say so: alone again


def test_the_default_layout_is_two_streams_per_cube_core_sharing_them_by_load():
    """gert.load without ``streams``: two per cube core of the device (2..16, gert/core/stream_layout.py), without core
    limits (they share the device's cores by load), the several-stream batching rule; ``streams=1`` as named."""
    from gert import _cann
    from gert.core.stream_layout import default_streams

    cores = _cann.get_device_info(0, _cann.DEV_ATTR_CUBE_CORE_NUM)
    with gert.load(AFFINE) as m, gert.load(AFFINE, streams=1) as one:
        assert m.num_streams == default_streams(cores) == max(2, min(16, 2 * cores))
        assert all(w.core_share is not None for w in m.pool.workers)
        assert m.engine.batches.fit == m.engine.batches.company
        assert one.num_streams == 1 and one.engine.batches.fit != one.engine.batches.company


def test_a_batch_stays_whole_when_a_launch_costs_more_than_the_padding():
    rng = np.random.default_rng(1)
    reqs = [_x(rng) for _ in range(10)]
    with gert.load(AFFINE) as m:
        seed(m, {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.01, 32: 1.02})  # the launch is the cost
        run_queued(m, AFFINE, reqs)
        st = m.stats()
        gear = st["gears"]["batch=16"]
        assert list(st["gears"]) == ["batch=16"] and (gear["hits"], gear["padding_ratio"]) == (1, 0.375), st
        # what the padding cost: the run's seconds (the stream's busy time: its only run) times its padded share
        busy = sum(s["busy_seconds"] for s in st["streams"])
        assert busy > 0 and gear["padding_seconds"] == pytest.approx(0.375 * busy, rel=1e-9), (gear, busy)


def test_run_list_and_triton_batches_are_cut_the_same_way_and_time_their_runs():
    """Model.run(list) and gert_triton's merged batches (Engine.run_checked) cut as the batch queue does; their
    runs are timed into the same table, so a gear never run gets a measured time once it ran."""
    rng = np.random.default_rng(2)
    reqs = [_x(rng) for _ in range(10)]
    with gert.load(AFFINE) as m:
        seed(m, {1: 0.15, 8: 0.5, 16: 0.9, 32: 1.7})  # gear 2 read off the line: 0.2
        got = m.run(reqs)
        for i, (r, out) in enumerate(zip(reqs, got)):
            assert_alone(AFFINE, r, out, f"request {i}")
        assert set(m.stats()["gears"]) == {"batch=8", "batch=2"}, m.stats()["gears"]


def test_a_batch_split_over_two_streams_is_cut_in_each_part():
    """split_batch over two idle streams (gert_triton's default layout): 10 requests in parts of 5, each run as
    4 + 1 where that is cheaper than padding to 8; each request its own rows."""
    rng = np.random.default_rng(4)
    reqs = [_x(rng) for _ in range(10)]
    with gert.load(AFFINE, streams=2, split_batch=True) as m:
        seed(m, {1: 0.12, 2: 0.22, 4: 0.42, 8: 0.82, 16: 1.62, 32: 3.22})  # 0.02 s a launch, 0.1 s a row
        got = m.run(reqs)
        for i, (r, out) in enumerate(zip(reqs, got)):
            assert_alone(AFFINE, r, out, f"request {i}")
        assert m.stats()["gears"] == {
            "batch=4": {"hits": 2, "padding_ratio": 0.0, "padding_seconds": 0.0},
            "batch=1": {"hits": 2, "padding_ratio": 0.0, "padding_seconds": 0.0},
        }, m.stats()["gears"]


def test_each_streams_run_is_measured_at_its_gear_the_first_left_out():
    """Dynamic batches run on the Python path, each timed by its stream: the first batch of 2 is left out, the
    second gives gear 2 its time (a tiny model's: well under the 0.2 s the line through the seeds reads off)."""
    rng = np.random.default_rng(3)
    with gert.load(AFFINE) as m:
        seed(m, {1: 0.15, 8: 0.5, 16: 0.9, 32: 1.7})
        times = m.pool.run_times
        for n in (1, 2):
            run_queued(m, AFFINE, [_x(rng) for _ in range(2)])
            assert (times.cost(2) == pytest.approx(0.2)) == (n == 1), times.cost(2)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    family=st.sampled_from(["named", "axis1"]),
    rows=st.lists(st.integers(1, 3), min_size=2, max_size=8),
    costs=st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=6, max_size=6),
    seed_=st.integers(0, 2**16),
)
def test_every_caller_gets_its_own_rows_whatever_the_cut(family, rows, costs, seed_):
    """Random request sizes and random run times per gear (so random cuts): each caller's outputs equal ONNX
    Runtime run on its request alone."""
    model, kwargs, make = FAMILIES[family]
    rng = np.random.default_rng(seed_)
    reqs = [make(rng, n) for n in rows]
    with gert.load(model, **kwargs) as m:
        seed(m, dict(zip(GEARS, costs)))
        hold = Held(m)
        try:
            results, threads = _in_threads(m.run, reqs)
            _until(lambda: hold.queued() == len(reqs), "the requests did not queue")
        finally:
            hold.release()
        _join(threads)
    for i, (r, got) in enumerate(zip(reqs, results)):
        assert not isinstance(got, BaseException), got
        assert_alone(model, r, got, f"{family} rows={rows} costs={costs} request {i}")


pytestmark = RUNTIME
