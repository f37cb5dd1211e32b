"""The request pipeline never hands a request rows it did not send (issue 22; R4 and R8 of issue 31).

Each model is built with onnx.helper; every result is compared with ONNX Runtime run on that request alone.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import gert
from models import _const, make_model, ort_session, vi

HID = 16


def ort_alone(model: bytes, feeds: dict) -> dict:
    sess = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def assert_same(got: dict, want: dict, what: str = "") -> None:
    assert sorted(got) == sorted(want), what
    for k in want:
        assert got[k].shape == want[k].shape, (what, k, got[k].shape, want[k].shape)
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=f"{what} {k}")


def unnamed_mlp() -> bytes:
    """x [?, 8] -> y [?, 4]: the batch dim has no name in the file (as exported speech / detection models)."""
    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    return make_model(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        [vi("x", np.float32, [None, 8])],
        [vi("y", np.float32, [None, 4])],
        [_const("W", w)],
        name="unnamed_mlp",
    )


def unnamed_rnn() -> bytes:
    """The issue's 5-node RNN: MatMul(x, W) + MatMul(h, U) -> Tanh -> h_out; Squeeze(h_out, 0) -> y, all ? unnamed."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"]),
        helper.make_node("MatMul", ["h", "U"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["c"]),
        helper.make_node("Tanh", ["c"], ["h_out"]),
        helper.make_node("Squeeze", ["h_out", "zero"], ["y"]),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, [None, 8]), vi("h", np.float32, [1, None, HID])],
        [vi("y", np.float32, [None, HID]), vi("h_out", np.float32, [1, None, HID])],
        [
            _const("W", rng.standard_normal((8, HID)).astype(np.float32) * 0.5),
            _const("U", rng.standard_normal((HID, HID)).astype(np.float32) * 0.5),
            _const("zero", np.array([0], np.int64)),
        ],
        name="unnamed_rnn",
    )


def reduce_max_model() -> bytes:
    """x [N, 4] -> y [4] = max over the batch (R8: an output without the batch axis)."""
    return make_model(
        [helper.make_node("ReduceMax", ["x", "ax"], ["y"], keepdims=0)],
        [vi("x", np.float32, ["N", 4])],
        [vi("y", np.float32, [4])],
        [_const("ax", np.array([0], np.int64))],
        name="rmax",
        opset=18,
    )


def flatten_model() -> bytes:
    """x [N, 4] -> y [?] = Reshape(x, [-1]): the batch hides in a dim inference cannot name."""
    return make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [vi("x", np.float32, ["N", 4])],
        [vi("y", np.float32, [None])],
        [_const("shape", np.array([-1], np.int64))],
        name="flat",
    )


def rows(n: int, seed: int, width: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, width)).astype(np.float32)


# ---- unnamed batch dim, batch_dim=["x:0"]: padding rows never leak ------------------------------------------------


@pytest.mark.parametrize("batch_dim", [None, ["x:0"], "x:0"])
def test_unnamed_batch_run_slices_off_padding(batch_dim):
    model = unnamed_mlp()
    with gert.load(model, batch_dim=batch_dim, gears={"batch": [1, 4, 8]}) as m:
        for n in (3, 5, 1, 8, 11):
            x = rows(n, n)
            assert_same(m.run({"x": x}), ort_alone(model, {"x": x}), f"{n} rows")


def test_unnamed_batch_run_list_and_run_batch_give_each_request_its_rows():
    model = unnamed_mlp()
    reqs = [{"x": rows(n, 10 + n)} for n in (1, 2, 2)]
    with gert.load(model, batch_dim=["x:0"], gears={"batch": [1, 4, 8]}) as m:
        for results in (m.run(reqs), m.run_batch(reqs)):
            for i, (r, got) in enumerate(zip(reqs, results)):
                assert_same(got, ort_alone(model, r), f"request {i}")


def test_unnamed_rnn_step_gives_each_sequence_its_own_rows():
    model = unnamed_rnn()
    xs = [rows(1, 20 + i) for i in range(3)]
    with gert.load(model, state={"h": "h_out"}, batch_dim=["x:0", "h:1"], gears={"batch": [1, 2, 4]}) as m:
        assert m.plan.batch_axis("y", output=True) == 0 and m.plan.batch_axis("h_out", output=True) == 1
        seqs = [m.sequence() for _ in xs]
        h = [np.zeros((1, 1, HID), np.float32) for _ in xs]
        for _ in range(2):
            outs = m.step([(s, {"x": x}) for s, x in zip(seqs, xs)])
            for i, (out, x) in enumerate(zip(outs, xs)):
                want = ort_alone(model, {"x": x, "h": h[i]})
                assert_same(out, {"y": want["y"]}, f"sequence {i}")
                np.testing.assert_allclose(seqs[i].state["h"], want["h_out"], rtol=1e-5, atol=1e-5)
                h[i] = want["h_out"]


# ---- the batch dim by any of its names --------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["N", "batch", "x:1", "h:1"])
def test_batch_dim_addressable_by_every_name(key):
    from recurrent_models import gru_model

    model = gru_model()
    with gert.load(
        model,
        state={"h": "h_out"},
        batch_dim="N",
        gears={key: [1, 2, 4, 8]},
        shape_policy={key: "pad"},
        output_dims={"y": {1: key}},
    ) as m:
        assert m.plan.batch.gears == (1, 2, 4, 8) and m.plan.batch.policy == "pad"
        assert m.plan.batch_axis("y", output=True) == 1
        s1, s2, s3 = (m.sequence() for _ in range(3))
        x = np.ones((1, 1, 4), np.float32)
        outs = m.step([(s, {"x": x * (i + 1)}) for i, s in enumerate((s1, s2, s3))])
        for i, out in enumerate(outs):
            want = ort_alone(model, {"x": x * (i + 1), "h": np.zeros((1, 1, 8), np.float32)})
            assert_same(out, {"y": want["y"]}, f"sequence {i}")


def test_unknown_dim_name_names_the_aliases():
    with pytest.raises(gert.GertError, match="'M' is not a dynamic dim of the model"):
        gert.load(unnamed_mlp(), gears={"M": [1, 2]})


# ---- outputs without the batch axis (R8) --------------------------------------------------------------------------


def test_reduction_over_the_batch_sees_only_the_request():
    """R8: default settings padded run(3 rows) to 4 with zero rows (max [0 0 0 0]) and merged run([a, b])."""
    model = reduce_max_model()
    a = -np.arange(1, 13, dtype=np.float32).reshape(3, 4)  # all negative: a zero pad row would win the max
    b = np.full((1, 4), 100, np.float32)
    with gert.load(model) as m:
        assert m.plan.unsplit == ("y",) and not m.plan.separable and m.plan.batch.policy == "exact"
        assert_same(m.run({"x": a}), ort_alone(model, {"x": a}))
        for results in (m.run([{"x": a}, {"x": b}]), m.run_batch([{"x": a}, {"x": b}])):
            assert_same(results[0], ort_alone(model, {"x": a}), "a")
            assert_same(results[1], ort_alone(model, {"x": b}), "b")


def test_reduction_with_pad_is_refused():
    with pytest.raises(gert.GertError, match=r"output 'y' are not proved independent \(node ReduceMax.*batch axis 0"):
        gert.load(reduce_max_model(), shape_policy={"batch": "pad"})


def test_output_whose_batch_axis_is_not_proved_runs_requests_alone_and_says_why():
    """Reshape [N, 4] -> [4N]: no output axis carries the batch, so the proof cannot show one request's rows are one
    slice: the load says so (naming the node) and each request runs alone, unpadded; 'pad' is refused."""
    model = flatten_model()
    x = rows(3, 1, 4)
    with pytest.warns(gert.RowsNotIndependent, match=r"output 'y'.*Reshape.*moves values between rows"):
        m = gert.load(model)
    with m:
        assert m.plan.batch.policy == "exact" and not m.plan.separable
        got = m.run([{"x": x}, {"x": x[:1]}])
        assert_same(got[0], ort_alone(model, {"x": x}))
        assert_same(got[1], ort_alone(model, {"x": x[:1]}))
    with pytest.raises(gert.GertError, match=r"output 'y' are not proved independent"):
        gert.load(model, shape_policy={"batch": "pad"})
    with gert.load(model, output_dims={"y": {}}) as m:  # "it has no batch axis": requests run alone, unpadded
        assert m.plan.batch.policy == "exact"
        assert_same(m.run({"x": x}), ort_alone(model, {"x": x}))
        got = m.run([{"x": x}, {"x": x[:1]}])
        assert_same(got[1], ort_alone(model, {"x": x[:1]}))
    with gert.load(model, shape_policy={"batch": "exact"}) as m:
        assert_same(m.run({"x": x}), ort_alone(model, {"x": x}))


def test_output_not_computed_from_the_batch_is_returned_whole():
    """An output that depends only on an input without the batch axis is the same for every request: merging is
    fine."""
    nodes = [helper.make_node("Mul", ["x", "k"], ["y"]), helper.make_node("Neg", ["k"], ["z"])]
    model = make_model(
        nodes,
        [vi("x", np.float32, ["N", 4]), vi("k", np.float32, [])],
        [vi("y", np.float32, ["N", 4]), vi("z", np.float32, [])],
    )
    k = np.array(3, np.float32)
    reqs = [{"x": rows(n, n, 4), "k": k} for n in (1, 3)]
    with gert.load(model, batch_dim="N") as m:
        assert m.plan.separable and m.plan.batch.policy == "pad"
        for r, got in zip(reqs, m.run_batch(reqs)):
            assert_same(got, ort_alone(model, r))


# ---- a batched step is all-or-nothing (R4) ------------------------------------------------------------------------


@pytest.mark.hostnpu_only  # gert.inject_fault
@pytest.mark.parametrize("after", [3, 4, 5, 6])
def test_batched_step_failing_halfway_leaves_every_state_as_it_was(after):
    from recurrent_models import gru_model

    model = gru_model()
    with gert.load(model, state={"h": "h_out"}, batch_dim="N") as m:
        s1, s2 = m.sequence(), m.sequence()
        xs = [np.full((1, 1, 4), v, np.float32) for v in (0.5, -0.25, 1.0)]
        m.step([(s1, {"x": xs[0]}), (s2, {"x": xs[1]})])  # compiles the batch-2 graph
        before = [s1.state["h"], s2.state["h"]]
        gert.inject_fault("memcpy", device=0, after=after, count=1)
        try:
            try:
                m.step([(s1, {"x": xs[2]}), (s2, {"x": xs[2]})])
                failed = False
            except gert.GertError:
                failed = True
        finally:
            gert.clear_faults()
        states = [s1.state["h"], s2.state["h"]]
        if failed:  # nothing advanced: a retry steps from the old states
            for b, s in zip(before, states):
                np.testing.assert_array_equal(s, b)
            assert s1.steps == s2.steps == 1
        else:
            for b, s in zip(before, states):
                np.testing.assert_allclose(s, ort_alone(model, {"x": xs[2], "h": b})["h_out"], rtol=1e-5, atol=1e-5)
        outs = m.step([(s1, {"x": xs[2]}), (s2, {"x": xs[2]})])
        for out, b in zip(outs, states):
            assert_same(out, {"y": ort_alone(model, {"x": xs[2], "h": b})["y"]})


def test_ort_facade_refuses_none_instead_of_nan():
    """R9: None for a 0-d float input became NaN through np.asarray(None, float32); ONNX Runtime fails the run."""
    model = make_model(
        [helper.make_node("Mul", ["x", "s"], ["y"])],
        [vi("x", np.float32, ["N", 4]), vi("s", np.float32, [])],
        [vi("y", np.float32, ["N", 4])],
        name="scalar_mul",
    )
    with gert.InferenceSession(model) as sess:
        with pytest.raises(gert.GertError, match="Missing Input: s"):  # ONNX Runtime's Fail
            sess.run(None, {"x": np.ones((2, 4), np.float32), "s": None})
        assert (
            sess.run(None, {"x": np.ones((2, 4), np.float32), "s": np.array(2, np.float32)})[0].tolist()
            == [[2.0] * 4] * 2
        )
