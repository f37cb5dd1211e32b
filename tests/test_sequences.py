"""Stateful models (issue 14): gert.Sequence keeps the recurrent state on the device, model.step batches sequences,
batch_dim puts the batch on any axis. Every result is checked against ONNX Runtime run step by step with the state
fed back by hand; the host NPU's copy counters prove that the state never crosses to the host during a step."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import helper

import gert
from _helpers import RUNTIME, run_python_result
from gert.errors import GertError
from models import make_model, ort_session, vi
from recurrent_models import HIDDEN, INPUT, gated_model, gru_model, lstm_model, reference, run_threads

pytestmark = RUNTIME

GRU = gru_model()
LSTM = lstm_model()
GATED = gated_model()
GRU_STATE = {"h": "h_out"}
LSTM_STATE = {"h": "h_out", "c": "c_out"}


def xs(rng, n: int = 1) -> np.ndarray:
    return rng.standard_normal((1, n, INPUT)).astype(np.float32)


def zeros(n: int = 1) -> np.ndarray:
    return np.zeros((1, n, HIDDEN), np.float32)


def copied(fn) -> tuple:
    """(fn's result, bytes copied H2D, D2H, D2D while it ran)."""
    c0 = gert.host_counters()
    out = fn()
    c1 = gert.host_counters()
    return out, c1["bytes_h2d"] - c0["bytes_h2d"], c1["bytes_d2h"] - c0["bytes_d2h"], c1["bytes_d2d"] - c0["bytes_d2d"]


# ---- one sequence ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["pad", "auto"])
def test_gru_60_steps_equal_onnxruntime_and_state_stays_on_device(policy):
    rng = np.random.default_rng(0)
    kw = dict(batch_dim="N", gears={"batch": [1, 4, 8]}) if policy == "pad" else {}
    with gert.load(GRU, state=GRU_STATE, **kw) as model, model.sequence() as seq:
        ref_state = {"h": zeros()}
        for i in range(60):
            x = xs(rng)
            out, h2d, d2h, d2d = copied(lambda x=x: seq.run({"x": x}))
            want = reference(GRU, [{"x": x}], ref_state, GRU_STATE)[0]
            assert list(out) == ["y"]  # the state output stays on the device
            np.testing.assert_allclose(out["y"], want["y"], rtol=1e-5, atol=1e-6, err_msg=f"step {i}")
            assert h2d == x.nbytes and d2h == out["y"].nbytes, (i, h2d, d2h)  # only the step's own I/O
            if policy == "pad":  # static graph: the new state is written straight into the next buffer
                assert d2d == 0, (i, d2d)
            else:  # auto: the dynamic graph's GE-allocated state output is copied on the device, never the host
                assert d2d in (0, ref_state["h"].nbytes), (i, d2d)
        np.testing.assert_allclose(seq.state["h"], ref_state["h"], rtol=1e-5, atol=1e-6)
        assert seq.steps == 60


def test_lstm_two_states_initial_state_reset_and_state_copy():
    rng = np.random.default_rng(1)
    h0 = rng.standard_normal((1, 1, HIDDEN)).astype(np.float32)
    c0 = rng.standard_normal((1, 1, HIDDEN)).astype(np.float32)
    steps = [{"x": xs(rng)} for _ in range(55)]
    with gert.load(LSTM, state=LSTM_STATE, batch_dim="N", gears={"batch": [1, 2]}) as model:
        seq = model.sequence(initial_state={"h": h0, "c": c0})
        ref = {"h": h0.copy(), "c": c0.copy()}
        want = reference(LSTM, steps, ref, LSTM_STATE)
        got = [seq.run(s) for s in steps]
        for i, (g, w) in enumerate(zip(got, want)):
            assert list(g) == ["y"]
            np.testing.assert_allclose(g["y"], w["y"], rtol=1e-5, atol=1e-6, err_msg=f"step {i}")
        state = seq.state
        np.testing.assert_allclose(state["h"], ref["h"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(state["c"], ref["c"], rtol=1e-5, atol=1e-6)
        state["h"][:] = 99  # a host copy: changing it leaves the device state alone
        np.testing.assert_allclose(seq.state["h"], ref["h"], rtol=1e-5, atol=1e-6)
        seq.reset()  # zeros
        assert not seq.state["h"].any() and not seq.state["c"].any() and seq.steps == 0
        np.testing.assert_allclose(
            seq.run(steps[0])["y"],
            reference(LSTM, steps[:1], {"h": zeros(), "c": zeros()}, LSTM_STATE)[0]["y"],
            rtol=1e-5,
            atol=1e-6,
        )
        seq.reset({"h": h0, "c": c0})
        np.testing.assert_array_equal(seq.state["c"], c0)
        seq.close()
        with pytest.raises(GertError, match="closed"):
            seq.run(steps[0])
        with pytest.raises(GertError, match="closed"):
            _ = seq.state


def test_step_inputs_are_checked_and_name_the_input():
    with gert.load(GRU, state=GRU_STATE, batch_dim="N") as model, model.sequence() as seq:
        with pytest.raises(GertError, match=r"\['h'\].*state.*\['x'\]"):
            seq.run({"x": xs(np.random.default_rng(0)), "h": zeros()})
        with pytest.raises(GertError, match=r"missing \['x'\]"):
            seq.run({})
        with pytest.raises(
            GertError,
            match=r"input 'x': expected dtype float32, got float64 \(the model takes float32 of shape \(1, 'N', 4\)",
        ):
            seq.run({"x": np.zeros((1, 1, INPUT))})
        with pytest.raises(GertError, match="initial state 'h'"):
            model.sequence(initial_state={"h": np.zeros((1, 1, HIDDEN + 1), np.float32)})
        with pytest.raises(GertError, match="not state inputs"):
            model.sequence(initial_state={"x": zeros()})
        # the sequence is unharmed by the refused steps
        assert seq.run({"x": xs(np.random.default_rng(0))})["y"].shape == (1, 1, HIDDEN) and seq.steps == 1


def test_load_refuses_state_pairs_that_disagree_naming_both():
    bad_dtype = make_model(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Cast", ["h"], ["h_out"], to=7)],
        [vi("x", np.float32, ["N", 2]), vi("h", np.float32, ["N", 3])],
        [vi("y", np.float32, ["N", 2]), vi("h_out", np.int64, ["N", 3])],
    )
    with pytest.raises(GertError, match="state input 'h' is float32 but its output 'h_out' is int64"):
        gert.load(bad_dtype, state={"h": "h_out"})
    bad_shape = make_model(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Concat", ["h", "h"], ["h_out"], axis=1)],
        [vi("x", np.float32, ["N", 2]), vi("h", np.float32, ["N", 3])],
        [vi("y", np.float32, ["N", 2]), vi("h_out", np.float32, ["N", 6])],
    )
    with pytest.raises(GertError, match=r"state input 'h' has shape \('N', 3\) but its output 'h_out' has \('N', 6\)"):
        gert.load(bad_shape, state={"h": "h_out"})
    with pytest.raises(GertError, match="'hh', which is not a model input"):
        gert.load(GRU, state={"hh": "h_out"})
    with pytest.raises(GertError, match="output 'h2', which is not a model output"):
        gert.load(GRU, state={"h": "h2"})
    with gert.load(GRU) as plain:
        with pytest.raises(GertError, match="loaded without state"):
            plain.sequence()


# ---- many sequences ------------------------------------------------------------------------------------------------


def test_64_interleaved_sequences_stepped_in_batches_with_gears_and_padding():
    """64 LSTM sequences, 52 rounds; each round a random subset steps as one model.step (batches padded to gears
    1/8/16/64, split above the top gear): each sequence's outputs equal its own ONNX Runtime run."""
    rng = np.random.default_rng(2)
    n = 64
    with gert.load(LSTM, state=LSTM_STATE, batch_dim="N", gears={"batch": [1, 8, 16]}) as model:
        seqs = [model.sequence() for _ in range(n)]
        refs = [{"h": zeros(), "c": zeros()} for _ in range(n)]
        sess = ort_session(LSTM)
        for r in range(52):
            chosen = sorted(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False))
            feeds = [xs(rng) for _ in chosen]
            pairs = [(seqs[i], {"x": x}) for i, x in zip(chosen, feeds)]
            (outs, h2d, d2h, d2d) = copied(lambda pairs=pairs: model.step(pairs))
            state_bytes = 2 * HIDDEN * 4  # h and c of one sequence
            # gathered and scattered on the device, except a lone sequence in a chunk (above the top gear 16): bound
            gathered = len(chosen) - (1 if len(chosen) % 16 == 1 else 0)
            assert d2d == 2 * gathered * state_bytes, (r, len(chosen), d2d)
            assert h2d < len(chosen) * state_bytes + 16 * feeds[0].nbytes  # the states never go up from the host
            for i, x, out in zip(chosen, feeds, outs):
                y, h, c = sess.run(None, {"x": x, **refs[i]})
                refs[i] = {"h": h, "c": c}
                np.testing.assert_allclose(out["y"], y, rtol=1e-5, atol=1e-6, err_msg=f"round {r} seq {i}")
        for s, ref in zip(seqs, refs):
            np.testing.assert_allclose(s.state["c"], ref["c"], rtol=1e-5, atol=1e-6)
        gears = model.stats()["gears"]
        assert set(gears) <= {"batch=1", "batch=8", "batch=16"} and "batch=16" in gears
        assert 0 < gears["batch=16"]["padding_ratio"] < 1  # the rows padded up to a gear are counted as padding


def test_branching_on_a_scalar_groups_steps_by_its_value():
    """The gated model's 0-d 'mode' has no batch axis: steps with equal modes share a run, others run apart."""
    rng = np.random.default_rng(3)
    with gert.load(GATED, state=GRU_STATE, batch_dim="N") as model:  # an If: batch policy exact (no padding)
        seqs = [model.sequence() for _ in range(5)]
        refs = [{"h": zeros()} for _ in seqs]
        for r in range(50):
            modes = rng.integers(0, 2, size=len(seqs))
            feeds = [{"x": rng.standard_normal((1, 1, HIDDEN)).astype(np.float32), "mode": np.array(m)} for m in modes]
            before = sum(g["hits"] for g in model.stats()["gears"].values())
            outs = model.step(list(zip(seqs, feeds)))
            runs = sum(g["hits"] for g in model.stats()["gears"].values()) - before
            assert runs == len(set(modes.tolist())), (r, modes)
            for i, (f, out) in enumerate(zip(feeds, outs)):
                want = reference(GATED, [f], refs[i], GRU_STATE)[0]
                np.testing.assert_allclose(out["y"], want["y"], rtol=1e-6, err_msg=f"round {r} seq {i}")


def test_concurrent_runs_from_threads_are_batched():
    rng = np.random.default_rng(4)
    n, steps = 8, 20
    feeds = [[xs(rng) for _ in range(steps)] for _ in range(n)]
    # a generous window (the first step of a round waits 0.1 s for the others): steps that the 8 threads start
    # together share a run whatever the machine's load (at 5 ms that was left to scheduling)
    with gert.load(GRU, state=GRU_STATE, batch_dim="N", gears={"batch": [1, 2, 4, 8]}, sequence_wait_s=0.1) as model:
        seqs = [model.sequence() for _ in range(n)]
        got: list = [[] for _ in range(n)]

        def worker(i):
            for x in feeds[i]:
                got[i].append(seqs[i].run({"x": x})["y"])

        errors = run_threads(worker, n)
        assert not errors, errors
        hits = model.stats()["gears"]
        runs = sum(g["hits"] for g in hits.values())
        assert runs < n * steps, hits  # steps arriving together shared graph runs
    for i in range(n):
        want = reference(GRU, [{"x": x} for x in feeds[i]], {"h": zeros()}, GRU_STATE)
        for k, (g, w) in enumerate(zip(got[i], want)):
            np.testing.assert_allclose(g, w["y"], rtol=1e-5, atol=1e-6, err_msg=f"seq {i} step {k}")


def test_thousands_of_sequences_and_close_frees_device_memory():
    with gert.load(GRU, state=GRU_STATE, batch_dim="N", gears={"batch": [1, 32]}) as model:
        base = gert.memory_info(0).free
        seqs = [model.sequence() for _ in range(3000)]
        used = base - gert.memory_info(0).free
        assert used >= 3000 * HIDDEN * 4
        assert model._sequences.active == 3000
        rng = np.random.default_rng(5)
        outs = model.step([(s, {"x": xs(rng)}) for s in seqs[:100]])
        assert len(outs) == 100
        for s in seqs:
            s.close()
        assert model._sequences.active == 0
        assert base - gert.memory_info(0).free < used // 10  # freed (a few pooled step buffers may remain)


def test_out_of_device_memory_fails_only_the_new_sequence():
    """A 64 MiB device, states of 1 MiB: sequences are created until the device is full; the one that does not fit
    gets a GertError, the others keep stepping; closing one makes room again."""
    res = run_python_result(
        """
        import sys
        sys.path.insert(0, "tests")
        from recurrent_models import gated_model
        H = 1 << 18
        model = gert.load(gated_model(hidden=H), streams=1, state={"h": "h_out"}, batch_dim="N", gears={"batch": [1]})
        seqs, err = [], None
        x = {"x": np.ones((1, 1, H), np.float32), "mode": np.array(1)}
        for _ in range(200):
            try:
                seqs.append(model.sequence())
            except gert.GertError as e:
                err = str(e)
                break
        # the others still step (the step's own I/O buffers need room: a full device runs nothing, so close a few)
        for _ in range(8):
            seqs.pop().close()
        ys = [float(s.run(x)["y"][0, 0, 0]) for s in seqs[:5]]
        hs = [float(s.state["h"][0, 0, 0]) for s in seqs[:5]]
        seqs[0].close()
        again = model.sequence()
        emit({"n": len(seqs), "err": err, "ys": ys, "hs": hs, "again": again.state["h"].shape[2]})
    """,
        env={"GERT_HOST_DEVICE_MEMORY": "64M"},
        timeout=120,
    )
    assert res["err"] is not None and "out of device memory for state 'h'" in res["err"], res
    assert 10 < res["n"] - 8 < 64 - 8
    assert res["hs"] == [1.0] * 5  # h = 0 + x
    assert res["again"] == 1 << 18


# ---- a property over random interleavings ------------------------------------------------------------------------

_EVENTS = st.lists(
    st.tuples(st.sampled_from(["start", "step", "end"]), st.integers(0, 5), st.integers(0, 2**31 - 1)),
    min_size=8,
    max_size=40,
)


@settings(max_examples=60)
@given(events=_EVENTS)
def test_random_interleavings_give_each_sequence_its_own_outputs(model_gru, events):
    """Starts, steps (several sequences in one model.step when consecutive) and ends over 6 slots: every output is
    what that sequence gives when run alone with ONNX Runtime."""
    live: dict = {}
    refs: dict = {}
    batch: list = []

    def flush():
        if batch:
            outs = model_gru.step([(live[k], {"x": x}) for k, x in batch])
            for (k, x), out in zip(batch, outs):
                want = reference(GRU, [{"x": x}], refs[k], GRU_STATE)[0]
                np.testing.assert_allclose(out["y"], want["y"], rtol=1e-5, atol=1e-6)
            batch.clear()

    try:
        for kind, k, seed in events:
            if kind == "step" and k in live and all(k != b for b, _ in batch):
                batch.append((k, xs(np.random.default_rng(seed))))
                continue
            flush()
            if kind == "start":
                if k in live:
                    live[k].reset()
                else:
                    live[k] = model_gru.sequence()
                refs[k] = {"h": zeros()}
            elif kind == "end" and k in live:
                live.pop(k).close()
            elif kind == "step" and k in live:
                batch.append((k, xs(np.random.default_rng(seed))))
        flush()
    finally:
        for s in live.values():
            s.close()


@pytest.fixture(scope="module")
def model_gru():
    with gert.load(GRU, streams=1, state=GRU_STATE, batch_dim="N", gears={"batch": [1, 2, 4, 8]}) as m:
        yield m


# ---- batch on any axis -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_dim", ["N", ["x:1", "h:1"]])
def test_batch_dim_on_axis_1_pads_splits_and_batches_requests(batch_dim):
    rng = np.random.default_rng(6)
    sess = ort_session(GRU)

    def feeds(n):
        return {"x": xs(rng, n), "h": rng.standard_normal((1, n, HIDDEN)).astype(np.float32)}

    with gert.load(GRU, batch_dim=batch_dim, gears={"batch": [1, 4, 8]}, streams=2, split_batch=True) as model:
        assert model.plan.input_axes[("h", 1)] == "batch" and model.plan.output_axes[("y", 1)] == "batch"
        for n in (1, 3, 8, 19):  # padded to a gear, split above the top gear (and over idle streams)
            f = feeds(n)
            out = model.run(f)
            y, h = sess.run(None, f)
            np.testing.assert_allclose(out["y"], y, rtol=1e-5, atol=1e-6, err_msg=f"n={n}")
            np.testing.assert_allclose(out["h_out"], h, rtol=1e-5, atol=1e-6, err_msg=f"n={n}")
        reqs = [feeds(n) for n in (1, 2, 5)]
        for f, out in zip(reqs, model.run(reqs)):  # one batch on axis 1, split back per request
            y, h = sess.run(None, f)
            assert out["y"].shape == y.shape
            np.testing.assert_allclose(out["y"], y, rtol=1e-5, atol=1e-6)
        assert model.stats()["gears"]["batch=8"]["hits"] >= 1


def test_batch_dim_errors_name_the_dim():
    with pytest.raises(GertError, match="batch_dim 'M' is not a dynamic dim name"):
        gert.load(GRU, batch_dim="M")
    with pytest.raises(GertError, match="batch_dim 'x:2'.*fixed"):
        gert.load(GRU, batch_dim=["x:2"])
    with pytest.raises(GertError, match="batch_dim 'z:1' must be 'tensor:axis'"):
        gert.load(GRU, batch_dim=["z:1"])


def test_requests_batch_only_across_equal_values_of_unbatched_inputs():
    rng = np.random.default_rng(7)
    sess = ort_session(GATED)
    with gert.load(GATED, batch_dim="N") as model:
        reqs = [
            {
                "x": rng.standard_normal((1, 1, HIDDEN)).astype(np.float32),
                "h": rng.standard_normal((1, 1, HIDDEN)).astype(np.float32),
                "mode": np.array(m),
            }
            for m in (0, 1, 1, 0, 1)
        ]
        outs = model.run(reqs)
        for f, out in zip(reqs, outs):
            y, h = sess.run(None, f)
            np.testing.assert_allclose(out["y"], y, rtol=1e-6)
            np.testing.assert_allclose(out["h_out"], h, rtol=1e-6)
        hits = model.stats()["gears"]
        assert sum(g["hits"] for g in hits.values()) == 2, hits  # one run per mode value


def test_sequences_spread_over_two_devices_step_on_their_own():
    """Sequences go round robin over the model's devices; a step batches each device's sequences on that device."""
    res = run_python_result(
        """
        import sys
        sys.path.insert(0, "tests")
        from recurrent_models import gru_model, reference
        mb = gru_model()
        model = gert.load(mb, devices=(0, 1), state={"h": "h_out"}, batch_dim="N", gears={"batch": [1, 2, 4]})
        seqs = [model.sequence() for _ in range(5)]
        refs = [{"h": np.zeros((1, 1, 8), np.float32)} for _ in seqs]
        rng = np.random.default_rng(0)
        worst = 0.0
        for _ in range(6):
            xs = [rng.standard_normal((1, 1, 4)).astype(np.float32) for _ in seqs]
            outs = model.step([(s, {"x": x}) for s, x in zip(seqs, xs)])
            for x, o, r in zip(xs, outs, refs):
                worst = max(worst, float(np.abs(o["y"] - reference(mb, [{"x": x}], r, {"h": "h_out"})[0]["y"]).max()))
        per_device = {}
        for s in model.stats()["streams"]:
            per_device[s["device"]] = per_device.get(s["device"], 0) + s["requests"]
        emit({"devices": [s.device for s in seqs], "worst": worst, "runs": per_device})
    """,
        env={"GERT_HOST_DEVICES": "2"},
        timeout=120,
    )
    assert res["devices"] == [0, 1, 0, 1, 0]
    assert res["worst"] < 1e-5
    assert res["runs"] == {"0": 6, "1": 6}  # one batched run per device per step


def test_steps_reset_and_state_from_a_thread_without_the_device_context():
    """Threads the runtime never bound to the device (Triton's, a pool's) step batches, reset and read states: the
    gather and scatter run on the stream, the rest through DeviceBuffer calls that bind the context themselves."""
    rng = np.random.default_rng(8)
    with gert.load(GRU, state=GRU_STATE, batch_dim="N", gears={"batch": [1, 4]}) as model:
        seqs = [model.sequence() for _ in range(3)]
        model.step([(s, {"x": xs(rng)}) for s in seqs])  # buffers pooled by this thread
        for s in seqs:
            s.reset()
        refs = [{"h": zeros()} for _ in seqs]
        got = {}

        def in_thread(_):
            x = xs(rng)
            outs = model.step([(s, {"x": x}) for s in seqs])
            seqs[0].reset()
            got["y"], got["x"], got["h1"] = [o["y"] for o in outs], x, seqs[1].state["h"]

        assert run_threads(in_thread, 1) == []
        for y, ref in zip(got["y"], refs):
            np.testing.assert_allclose(
                y, reference(GRU, [{"x": got["x"]}], ref, GRU_STATE)[0]["y"], rtol=1e-5, atol=1e-6
            )
        np.testing.assert_allclose(got["h1"], refs[1]["h"], rtol=1e-5, atol=1e-6)
        assert not seqs[0].state["h"].any()
