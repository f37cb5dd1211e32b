"""Error classification once (issue 39 step 5): gert/core/error_kinds.py says what kind a failure is, and every
answer maps from it: Triton's error code (gert_triton/error_codes.py), a server's error class (Recovery), the retry
of a failed merged batch's members alone (batch_queue.run_isolated), ONNX Runtime's exception (gert/ort_io.py).
One table of representative exceptions, each with its kind and every answer."""

from __future__ import annotations

import pytest

import gert
from gert.core import batch_queue
from gert.core.error_kinds import ErrorKind, error_class, in_chain, is_runtime_failure, kind_of
from gert.core.validate import InputError
from gert.errors import AclError, DeviceUnavailable, GeError, GertError, HostFunctionError, ModelClosed, RequestTimeout
from gert.ort_io import ort_run_error
from gert_triton.error_codes import triton_code

K = ErrorKind


def _caused(e: BaseException, cause: BaseException) -> BaseException:
    e.__cause__ = cause
    return e


IA, UN, IN = "INVALID_ARG", "UNAVAILABLE", "INTERNAL"
ORT_STATUS = "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : bad"
# (name, exception, kind, error_class, Triton's code, its code while checking a request, whether a failed merged
#  batch's members run again alone, ONNX Runtime's class for it: None = raised as it is)
TABLE = [
    ("bad input", InputError("input 'x': rank 2, got 1", "rank", "x", 2, 1), K.INVALID, "invalid", IA, IA, 0, "Fail"),
    ("gert error", GertError("unknown sequence 7"), K.INVALID, "invalid", IA, IA, 0, "Fail"),
    ("host function", HostFunctionError([ValueError("x")]), K.INVALID, "invalid", IA, IA, 0, "Fail"),
    ("acl param", AclError(100000, "bad param"), K.INVALID, "invalid", IA, IA, 0, "Fail"),
    ("context null", AclError(107002, "device 0 is closed"), K.INVALID, "invalid", IA, IA, 0, "Fail"),
    ("closed", ModelClosed(), K.CLOSED, "invalid", IA, IA, 0, "Fail"),
    ("timeout", RequestTimeout("late", 0, 1, 0.5), K.TIMEOUT, "unavailable", UN, UN, 0, "Fail"),
    ("no device", DeviceUnavailable("all recovering"), K.UNAVAILABLE, "unavailable", UN, UN, 0, "Fail"),
    ("task abort", AclError(107022, "aborted"), K.ABORTED, "unavailable", UN, UN, 1, "Fail"),
    ("stream abort", GeError(107023, "aborted"), K.ABORTED, "unavailable", UN, UN, 1, "Fail"),
    ("acl oom", AclError(207001, "no memory"), K.OUT_OF_MEMORY, "internal", UN, UN, 1, "Fail"),
    ("ge oom", GeError(245000, "no memory"), K.OUT_OF_MEMORY, "internal", UN, UN, 1, "Fail"),
    ("aicore", AclError(507015, "aicore exception"), K.DEVICE_FAULT, "internal", IN, IN, 1, "Fail"),
    ("raw sync timeout", AclError(507046, "sync timeout"), K.DEVICE_FAULT, "internal", IN, IN, 1, "Fail"),
    ("ge failed", GeError(0xFFFFFFFF, "graph 3 failed"), K.DEVICE_FAULT, "internal", IN, IN, 1, "Fail"),
    ("ort status", GeError(0xFFFFFFFF, ORT_STATUS), K.DEVICE_FAULT, "internal", IN, IN, 1, "InvalidArgument"),
    ("not gert", ValueError("postprocess raised"), K.INTERNAL, "internal", IN, IA, 0, None),
    ("oom cause", _caused(GertError("state"), AclError(207001, "oom")), K.INVALID, "invalid", UN, UN, 0, "Fail"),
    ("oom under a bug", _caused(RuntimeError("x"), GeError(245000, "oom")), K.INTERNAL, "internal", UN, UN, 0, None),
]


@pytest.mark.parametrize(
    ("name", "e", "kind", "cls", "code", "checking", "alone", "ort"), TABLE, ids=[t[0] for t in TABLE]
)
def test_each_answer_maps_from_the_errors_kind(name, e, kind, cls, code, checking, alone, ort):
    assert kind_of(e) is kind
    assert error_class(e) == cls
    assert triton_code(e) == code and triton_code(e, checking=True) == checking
    assert is_runtime_failure(e) is bool(alone)
    told = ort_run_error(e)
    assert (None if told is None else type(told).__name__) == ort
    if told is not None:
        assert told.gert_error is e and isinstance(told, GertError)


def test_a_runtime_failure_of_a_merged_batch_runs_each_member_alone_and_nothing_else_does():
    for name, e, kind, *_ in TABLE:
        calls: list = []

        def run(members, e=e, calls=calls):
            calls.append(list(members))
            if len(members) > 1:
                raise e
            return ["ok"]

        try:
            got = batch_queue.run_isolated(["a", "b"], run)
        except BaseException as raised:  # noqa: BLE001 - the batch's error, raised to every member
            assert raised is e and kind not in (K.ABORTED, K.OUT_OF_MEMORY, K.DEVICE_FAULT), name
        else:
            assert got == ["ok", "ok"] and calls == [["a", "b"], ["a"], ["b"]], name


def test_in_chain_follows_causes_and_stops_at_a_loop():
    a, b = GertError("a"), AclError(207001, "oom")
    a.__cause__ = b
    b.__cause__ = a  # a loop: followed once
    assert in_chain(a, K.OUT_OF_MEMORY) and not in_chain(a, K.DEVICE_FAULT) and not in_chain(None, K.INVALID)


def test_every_kind_has_a_triton_code_and_a_class():
    seen = {t[2] for t in TABLE}
    assert seen == set(ErrorKind), set(ErrorKind) - seen
    assert gert.ModelClosed is ModelClosed
