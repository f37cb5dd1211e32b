"""gert/core/split_choice.py: a merged batch runs split over the idle streams or whole on one, whichever its size ran
faster; measured (split and whole in turn), then the faster, with the slower run again every RETRY batches (every
RETRY_EARLY while close and short of KEPT runs).
The runs here are sleeps of known length (the choice is about wall time); the Triton path's use of it runs through
tests/test_triton_compiled_lane.py and the real server in benchmarks/bench_triton.py."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gert.core import split_choice
from gert.core.batching import Batcher
from gert.core.split_choice import SplitChoice


def group(n: int) -> list:
    """``n`` checked requests of one row each: (arrays, sizes)."""
    return [({"x": k}, {"batch": 1}) for k in range(n)]


def chunks(g, rows_of, top):
    """Batcher.chunks' cut at request boundaries (parts of at most ``top`` rows)."""
    return Batcher.chunks(g, rows_of, top)


@pytest.fixture
def pool():
    with ThreadPoolExecutor(2) as ex:
        yield ex


def sleeper(whole_ms: float, part_ms: float, n: int, log: list):
    """run(part, spread): sleeps ``whole_ms`` per row for the whole batch of ``n``, ``part_ms`` per row for a part."""

    def run(part, spread):
        assert spread is False, "a part or a whole batch runs on one stream"
        log.append(len(part))
        time.sleep((whole_ms if len(part) == n else part_ms) * len(part) / 1000)
        return [a["x"] for a, _ in part]

    return run


@pytest.mark.parametrize("whole_faster", [True, False])
def test_the_faster_way_is_chosen_once_both_were_measured_and_the_other_retried(pool, whole_faster):
    log: list = []
    sc = SplitChoice(chunks, lambda: pool)
    run = sleeper(1.0, 5.0, 4, log) if whole_faster else sleeper(5.0, 1.0, 4, log)  # 4 vs 10 ms / 20 vs 2 ms
    for _ in range(2 * (1 + split_choice.MEASURED)):  # measuring in turn: split, whole, ... (a first run left out)
        assert sc.run(group(4), 2, run) == [0, 1, 2, 3]
    assert log == [2, 2, 4] * (1 + split_choice.MEASURED)
    times = sc.times()
    assert (times[((4,), 1)] < times[((4,), 2)]) == whole_faster, times
    log.clear()
    for _ in range(split_choice.RETRY):  # far apart: the faster way but once: the slower, run again
        assert sc.run(group(4), 2, run) == [0, 1, 2, 3]
    slower = 2 if whole_faster else 4  # what the log shows of a run the slower way
    assert log.count(slower) == (2 if slower == 2 else 1), log


def test_a_close_verdict_is_checked_soon(pool, monkeypatch):
    """Whole 20 % faster than split, close (CLOSE raised to 1.5 so that a scheduling delay in a busy test run
    keeps it close): the split is retried every RETRY_EARLY batches until it has KEPT runs (a retry costs little
    where the ways are close), then every RETRY."""
    monkeypatch.setattr(split_choice, "CLOSE", 1.5)
    log: list = []
    sc = SplitChoice(chunks, lambda: pool)
    run = sleeper(5.0, 12.0, 4, log)  # whole 20 ms, split 24 ms
    for _ in range(2 * (1 + split_choice.MEASURED)):
        sc.run(group(4), 2, run)
    assert sc.choose((4,), 2) == 1, sc.times()
    early = split_choice.KEPT - split_choice.MEASURED  # runs the split lacks of KEPT
    log.clear()
    for _ in range(early * split_choice.RETRY_EARLY):
        assert sc.run(group(4), 2, run) == [0, 1, 2, 3]
    assert log.count(2) == 2 * early, log
    log.clear()
    for _ in range(split_choice.RETRY):
        sc.run(group(4), 2, run)
    assert log.count(2) == 2, log


def test_a_load_that_ends_while_measuring_does_not_pick_the_way_measured_under_it(pool):
    """Split and whole are measured in turn: load that goes away after the first runs (a server's warm-up, another
    process) slows both ways' first runs alike, so the way that is faster without it is chosen. (Measured one way
    after the other, the split, measured first, ran under the load and lost.)"""
    sc = SplitChoice(chunks, lambda: pool)
    batches = [0]

    def run(part, spread):  # 5 ms a row, the parts in parallel: split 10 ms, whole 20; the first 4 batches 5x slower
        slow = 5 if batches[0] < 4 else 1
        time.sleep(5 * len(part) * slow / 1000)
        return [a["x"] for a, _ in part]

    for _ in range(2 * (1 + split_choice.MEASURED)):
        sc.run(group(4), 2, run)
        batches[0] += 1
    assert sc.choose((4,), 2) == 2, sc.times()


def test_batches_that_fail_leave_no_count_behind(pool, monkeypatch):
    """A shape whose batches raise is not recorded: nothing is kept for it (the shapes kept stay bounded)."""
    monkeypatch.setattr(split_choice, "SHAPES", 2)
    sc = SplitChoice(chunks, lambda: pool)

    def fails(part, spread):
        raise RuntimeError("device fault")

    for h in range(10):
        with pytest.raises(RuntimeError):
            sc.run([({"x": 0}, {"batch": 1, "H": h}), ({"x": 1}, {"batch": 1, "H": h})], 2, fails)
    assert sc.times() == {} and sc.snapshot() == {"split": 0, "whole": 0, "shapes": 0}


def test_each_size_and_split_is_measured_apart(pool):
    sc = SplitChoice(chunks, lambda: pool)
    log: list = []
    sc.run(group(4), 2, sleeper(1.0, 1.0, 4, log))
    assert sc.choose((6,), 2) == 2 and sc.choose((4,), 3) == 3, "another size, another split: measured split first"
    assert sc.choose((4, ("H", 320)), 2) == 2, "rows of other dims: measured apart"
    assert sc.choose((4,), 2) == 1, "4 rows run split: the whole batch is run next"


def test_the_shapes_kept_are_bounded(pool, monkeypatch):
    monkeypatch.setattr(split_choice, "SHAPES", 3)
    sc = SplitChoice(chunks, lambda: pool)
    for h in range(5):
        sc.record((2, ("H", h)), 2, 0.0)
        sc.record((2, ("H", h)), 2, 0.001)
    assert sorted(shape for shape, _ in sc.times()) == [(2, ("H", 2)), (2, ("H", 3)), (2, ("H", 4))]


@pytest.fixture
def relu_split(device):  # device: _helpers.RUNTIME
    """A gert.load Relu model (x [N, 4]) with split_batch over two streams."""
    import numpy as np
    from onnx import helper

    import gert
    from models import make_model, vi

    m = gert.load(
        make_model(
            [helper.make_node("Relu", ["x"], ["y"])], [vi("x", np.float32, ["N", 4])], [vi("y", np.float32, ["N", 4])]
        ),
        streams=2,
        split_batch=True,
    )
    yield m
    m.close()


def test_model_stats_count_the_batches_run_split_and_whole(relu_split):
    """Model.stats()["split_batch"]: a gert.load model with split_batch over two streams counts its merged batches
    by the way they ran, measuring split and whole in turn; every request keeps its rows."""
    import numpy as np

    eng = relu_split.engine
    for k in range(2 * (1 + split_choice.MEASURED)):
        xs = [np.full((1, 4), k * 10 + j, np.float32) for j in range(4)]
        outs = eng.run_checked([eng.check({"x": x}) for x in xs])
        for x, out in zip(xs, outs):
            np.testing.assert_array_equal(out["y"], x)
    st = relu_split.stats()["split_batch"]
    assert st["enabled"] and st["shapes"] == 1
    assert st["split"] == 1 + split_choice.MEASURED and st["whole"] == 1 + split_choice.MEASURED, st


def test_one_request_of_several_rows_is_split_or_run_whole_as_measured(relu_split):
    """Model.run of one request of 4 rows with split_batch over two idle streams: spread over them by rows (as
    before) or run whole, the same choice as for merged batches; its rows come back in order either way."""
    import numpy as np

    for k in range(2 * (1 + split_choice.MEASURED)):
        x = np.arange(16, dtype=np.float32).reshape(4, 4) + 100 * k
        np.testing.assert_array_equal(relu_split.run({"x": x})["y"], x)
    st = relu_split.stats()["split_batch"]
    assert st["shapes"] == 1 and st["split"] == st["whole"] == 1 + split_choice.MEASURED, st


def test_even_rows():
    assert split_choice.even_rows(5, 2) == [(0, 3), (3, 2)]
    assert split_choice.even_rows(4, 4) == [(0, 1), (1, 1), (2, 1), (3, 1)]
