"""What kind of failure an exception is: the one classification of gert's errors, which every answer maps from.

Triton's error codes (gert_triton/error_codes.py), the error class a server answers with (Recovery's error_class),
the retry of a merged batch's members one by one (batch_queue.run_isolated), Recovery's out-of-memory retry, the
compile failures a stream remembers (executor.py) and ONNX Runtime's exception for a gert error (gert/ort_io.py) ask
kind_of() instead of testing types and codes themselves. Decided by the error's type and code, never by its text.
"""

from __future__ import annotations

import enum

from gert.errors import AclError, DeviceUnavailable, GeError, GertError, ModelClosed, RequestTimeout

SYNC_TIMEOUT = 507046  # ACL_ERROR_RT_STREAM_SYNC_TIMEOUT (Recovery turns it into RequestTimeout)
OOM_CODES = (207001, 245000)  # ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_ERROR_GE_MEMORY_ALLOCATION
RECOVERING_CODES = (107022, 107023)  # ACL_ERROR_RT_DEVICE_TASK_ABORT, ACL_ERROR_RT_STREAM_ABORT
GE_FAILED = 0xFFFFFFFF  # ge::FAILED: a graph run (or a GE call) failed


class ErrorKind(enum.Enum):
    """The kinds of failure, by whose fault it is and whether a retry may pass."""

    INVALID = "invalid"  # the request or call is wrong (bad input, an unknown sequence, a refused parameter)
    CLOSED = "closed"  # the model was closed before the request started (gert.ModelClosed)
    TIMEOUT = "timeout"  # not done within its timeout; its stream was aborted and serves again (RequestTimeout)
    UNAVAILABLE = "unavailable"  # no device can take it now: each is under recovery (DeviceUnavailable)
    ABORTED = "aborted"  # its run was aborted by a device recovery (task / stream abort codes)
    OUT_OF_MEMORY = "out_of_memory"  # out of device memory (may pass once memory is given back)
    DEVICE_FAULT = "device_fault"  # the device or runtime failed (codes of the 5xxxxx classes, a failed graph run)
    INTERNAL = "internal"  # not a gert error: a bug, a postprocess that raised


RUNTIME_FAILURES = frozenset({ErrorKind.ABORTED, ErrorKind.OUT_OF_MEMORY, ErrorKind.DEVICE_FAULT})


def _code_kind(code: int) -> ErrorKind:
    if code in RECOVERING_CODES:
        return ErrorKind.ABORTED
    if code in OOM_CODES:
        return ErrorKind.OUT_OF_MEMORY
    if code >= 500000 or code == GE_FAILED:
        return ErrorKind.DEVICE_FAULT
    return ErrorKind.INVALID


def kind_of(e: BaseException) -> ErrorKind:
    """The kind of ``e`` itself (its cause chain aside: see in_chain)."""
    if isinstance(e, (AclError, GeError)):
        return _code_kind(e.code)
    if isinstance(e, ModelClosed):
        return ErrorKind.CLOSED
    if isinstance(e, RequestTimeout):
        return ErrorKind.TIMEOUT
    if isinstance(e, DeviceUnavailable):
        return ErrorKind.UNAVAILABLE
    return ErrorKind.INVALID if isinstance(e, GertError) else ErrorKind.INTERNAL


def in_chain(e: BaseException | None, kind: ErrorKind) -> bool:
    """Whether ``e`` or an error it was raised from (``__cause__``, followed to its end) is of ``kind``."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if kind_of(e) is kind:
            return True
        e = e.__cause__
    return False


def is_runtime_failure(e: BaseException) -> bool:
    """A device or runtime failure (not the request's fault): a fault, out of memory, a run a recovery aborted."""
    return kind_of(e) in RUNTIME_FAILURES


_CLASSES = {
    ErrorKind.INVALID: "invalid",
    ErrorKind.CLOSED: "invalid",
    ErrorKind.TIMEOUT: "unavailable",
    ErrorKind.UNAVAILABLE: "unavailable",
    ErrorKind.ABORTED: "unavailable",
    ErrorKind.OUT_OF_MEMORY: "internal",
    ErrorKind.DEVICE_FAULT: "internal",
    ErrorKind.INTERNAL: "internal",
}


def error_class(e: BaseException) -> str:
    """How a server should answer ``e``: "unavailable" (retry later: a timeout, a device under recovery),
    "internal" (a device or runtime failure, not a gert error) or "invalid" (the request itself is wrong; a closed
    model's too)."""
    return _CLASSES[kind_of(e)]
