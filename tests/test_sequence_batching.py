"""seq.run from many threads through the Engine's dynamic batching (issue 27): steps queued for a stream with their
batch key run as one step, results equal ONNX Runtime per sequence; a leader (holding the stream) never waits for a
sequence's lock, so a Model.step holding that lock while it waits for the stream cannot deadlock with it; a device
fault in a batch of steps fails only the step that fails alone. Merges are made to happen by holding the model's
only stream until the steps queued; hangs are failures at a deadline (the model is then left open: closing it would
wait for the hung threads)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from recurrent_models import HIDDEN, INPUT, gru_model, reference

pytestmark = RUNTIME

GRU = gru_model()
STATE = {"h": "h_out"}
WAIT = 60.0  # seconds: the bound for threads to finish (never reached when things work)


def _load(**kw) -> gert.Model:
    return gert.load(GRU, state=STATE, batch_dim="N", gears={"batch": [1, 2, 4, 8]}, **kw)


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 1, INPUT)).astype(np.float32)


class Held:
    """The model's only stream, taken from its stream queue (as a long request holds it) until release()."""

    def __init__(self, m: gert.Model):
        self.m = m
        self.worker = m.pool.queue.acquire(m.pool.workers)

    def queued(self) -> int:
        return self.m.stats()["batching"]["queued"]

    def release(self) -> None:
        self.m.pool.queue.release(self.worker)


def _until(cond, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def _start(fn, *args) -> tuple:
    """fn(*args) in a daemon thread: (thread, box) where box[0] is its result or error."""
    box: list = [None]

    def one():
        try:
            box[0] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            box[0] = e

    t = threading.Thread(target=one, daemon=True)
    t.start()
    return t, box


def _finished(threads: list) -> bool:
    for t in threads:
        t.join(max(0.0, WAIT))
    return not any(t.is_alive() for t in threads)


def _runs(m: gert.Model) -> int:
    return sum(g["hits"] for g in m.stats()["gears"].values())


def _ref(state: dict, x: np.ndarray) -> np.ndarray:
    return reference(GRU, [{"x": x}], state, STATE)[0]["y"]


def test_seq_run_from_threads_shares_one_run_and_equals_onnxruntime():
    """Four sequences' steps queue while the stream is held: the freed stream runs them as one step (one graph run
    of 4 rows); each result equals ONNX Runtime with that sequence's state; a second round the same."""
    m = _load(streams=1)
    seqs = [m.sequence() for _ in range(4)]
    refs = [{"h": np.zeros((1, 1, HIDDEN), np.float32)} for _ in seqs]
    for rnd in range(2):
        xs = [_x(10 * rnd + i) for i in range(len(seqs))]
        held = Held(m)
        runs = _runs(m)
        started = []
        for i, (s, x) in enumerate(zip(seqs, xs)):
            started.append(_start(s.run, {"x": x}))
            _until(lambda held=held, i=i: held.queued() == i + 1, f"step {i} did not queue")
        held.release()
        assert _finished([t for t, _ in started]), "a seq.run caller is still waiting"
        assert _runs(m) - runs == 1, "the four steps ran as one batch"
        for i, (_, box) in enumerate(started):
            assert not isinstance(box[0], BaseException), box[0]
            np.testing.assert_allclose(
                box[0]["y"], _ref(refs[i], xs[i]), rtol=1e-5, atol=1e-6, err_msg=f"round {rnd} sequence {i}"
            )
    m.close()


def test_a_batch_leader_never_waits_for_a_sequence_lock_held_by_a_step_waiting_for_its_stream():
    """Lock order: seq.run's step queues (A1); a Model.step of the same sequence takes its lock and waits for the
    stream (A2). The freed stream goes to A1, whose batch leader holds it: it only tries the sequence's lock, finds
    it taken and hands A1 back, so A2 runs, then A1 alone. Waiting for the lock there would deadlock (A2 waits for
    the stream the leader holds)."""
    m = _load(streams=1)
    seq = m.sequence()
    x1, x2 = _x(1), _x(2)
    held = Held(m)
    t1, box1 = _start(seq.run, {"x": x1})
    _until(lambda: held.queued() == 1, "seq.run did not queue")
    t2, box2 = _start(m.step, [(seq, {"x": x2})])
    _until(lambda: held.queued() == 2, "Model.step did not queue")
    held.release()
    if not _finished([t1, t2]):
        pytest.fail("deadlock: a batch leader holding the stream waits for a sequence lock")  # model left open
    state = {"h": np.zeros((1, 1, HIDDEN), np.float32)}
    assert not isinstance(box2[0], BaseException), box2[0]
    assert not isinstance(box1[0], BaseException), box1[0]
    np.testing.assert_allclose(box2[0][0]["y"], _ref(state, x2), rtol=1e-5, atol=1e-6)  # A2 held the lock first
    np.testing.assert_allclose(box1[0]["y"], _ref(state, x1), rtol=1e-5, atol=1e-6)
    m.close()


@pytest.mark.hostnpu_only  # injects a fault into the host NPU
def test_a_device_fault_in_a_batch_of_steps_fails_only_the_step_that_fails_alone():
    """Three queued steps run as one; the batch's run faults (507015) and so does the first sequence's step alone:
    only that step fails; the others equal ONNX Runtime, and the failed sequence goes on from its old state."""
    m = _load(streams=1)
    seqs = [m.sequence() for _ in range(3)]  # ids in order: the retry runs them in that order
    refs = [{"h": np.zeros((1, 1, HIDDEN), np.float32)} for _ in seqs]
    for i, s in enumerate(seqs):  # compile the graphs (no fault yet)
        np.testing.assert_allclose(s.run({"x": _x(i)})["y"], _ref(refs[i], _x(i)), rtol=1e-5, atol=1e-6)
    xs = [_x(20 + i) for i in range(3)]
    held = Held(m)
    started = []
    for i, (s, x) in enumerate(zip(seqs, xs)):
        started.append(_start(s.run, {"x": x}))
        _until(lambda i=i: held.queued() == i + 1, f"step {i} did not queue")
    gert.inject_fault("execute", count=2)  # the batch's run, then the first sequence's step alone
    try:
        held.release()
        assert _finished([t for t, _ in started]), "a seq.run caller is still waiting"
    finally:
        gert.clear_faults()
    err = started[0][1][0]
    assert isinstance(err, gert.AclError) and err.code == 507015, err
    for i in (1, 2):
        np.testing.assert_allclose(started[i][1][0]["y"], _ref(refs[i], xs[i]), rtol=1e-5, atol=1e-6)
    assert m.stats()["batching"]["retried_batches"] == 1
    x = _x(30)
    np.testing.assert_allclose(seqs[0].run({"x": x})["y"], _ref(refs[0], x), rtol=1e-5, atol=1e-6)
    m.close()


def test_stress_seq_run_model_step_and_state_reads_from_threads_finish_and_equal_onnxruntime():
    """Bounded stress on two streams: four threads step their own sequence with seq.run, one steps two sequences
    together with Model.step, one reads the seq.run sequences' states (taking their locks) until the others end.
    Every thread ends before the deadline; every result equals ONNX Runtime."""
    steps = 25
    m = _load(streams=2)
    own = [m.sequence() for _ in range(4)]
    pair = [m.sequence() for _ in range(2)]
    feeds = {s.id: [_x(1000 * s.id + k) for k in range(steps)] for s in own + pair}
    got: dict = {s.id: [] for s in own + pair}
    stop = threading.Event()

    def run_own(s):
        for x in feeds[s.id]:
            got[s.id].append(s.run({"x": x})["y"])

    def run_pair():
        for k in range(steps):
            outs = m.step([(s, {"x": feeds[s.id][k]}) for s in pair])
            for s, o in zip(pair, outs):
                got[s.id].append(o["y"])

    def read_states():
        n = 0
        while not stop.is_set():
            for s in own:
                assert s.state["h"].shape == (1, 1, HIDDEN)
            n += 1
        return n

    workers = [_start(run_own, s) for s in own] + [_start(run_pair)]
    reader = _start(read_states)
    done = _finished([t for t, _ in workers])
    stop.set()
    if not done or not _finished([reader[0]]):
        pytest.fail("a thread is still waiting at the deadline (deadlock)")  # model left open
    for _, box in workers + [reader]:
        assert not isinstance(box[0], BaseException), box[0]
    for s in own + pair:
        want = reference(GRU, [{"x": x} for x in feeds[s.id]], {"h": np.zeros((1, 1, HIDDEN), np.float32)}, STATE)
        for k, (g, w) in enumerate(zip(got[s.id], want)):
            np.testing.assert_allclose(g, w["y"], rtol=1e-5, atol=1e-6, err_msg=f"sequence {s.id} step {k}")
    m.close()
