"""Property (issue 22): over every in-process front door x models with named, unnamed and 0-size dims, the batch on
axis 0 and on axis 1, outputs with and without the batch axis, gears with padding, each request's outputs equal ONNX
Runtime run on that request alone, or the load refuses cleanly (a GertError).

Front doors: Model.run, run(list), run_batch, split_batch (two streams), submit from threads, gert_triton's
execute (through tests/fake_pb_utils.py); for a stateful model model.step and seq.run from threads.
"""

from __future__ import annotations

import concurrent.futures
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import helper

import fake_pb_utils
import gert
from models import _const, make_model, ort_session, vi

HID = 6


# ---- models --------------------------------------------------------------------------------------------------------


def _affine(batch, name: str) -> bytes:
    """x [B, 4] -> y = x * 2 + 1 [B, 4], s = ReduceSum(x, axis 1) [B]."""
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["x2"]),
        helper.make_node("Add", ["x2", "one"], ["y"]),
        helper.make_node("ReduceSum", ["x", "ax1"], ["s"], keepdims=0),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, [batch, 4])],
        [vi("y", np.float32, [batch, 4]), vi("s", np.float32, [batch])],
        [
            _const("two", np.array(2, np.float32)),
            _const("one", np.array(1, np.float32)),
            _const("ax1", np.array([1], np.int64)),
        ],
        name=name,
    )


def _axis1() -> bytes:
    """x [1, B, 4] (batch on axis 1, unnamed) -> y = Tanh(x) [1, B, 4], z = Squeeze(x, 0) * 3 [B, 4]."""
    nodes = [
        helper.make_node("Tanh", ["x"], ["y"]),
        helper.make_node("Squeeze", ["x", "zero"], ["sq"]),
        helper.make_node("Mul", ["sq", "three"], ["z"]),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, [1, None, 4])],
        [vi("y", np.float32, [1, None, 4]), vi("z", np.float32, [None, 4])],
        [_const("zero", np.array([0], np.int64)), _const("three", np.array(3, np.float32))],
        name="ax1",
    )


def _reduce() -> bytes:
    """x [N, 4] -> y = x + 1 [N, 4], m = ReduceMax over the batch [4] (an output without the batch axis)."""
    nodes = [
        helper.make_node("Add", ["x", "one"], ["y"]),
        helper.make_node("ReduceMax", ["x", "ax0"], ["m"], keepdims=0),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, ["N", 4])],
        [vi("y", np.float32, ["N", 4]), vi("m", np.float32, [4])],
        [_const("one", np.array(1, np.float32)), _const("ax0", np.array([0], np.int64))],
        name="reduce",
        opset=18,
    )


def _scalar_and_empty() -> bytes:
    """x [N, 3], k [] (0-d, no batch axis), e [N, 0] -> y = x * k [N, 3], c = Concat(x, e) [N, 3], kk = -k []."""
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["y"]),
        helper.make_node("Concat", ["x", "e"], ["c"], axis=1),
        helper.make_node("Neg", ["k"], ["kk"]),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, ["N", 3]), vi("k", np.float32, []), vi("e", np.float32, ["N", 0])],
        [vi("y", np.float32, ["N", 3]), vi("c", np.float32, ["N", 3]), vi("kk", np.float32, [])],
        name="scalar_empty",
    )


def _rnn() -> bytes:
    """x [?, 3], h [1, ?, HID] -> h_out = Tanh(x W + h U) [1, ?, HID], y = Squeeze(h_out, 0) [?, HID]; unnamed."""
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"]),
        helper.make_node("MatMul", ["h", "U"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["c"]),
        helper.make_node("Tanh", ["c"], ["h_out"]),
        helper.make_node("Squeeze", ["h_out", "zero"], ["y"]),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, [None, 3]), vi("h", np.float32, [1, None, HID])],
        [vi("y", np.float32, [None, HID]), vi("h_out", np.float32, [1, None, HID])],
        [
            _const("W", rng.standard_normal((3, HID)).astype(np.float32) * 0.5),
            _const("U", rng.standard_normal((HID, HID)).astype(np.float32) * 0.5),
            _const("zero", np.array([0], np.int64)),
        ],
        name="rnn",
    )


def _rows_axis0(width: int):
    return lambda rng, n: {"x": rng.integers(-50, 50, (n, width)).astype(np.float32)}


FAMILIES = {  # name -> (model, load kwargs, request maker (rng, rows) -> feeds)
    "named": (_affine("batch", "named"), {}, _rows_axis0(4)),
    "unnamed": (_affine(None, "unnamed"), {}, _rows_axis0(4)),
    "unnamed_batch_dim": (_affine(None, "unnamed2"), {"batch_dim": ["x:0"]}, _rows_axis0(4)),
    "axis1": (_axis1(), {"batch_dim": "x:1"}, lambda rng, n: {"x": rng.integers(-5, 5, (1, n, 4)).astype(np.float32)}),
    # all negative: a zero pad row, or another request's row, would change the max
    "reduce": (_reduce(), {}, lambda rng, n: {"x": rng.integers(-50, -1, (n, 4)).astype(np.float32)}),
    "scalar_empty": (
        _scalar_and_empty(),
        {"batch_dim": "N"},
        lambda rng, n: {
            "x": rng.integers(-9, 9, (n, 3)).astype(np.float32),
            "k": np.array(3, np.float32),
            "e": np.zeros((n, 0), np.float32),
        },
    ),
}
GEARS = [None, [1, 2, 4], [2, 8], [3]]
_ORT: dict = {}


def ort_alone(model: bytes, feeds: dict) -> dict:
    sess = _ORT.get(model)
    if sess is None:
        sess = _ORT[model] = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def assert_alone(model: bytes, feeds: dict, got: dict, what: str) -> None:
    want = ort_alone(model, feeds)
    assert sorted(got) == sorted(want), what
    for k, w in want.items():
        g = np.asarray(got[k])
        assert g.shape == w.shape and g.dtype == w.dtype, (what, k, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{what}: output {k}")


def load(model: bytes, kwargs: dict, gears, gear_key: str = "batch", **more):
    """gert.load, or None when it refuses cleanly (a GertError, as the property allows). ``gear_key``: the batch
    dim's name the gears are keyed by ("batch", or "input:axis")."""
    kw = dict(kwargs, **more)
    if gears is not None:
        kw["gears"] = {gear_key: gears}
    try:
        return gert.load(model, **kw)
    except gert.GertError:
        return None


# ---- stateless front doors -------------------------------------------------------------------------------------


def _run_door(m, door: str, reqs: list) -> list:
    if door in ("run", "split_batch"):
        return [m.run(r) for r in reqs]
    if door == "run_list":
        return m.run(reqs)
    if door == "run_batch":
        return m.run_batch(reqs)
    if door == "threads":
        futures = [m.submit(r) for r in reqs]
        return [f.result(timeout=60) for f in futures]
    raise AssertionError(door)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    gears=st.sampled_from(GEARS),
    by_axis=st.booleans(),
    door=st.sampled_from(["run", "run_list", "run_batch", "split_batch", "threads"]),
    rows=st.lists(st.integers(1, 9), min_size=1, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_every_request_gets_exactly_its_own_result(family, gears, by_axis, door, rows, seed):
    model, kwargs, make = FAMILIES[family]
    more = {"streams": 2, "split_batch": True} if door == "split_batch" else {}
    m = load(model, kwargs, gears, ("x:1" if family == "axis1" else "x:0") if by_axis else "batch", **more)
    if m is None:
        return
    rng = np.random.default_rng(seed)
    reqs = [make(rng, n) for n in rows]
    with m:
        try:
            results = _run_door(m, door, reqs)
        except gert.GertError as e:  # a size the gears do not take (exact policy) is refused, by name
            assert "gear" in str(e), e
            return
        for i, (r, got) in enumerate(zip(reqs, results)):
            assert_alone(model, r, got, f"{family} {door} gears={gears} request {i} of {rows}")
        if door == "run_list" and len(rows) > 1:
            # the same total again, the sizes in another order: the compiled hot path's merge where the first list
            # prepared it (gert/core/_merge.pyx join, as Batcher.merge), the Python path's elsewhere
            again = [make(rng, n) for n in rows[1:] + rows[:1]]
            for i, (r, got) in enumerate(zip(again, m.run(again))):
                assert_alone(model, r, got, f"{family} {door} again gears={gears} request {i} of {rows}")


# ---- gert_triton's execute --------------------------------------------------------------------------------------


def _triton_model(tmp, monkeypatch, model: bytes, name: str, gears):
    pb = fake_pb_utils.install(monkeypatch)
    d = os.path.join(tmp, name)
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    with open(os.path.join(d, "1", "model.onnx"), "wb") as f:
        f.write(model)
    pb.set_model_dir(d)
    params = {"streams": {"string_value": "1"}}
    if gears is not None:
        params["gears"] = {"string_value": "batch:" + ",".join(str(g) for g in gears)}
    from gert_triton import TritonPythonModel

    cfg = TritonPythonModel.auto_complete_config(pb.ModelConfig(pb.default_config(name, parameters=params))).as_dict()
    tm = TritonPythonModel()
    tm.initialize(
        {
            "model_config": json.dumps(cfg),
            "model_instance_kind": "CPU",
            "model_instance_name": f"{name}_0",
            "model_instance_device_id": "0",
            "model_repository": d,
            "model_version": "1",
            "model_name": name,
        }
    )
    return pb, tm, cfg


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    family=st.sampled_from(["named", "unnamed", "reduce"]),
    gears=st.sampled_from([None, [1, 2, 4], [2, 8]]),
    rows=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_triton_execute_gives_every_request_its_own_result(tmp_path_factory, family, gears, rows, seed):
    model, _, make = FAMILIES[family]
    mp = pytest.MonkeyPatch()
    try:
        try:
            pb, tm, cfg = _triton_model(str(tmp_path_factory.mktemp("repo")), mp, model, family, gears)
        except gert.GertError as e:
            assert "gears" not in str(e) or "parameter" not in str(e), e  # the parameters themselves are right
            return
        assert tm.model.plan.batch.gears == tuple(gears or tm.model.plan.batch.gears), cfg
        try:
            rng = np.random.default_rng(seed)
            reqs = [make(rng, n) for n in rows]
            names = [o["name"] for o in cfg["output"]]
            responses = tm.execute([pb.InferenceRequest([pb.Tensor(k, v) for k, v in r.items()], names) for r in reqs])
            for i, (r, resp) in enumerate(zip(reqs, responses)):
                if resp.has_error():
                    assert "gear" in resp.error().message(), resp.error().message()
                    continue
                got = {t.name(): t.as_numpy() for t in resp.output_tensors()}
                assert_alone(model, r, got, f"triton {family} gears={gears} request {i} of {rows}")
        finally:
            tm.finalize()
    finally:
        mp.undo()


# ---- stateful front doors ---------------------------------------------------------------------------------------

RNN = _rnn()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    gears=st.sampled_from([None, [1, 2, 4], [4]]),
    door=st.sampled_from(["step", "seq_run_threads"]),
    sequences=st.integers(1, 5),
    steps=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_every_sequence_gets_exactly_its_own_steps(gears, door, sequences, steps, seed):
    more = {"sequence_wait_s": 0.002} if door == "seq_run_threads" else {}
    m = load(RNN, {"state": {"h": "h_out"}, "batch_dim": ["x:0", "h:1"]}, gears, **more)
    if m is None:
        return
    rng = np.random.default_rng(seed)
    with m:
        seqs = [m.sequence() for _ in range(sequences)]
        h = [np.zeros((1, 1, HID), np.float32) for _ in seqs]
        for step in range(steps):
            xs = [rng.standard_normal((1, 3)).astype(np.float32) for _ in seqs]
            if door == "step":
                outs = m.step([(s, {"x": x}) for s, x in zip(seqs, xs)])
            else:
                with concurrent.futures.ThreadPoolExecutor(len(seqs)) as pool:
                    outs = list(pool.map(lambda sx: sx[0].run({"x": sx[1]}), zip(seqs, xs)))
            for i, (out, x) in enumerate(zip(outs, xs)):
                want = ort_alone(RNN, {"x": x, "h": h[i]})
                assert sorted(out) == ["y"]
                np.testing.assert_allclose(
                    out["y"], want["y"], rtol=1e-5, atol=1e-5, err_msg=f"{door} step {step} sequence {i}"
                )
                np.testing.assert_allclose(seqs[i].state["h"], want["h_out"], rtol=1e-5, atol=1e-5)
                h[i] = want["h_out"]


# ---- gert_triton's sequence batching ------------------------------------------------------------------------------

_CONTROLS = [
    {"name": n, "control": [{"kind": f"CONTROL_SEQUENCE_{n}", "int32_false_true": [0, 1]}]}
    for n in ("START", "END", "READY")
] + [{"name": "CORRID", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_UINT64"}]}]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    gears=st.sampled_from([None, [1, 2, 4], [4]]),
    sequences=st.integers(1, 5),
    steps=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_triton_sequence_execute_gives_every_sequence_its_own_steps(tmp_path_factory, gears, sequences, steps, seed):
    """One execute() per step with a request of every live sequence (START on the first, END on the last), as
    Triton's sequence batcher sends them: each sequence's output equals ONNX Runtime stepping it alone."""
    from recurrent_models import HIDDEN, INPUT, gru_model

    gru = gru_model()
    mp = pytest.MonkeyPatch()
    try:
        pb = fake_pb_utils.install(mp)
        d = os.path.join(str(tmp_path_factory.mktemp("seqrepo")), "gru")
        os.makedirs(os.path.join(d, "1"))
        with open(os.path.join(d, "1", "model.onnx"), "wb") as f:
            f.write(gru)
        params = {
            "state": {"string_value": "h:h_out"},
            "batch_dim": {"string_value": "N"},
            "streams": {"string_value": "1"},
        }
        if gears is not None:
            params["gears"] = {"string_value": "N:" + ",".join(str(g) for g in gears)}
        pb.set_model_dir(d)
        from gert_triton import TritonPythonModel

        fields = {
            "max_batch_size": 8,
            "parameters": params,
            "sequence_batching": {"max_sequence_idle_microseconds": "60000000", "control_input": _CONTROLS},
        }
        cfg = TritonPythonModel.auto_complete_config(pb.ModelConfig(pb.default_config("gru", **fields))).as_dict()
        tm = TritonPythonModel()
        tm.initialize(
            {
                "model_config": json.dumps(cfg),
                "model_instance_kind": "CPU",
                "model_instance_name": "gru_0",
                "model_instance_device_id": "0",
                "model_repository": d,
                "model_version": "1",
                "model_name": "gru",
            }
        )
        try:
            rng = np.random.default_rng(seed)
            h = {k: np.zeros((1, 1, HIDDEN), np.float32) for k in range(1, sequences + 1)}
            for step in range(steps):
                xs = {k: rng.standard_normal((1, 1, INPUT)).astype(np.float32) for k in h}  # Triton's [1, 1, 4]
                reqs = []
                for k, x in xs.items():
                    start, end = step == 0, step == steps - 1
                    tensors = [pb.Tensor("x", x)] + [
                        pb.Tensor(n, np.array([[int(v)]], np.int32))
                        for n, v in (("START", start), ("END", end), ("READY", True))
                    ]
                    tensors.append(pb.Tensor("CORRID", np.array([[k]], np.uint64)))
                    reqs.append(
                        pb.InferenceRequest(
                            tensors, ["y"], correlation_id=k, flags=(1 if start else 0) | (2 if end else 0)
                        )
                    )
                responses = tm.execute(reqs)
                for (k, x), resp in zip(xs.items(), responses):
                    assert not resp.has_error(), resp.error().message()
                    got = {t.name(): t.as_numpy() for t in resp.output_tensors()}["y"]
                    want = ort_alone(gru, {"x": np.moveaxis(x, 0, 1), "h": h[k]})
                    np.testing.assert_allclose(
                        got,
                        np.moveaxis(want["y"], 1, 0),
                        rtol=1e-5,
                        atol=1e-5,
                        err_msg=f"gears={gears} step {step} sequence {k}",
                    )
                    h[k] = want["h_out"]
        finally:
            tm.finalize()
    finally:
        mp.undo()
