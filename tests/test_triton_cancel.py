"""Issue 37 item 6: a request the client cancelled is answered CANCELLED and never run, whichever Triton scheduler
handed it to execute() (dynamic batcher, default scheduler, sequence batcher, ensemble steps), whether it was
cancelled before execute() read it or while the others were read and earlier groups ran; the other requests of
the batch run as one batch, as they would have. Triton's pb_utils is the fake in fake_pb_utils.py; the models run
on gert (host NPU) in this process. The end-to-end test against the real server is tests/test_triton_cancel_e2e.py.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import fake_pb_utils
from _helpers import RUNTIME
from gert_triton import TritonPythonModel
from gert_triton.cancellation import AskPolicy, Cancellation, Cancelled
from gert_triton.config import ConfigError, parse_parameters
from test_triton_unit import (
    params,
    ONE_STREAM,
    assert_error,
    autocomplete,
    check_seq,
    gear_hits,
    hit_delta,
    init_args,
    model_dir,
    outputs_of,
    request,
)
from triton_models import SEQ_OUTPUTS, seq_inputs, seq_model

pytestmark = RUNTIME


@pytest.fixture
def pb(monkeypatch):
    return fake_pb_utils.install(monkeypatch)


@pytest.fixture(scope="module")
def seq_bytes():
    return seq_model()


class LateCancel(fake_pb_utils.InferenceRequest):
    """A request the client cancels after execute() first asked: ``is_cancelled()`` says True from call ``after``."""

    def __init__(self, *args, after: int = 2, **kwargs):
        super().__init__(*args, **kwargs)
        self.after = after

    def is_cancelled(self) -> bool:
        super().is_cancelled()
        return self.cancel_checks >= self.after


class NoCancellation(fake_pb_utils.InferenceRequest):
    """A stub older than 23.10: no is_cancelled()."""

    is_cancelled = property(lambda self: (_ for _ in ()).throw(AttributeError("is_cancelled")))


def load(pb, tmp_path, seq_bytes, batcher: bool, cls=TritonPythonModel):
    mdir = model_dir(tmp_path, seq_bytes)
    cfg = autocomplete(pb, mdir, cls, parameters=ONE_STREAM)
    if not batcher:  # the default scheduler: requests wait in the instance's queue
        del cfg["dynamic_batching"]
    m = cls()
    m.initialize(init_args(mdir, cfg))
    return m


def late(pb, inputs: dict, after: int = 2) -> LateCancel:
    return LateCancel([pb.Tensor(k, v) for k, v in inputs.items()], SEQ_OUTPUTS, after=after)


# ---- Cancellation alone -------------------------------------------------------------------------------------------


def test_run_live_takes_cancelled_members_out_of_the_batch():
    class R:
        def __init__(self, cancelled):
            self.cancelled, self.asked = cancelled, 0

        def is_cancelled(self):
            self.asked += 1
            return self.cancelled

    reqs = [R(False), R(True), R(False)]
    c = Cancellation(reqs, recheck_after_s=0.0)
    ran = []
    out = c.run_live(
        ["a", "b", "c"], lambda batch: ran.append(batch) or [x.upper() for x in batch], {"a": 0, "b": 1, "c": 2}.get
    )
    assert ran == [["a", "c"]] and out[0] == "A" and out[2] == "C" and isinstance(out[1], Cancelled)
    ran.clear()
    out = c.run_live(["b"], lambda batch: ran.append(batch) or batch, {"b": 1}.get)
    assert ran == [] and isinstance(out[0], Cancelled), "a batch of cancelled members does not run"
    c = Cancellation([R(False)], recheck_after_s=60.0)
    assert not c.cancelled(0)
    assert not c.cancelled(0, recheck=True) and c.requests[0].asked == 1, "asked a moment ago: not asked again"


def test_auto_asks_while_an_ask_costs_at_most_its_share_of_a_run(monkeypatch):
    """check_cancelled "auto" (AskPolicy): asked until an ask and a run are measured, then while the median ask is at
    most ASK_SHARE (2 %) of the median run per request, and once PROBE_S after the last ask whatever they say;
    "true" always, "false" never; the times a Cancellation measures reach the policy."""
    from gert_triton import cancellation

    p = AskPolicy()
    assert p.asks(0.0), "nothing measured: asked"
    p.took_ask(100e-6, 0.0)
    assert p.asks(0.0), "no run measured: asked"
    p.took_run(4 * 0.5e-3, 4, asked=True)  # 0.5 ms a request: an ask is 20 % of it
    assert not p.asks(0.1) and p.asks(cancellation.PROBE_S), "not asked, but probed once PROBE_S after the last ask"
    for _ in range(cancellation._KEPT):  # runs of 10 ms a request: an ask is 1 % of one
        p.took_run(10e-3, 1, asked=False)
    assert p.asks(0.1) and p.skipped == cancellation._KEPT
    p.took_ask(100e-6, 0.2)
    p.took_ask(1.0, 0.2)  # one slow ask among typical ones does not move the median
    assert p.asks(0.3)
    assert AskPolicy("true").asks(0.0) and not AskPolicy("false").asks(0.0)
    with pytest.raises(ValueError, match="check_cancelled: expected one of .*got 'maybe'"):
        AskPolicy("maybe")

    class R:
        def is_cancelled(self):
            return False

    fresh = AskPolicy()
    c = Cancellation([R(), R()], policy=fresh)
    assert c.run_live([0, 1], lambda batch: batch, lambda k: k) == [0, 1]
    assert fresh.asked == 2 and len(fresh.ask_times) == 2 and len(fresh.run_times) == 1
    monkeypatch.setattr(cancellation, "ASK_SHARE", 0.0)  # no ask is cheap enough: the next execute asks nothing
    asked_before = fresh.asked
    c = Cancellation([R(), R()], policy=fresh)
    assert c.run_live([0, 1], lambda batch: batch, lambda k: k) == [0, 1] and fresh.asked == asked_before
    assert fresh.skipped == 2


def test_check_cancelled_takes_auto_true_or_false():
    assert parse_parameters({}).check_cancelled == "auto"
    assert [parse_parameters({"check_cancelled": v}).check_cancelled for v in ("AUTO", "yes", "0")] == [
        "auto",
        "true",
        "false",
    ]
    with pytest.raises(ConfigError, match=r"parameter 'check_cancelled': expected auto, true or false, got 'often'"):
        parse_parameters({"check_cancelled": "often"})


# ---- execute() ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("batcher", [True, False], ids=["dynamic_batching", "default_scheduler"])
def test_cancelled_request_is_not_run_and_the_others_batch(pb, tmp_path, seq_bytes, batcher):
    """Cancelled before execute() read it: answered CANCELLED, never run; the two others run as one batch of 2.
    With the dynamic batcher too: a request cancelled after the batcher handed it over still reaches execute."""
    m = load(pb, tmp_path, seq_bytes, batcher)
    try:
        reqs = [seq_inputs(1, 2, uid) for uid in range(1, 4)]
        pbreqs = [request(pb, reqs[0]), request(pb, reqs[1], cancelled=True), request(pb, reqs[2])]
        before = gear_hits(m)
        responses = m.execute(pbreqs)
        assert_error(pb, responses[1], pb.TritonError.CANCELLED, "cancelled")
        check_seq(outputs_of(responses[0]), reqs[0])
        check_seq(outputs_of(responses[2]), reqs[2])
        assert hit_delta(before, gear_hits(m)) == {"S=2,batch=2": 1}, "the cancelled request was not run"
        assert [r.cancel_checks for r in pbreqs] == [1, 1, 1], "asked once each, right before the batch runs"
    finally:
        m.finalize()


class CancelledWhileRead(fake_pb_utils.InferenceRequest):
    """A request its client cancels while execute() reads the requests: cancelled once its inputs were read."""

    def inputs(self):
        self._cancelled = True
        return super().inputs()


def test_request_cancelled_after_it_was_read_is_taken_out_before_its_batch_runs(pb, tmp_path, seq_bytes):
    """Cancelled after execute() read it (a slow preprocess, the other requests' reading, an earlier group's run):
    the one ask comes right before its batch runs, so it is answered CANCELLED and never run; the others run as one
    batch. Each request is asked once."""
    m = load(pb, tmp_path, seq_bytes, batcher=True)
    try:
        reqs = [seq_inputs(1, 2, uid) for uid in range(1, 5)]

        def while_read(r):
            return CancelledWhileRead([pb.Tensor(k, v) for k, v in r.items()], SEQ_OUTPUTS)

        pbreqs = [request(pb, reqs[0]), while_read(reqs[1]), request(pb, reqs[2]), while_read(reqs[3])]
        before = gear_hits(m)
        responses = m.execute(pbreqs)
        for k in (1, 3):
            assert_error(pb, responses[k], pb.TritonError.CANCELLED, "cancelled")
        check_seq(outputs_of(responses[0]), reqs[0])
        check_seq(outputs_of(responses[2]), reqs[2])
        assert hit_delta(before, gear_hits(m)) == {"S=2,batch=2": 1}, "only the two live requests ran"
        assert [r.cancel_checks for r in pbreqs] == [1, 1, 1, 1], "one IPC round trip per request"
        # every request cancelled after being read: nothing runs
        pbreqs = [while_read(r) for r in reqs[:2]]
        before = gear_hits(m)
        responses = m.execute(pbreqs)
        assert all(r.has_error() and r.error().code() == pb.TritonError.CANCELLED for r in responses)
        assert gear_hits(m) == before
    finally:
        m.finalize()


def test_check_cancelled_false_asks_nothing_and_runs_every_request(pb, tmp_path, seq_bytes):
    """Config parameter check_cancelled "false": no is_cancelled() round trip; a cancelled request runs like any."""
    mdir = model_dir(tmp_path, seq_bytes)
    cfg = autocomplete(pb, mdir, TritonPythonModel, parameters=params(streams="1", check_cancelled="false"))
    m = TritonPythonModel()
    m.initialize(init_args(mdir, cfg))
    try:
        reqs = [seq_inputs(1, 2, uid) for uid in range(1, 4)]
        pbreqs = [request(pb, reqs[0]), request(pb, reqs[1], cancelled=True), request(pb, reqs[2])]
        before = gear_hits(m)
        responses = m.execute(pbreqs)
        for r, resp in zip(reqs, responses):
            check_seq(outputs_of(resp), r)
        assert hit_delta(before, gear_hits(m)) == {"S=2,batch=4": 1}, "the three ran as one batch"
        assert [r.cancel_checks for r in pbreqs] == [0, 0, 0]
    finally:
        m.finalize()


def test_stub_without_cancellation_runs_everything(pb, tmp_path, seq_bytes):
    m = load(pb, tmp_path, seq_bytes, batcher=True)
    try:
        reqs = [seq_inputs(1, 2, uid) for uid in range(1, 3)]
        pbreqs = [NoCancellation([pb.Tensor(k, v) for k, v in r.items()], SEQ_OUTPUTS) for r in reqs]
        responses = m.execute(pbreqs)
        for r, resp in zip(reqs, responses):
            check_seq(outputs_of(resp), r)
    finally:
        m.finalize()


def test_a_failing_cancellation_query_serves_the_request(pb, tmp_path, seq_bytes):
    """is_cancelled() is an IPC call into the server; if it fails, the request is served (not failed, not the
    whole batch)."""

    class Failing(fake_pb_utils.InferenceRequest):
        def is_cancelled(self) -> bool:
            raise RuntimeError("the stub's message queue broke")

    m = load(pb, tmp_path, seq_bytes, batcher=True)
    try:
        reqs = [seq_inputs(1, 2, uid) for uid in range(1, 3)]
        pbreqs = [request(pb, reqs[0]), Failing([pb.Tensor(k, v) for k, v in reqs[1].items()], SEQ_OUTPUTS)]
        responses = m.execute(pbreqs)
        for r, resp in zip(reqs, responses):
            check_seq(outputs_of(resp), r)
    finally:
        m.finalize()


# ---- ensemble steps -----------------------------------------------------------------------------------------------

CALLS: list = []


def counting_step(inputs: dict) -> dict:
    CALLS.append(1)
    return {"y": inputs["x"] * 2}


def test_step_model_does_not_run_a_cancelled_request(pb):
    from gert_triton.steps import TritonPythonModel as Step

    cfg = {
        "name": "s",
        "max_batch_size": 0,
        "parameters": {"function": {"string_value": f"{__name__}:counting_step"}},
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [2]}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [2]}],
    }
    s = Step()
    s.initialize({"model_config": json.dumps(cfg)})
    CALLS.clear()
    x = np.ones(2, np.float32)
    rs = s.execute(
        [
            pb.InferenceRequest([pb.Tensor("x", x)], ["y"]),
            pb.InferenceRequest([pb.Tensor("x", x)], ["y"], cancelled=True),
        ]
    )
    assert not rs[0].has_error() and rs[1].error().code() == pb.TritonError.CANCELLED
    assert len(CALLS) == 1


# ---- sequence batcher ---------------------------------------------------------------------------------------------

from test_triton_sequences import Reference, seq_request, seqmodel, step_x, y_of  # noqa: E402,F401  (fixture)


def cancelled(pb, req, after: int = 1) -> LateCancel:
    """``req`` (a fake request) as one the client cancelled (from the ``after``-th ask on)."""
    return LateCancel(
        req.inputs(), req.requested_output_names(), correlation_id=req.correlation_id(), flags=req.flags(), after=after
    )


def test_cancelled_sequence_step_does_not_advance_the_state_and_a_cancelled_end_frees_it(seqmodel):
    pb, m, _ = seqmodel
    ref = Reference()
    ref.start(7), ref.start(8)
    x = [step_x(k) for k in range(6)]
    rs = m.execute([seq_request(pb, 7, x[0], start=True), seq_request(pb, 8, x[1], start=True)])
    np.testing.assert_allclose(y_of(rs[0]), ref.step(7, x[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_of(rs[1]), ref.step(8, x[1]), rtol=1e-5, atol=1e-6)
    rs = m.execute([cancelled(pb, seq_request(pb, 7, x[2])), seq_request(pb, 8, x[3])])
    assert rs[0].has_error() and rs[0].error().code() == pb.TritonError.CANCELLED
    np.testing.assert_allclose(y_of(rs[1]), ref.step(8, x[3]), rtol=1e-5, atol=1e-6)
    rs = m.execute([seq_request(pb, 7, x[4])])  # as if x[2] never came
    np.testing.assert_allclose(y_of(rs[0]), ref.step(7, x[4]), rtol=1e-5, atol=1e-6)
    rs = m.execute([cancelled(pb, seq_request(pb, 7, x[5], end=True))])
    assert rs[0].error().code() == pb.TritonError.CANCELLED
    assert m.stateful.active == 1, "the cancelled END ended sequence 7; 8 lives on"


class SlowToRead(fake_pb_utils.InferenceRequest):
    """A request whose reading takes 2 ms (a large tensor, a busy stub): its batch runs well after it was asked."""

    def flags(self) -> int:
        time.sleep(0.002)
        return super().flags()


def test_sequence_steps_are_asked_once_each_when_read(seqmodel):
    """Each step is asked when execute() reads it (a cancelled START must not reset its sequence) and not again
    before its group runs, although reading the others took longer than Cancellation's recheck interval: one IPC
    round trip per step (two cost a third of bench_sequences' steps/s)."""
    pb, m, _ = seqmodel
    base = [seq_request(pb, 40 + k, step_x(k), start=True) for k in range(3)]
    reqs = [SlowToRead(r.inputs(), ["y"], correlation_id=40 + k, flags=1) for k, r in enumerate(base)]
    rs = m.execute(reqs)
    assert not any(r.has_error() for r in rs)
    assert [r.cancel_checks for r in reqs] == [1, 1, 1]
