"""Recurrent models for the stateful-model tests (issue 14), built with onnx.helper: the state's batch on axis 1
([layers, batch, hidden]) as ONNX's GRU and LSTM lay it out, and one that branches on an input scalar."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from models import _const, make_model, ort_session, vi

INPUT, HIDDEN = 4, 8


def _weights(seed: int, gates: int, hidden: int) -> list:
    """W, R, B initializers of a one-direction RNN with ``gates`` gates (GRU 3, LSTM 4)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((1, gates * hidden, INPUT)).astype(np.float32) * 0.5
    r = rng.standard_normal((1, gates * hidden, hidden)).astype(np.float32) * 0.5
    b = rng.standard_normal((1, 2 * gates * hidden)).astype(np.float32) * 0.1
    return [_const("W", w), _const("R", r), _const("B", b)]


def gru_model(seed: int = 0, batch="N", hidden: int = HIDDEN) -> bytes:
    """x [1, N, 4], h [1, N, H] -> y [1, N, H] (= 2*tanh(h_out)), h_out [1, N, H]: one GRU step."""
    nodes = [
        helper.make_node("GRU", ["x", "W", "R", "B", "", "h"], ["Y", "h_out"], hidden_size=hidden),
        helper.make_node("Tanh", ["h_out"], ["t"]),
        helper.make_node("Add", ["t", "t"], ["y"]),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, [1, batch, INPUT]), vi("h", np.float32, [1, batch, hidden])],
        [vi("y", np.float32, [1, batch, hidden]), vi("h_out", np.float32, [1, batch, hidden])],
        _weights(seed, 3, hidden),
        name="gru_step",
    )


def lstm_model(seed: int = 1, batch="N", hidden: int = HIDDEN) -> bytes:
    """x [1, N, 4], h [1, N, H], c [1, N, H] -> y [1, N, H], h_out, c_out: one LSTM step (two states)."""
    nodes = [
        helper.make_node("LSTM", ["x", "W", "R", "B", "", "h", "c"], ["Y", "h_out", "c_out"], hidden_size=hidden),
        helper.make_node("Squeeze", ["Y", "one"], ["y"]),
    ]
    return make_model(
        nodes,
        [
            vi("x", np.float32, [1, batch, INPUT]),
            vi("h", np.float32, [1, batch, hidden]),
            vi("c", np.float32, [1, batch, hidden]),
        ],
        [
            vi("y", np.float32, [1, batch, hidden]),
            vi("h_out", np.float32, [1, batch, hidden]),
            vi("c_out", np.float32, [1, batch, hidden]),
        ],
        _weights(seed, 4, hidden) + [_const("one", np.array([1], np.int64))],
        name="lstm_step",
    )


def gated_model(hidden: int = HIDDEN) -> bytes:
    """x [1, N, H], h [1, N, H], mode (0-d int64, no batch axis) -> y, h_out: an If on the scalar picks
    h_out = h + x (mode != 0) or h_out = h * 0.5 + x (mode == 0)."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["h", "x"], ["a"])],
        "then",
        [],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, "N", hidden])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["h", "half"], ["m"]), helper.make_node("Add", ["m", "x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, "N", hidden])],
    )
    nodes = [
        helper.make_node("Cast", ["mode"], ["cond"], to=TensorProto.BOOL),
        helper.make_node("If", ["cond"], ["h_out"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Sigmoid", ["h_out"], ["y"]),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, [1, "N", hidden]), vi("h", np.float32, [1, "N", hidden]), vi("mode", np.int64, [])],
        [vi("y", np.float32, [1, "N", hidden]), vi("h_out", np.float32, [1, "N", hidden])],
        [_const("half", np.array(0.5, np.float32))],
        name="gated",
    )


def reference(model: bytes, steps: list, state: dict, pairs: dict) -> list:
    """ONNX Runtime, one step at a time with the state fed back by hand: the outputs of each step (state outputs
    left out); ``state`` (state input -> array) is updated in place."""
    sess = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    outs = []
    for feeds in steps:
        got = dict(zip(names, sess.run(names, {**feeds, **state})))
        for i, o in pairs.items():
            state[i] = got[o]
        outs.append({k: v for k, v in got.items() if k not in pairs.values()})
    return outs


def run_threads(target, n: int, timeout: float = 120.0) -> list:
    """target(i) in n threads at once; the exceptions they raised."""
    import threading

    errors: list = []

    def run(i: int) -> None:
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return errors + [TimeoutError(f"{t.name} still running")] * sum(t.is_alive() for t in threads)
