"""The closed-model error once (issue 39 step 5): after close(), every front door raises gert.ModelClosed with the
one wording: Model.run (one request, a list, on the compiled lane too), submit, run_async, a new sequence, a step of
a sequence the close closed, model.step, gert.InferenceSession.run (ONNX Runtime's Fail, translating it)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from onnx import helper

import gert
from _helpers import RUNTIME
from models import make_model, vi
from recurrent_models import INPUT, gru_model

pytestmark = RUNTIME

RELU = make_model(
    [helper.make_node("Relu", ["x"], ["y"])],
    [vi("x", np.float32, ["N", 4])],
    [vi("y", np.float32, ["N", 4])],
)
X = {"x": np.ones((2, 4), np.float32)}


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - the error is the result
        return e
    raise AssertionError("no error after close()")


def _is_model_closed(e: BaseException, where: str) -> None:
    assert type(e) is gert.ModelClosed, f"{where}: {e!r}"
    assert str(e) == gert.ModelClosed.MESSAGE, f"{where}: {e}"


def test_every_front_door_of_a_model_raises_model_closed():
    model = gert.load(RELU)
    for _ in range(4):  # the signature runs often enough to take the compiled lane
        model.run(X)
    model.close()
    doors = {
        "run": lambda: model.run(X),
        "run(list)": lambda: model.run([X, X]),
        "submit": lambda: model.submit(X).result(60),
        "run_async": lambda: asyncio.run(model.run_async(X)),
    }
    for where, fn in doors.items():
        _is_model_closed(_raised(fn), where)


def test_sequences_raise_model_closed_after_the_models_close():
    model = gert.load(gru_model(), state={"h": "h_out"})
    seq = model.sequence()
    x = {"x": np.ones((1, 1, INPUT), np.float32)}
    seq.run(x)
    own = model.sequence()
    own.close()
    with pytest.raises(gert.GertError, match=f"sequence {own.id} is closed") as got:  # its own close: its own words
        own.run(x)
    assert type(got.value) is gert.GertError
    model.close()
    _is_model_closed(_raised(lambda: model.sequence()), "sequence()")
    _is_model_closed(_raised(lambda: seq.run(x)), "seq.run")
    _is_model_closed(_raised(lambda: model.step([(seq, x)])), "step")


def test_inference_session_after_close_translates_model_closed():
    sess = gert.InferenceSession(RELU)
    sess.run(None, X)
    sess.close()
    e = _raised(lambda: sess.run(None, X))
    assert "[ONNXRuntimeError] : 1 : FAIL" in str(e) and str(e).endswith(gert.ModelClosed.MESSAGE), e
    _is_model_closed(e.gert_error, "InferenceSession.run")
