"""Exceptions raised by gert: every runtime failure carries CANN's code and the runtime's own message."""

from __future__ import annotations

import re

ACL_ERROR_NAMES: dict[int, str] = {}  # gert._cann's, of the headers it was built against (gert/_binding.py copies)


class GertError(Exception):
    """Base class of every gert error."""


class _CodedError(GertError):
    """An error with the runtime's status code and its own message; subclasses name the codes."""

    NAMES: dict[int, str] = {}

    def __init__(self, code: int, message: str = "") -> None:
        self.code = int(code)
        self.message = message
        super().__init__(f"{self.name} ({self.code}): {message}" if message else f"{self.name} ({self.code})")

    @property
    def name(self) -> str:
        return self.NAMES.get(self.code, f"{type(self).__name__} code {self.code}")

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class AclError(_CodedError):
    """An ACL runtime call failed: ``code`` is the aclError, ``message`` aclGetRecentErrMsg()'s text."""

    NAMES = ACL_ERROR_NAMES


GE_ERROR_NAMES: dict[int, str] = {
    0xFFFFFFFF: "ge::FAILED",
    50331649: "ge::GRAPH_PARAM_INVALID",
    145000: "ACL_ERROR_GE_PARAM_INVALID",
    145001: "ACL_ERROR_GE_EXEC_NOT_INIT",
    145021: "ACL_ERROR_GE_SHAPE_INVALID",
    145022: "ACL_ERROR_GE_DATATYPE_INVALID",
    245000: "ACL_ERROR_GE_MEMORY_ALLOCATION",
    545000: "ACL_ERROR_GE_INTERNAL_ERROR",
    545001: "ACL_ERROR_GE_LOAD_MODEL",
    545601: "ACL_ERROR_GE_MODEL_EXECUTE_TIMEOUT",
}


class GeError(_CodedError):
    """A GE call failed: ``code`` is the ge::Status, ``message`` GEGetErrorMsgV2()'s text. A device fault met while
    GE runs a graph comes back as the runtime's own code (GE passes runtime errors through as its Status), so such
    codes are named as ACL names them."""

    NAMES = GE_ERROR_NAMES

    @property
    def name(self) -> str:
        """GE's name for the code, else the runtime's: a run that failed on the device (a fault, an abort) passes
        the runtime's code through (ACL_ERROR_RT_AICORE_EXCEPTION, ...)."""
        return GE_ERROR_NAMES.get(self.code) or ACL_ERROR_NAMES.get(self.code) or f"GeError code {self.code}"

    @property
    def error_code(self) -> str | None:
        """GE's error-manager code reported with the failure ("E16001", "E13010", ...), if any."""
        m = _E_CODE.search(self.message)
        return m.group(0) if m else None


_E_CODE = re.compile(r"\bE[0-9A-Z][0-9]{4}\b")


_GE_PARSER = "aclgrphParseONNX"  # GE's parser API names itself in every refusal (aclgrphParseONNX, ...FromMem)


def refused_by_ge_parser(e: BaseException) -> bool:
    """Whether ``e`` is GE's ONNX parser refusing a model (not a device, option or compile failure): what the CPU
    fallbacks (gert.load(fallback="cpu"), gert.InferenceSession's CPU provider) take over."""
    return isinstance(e, GertError) and _GE_PARSER in str(e)


class RowsNotIndependent(UserWarning):
    """gert.load's note that a model's requests run alone on the batch axis (never padded, merged or split), because
    the rows of an output are not proved independent (gert/core/row_proof.py); it names the output and the node."""


class CacheWarning(UserWarning):
    """A compile cache entry was broken (changed, swapped, truncated, planted, unrecorded, or failing to load): gert
    removed it and compiled again (gert/core/compile_cache.py)."""


class HostFunctionError(GertError):
    """One or more host functions launched on a stream raised; ``errors`` holds their exceptions."""

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = list(errors)
        first = self.errors[0] if self.errors else None
        super().__init__(f"{len(self.errors)} host function(s) raised; first: {first!r}")


class RequestTimeout(GertError):
    """A request was not done within its timeout; its stream was aborted (aclrtStreamAbort) and serves again."""

    def __init__(self, message: str, device: int, stream: int, seconds: float) -> None:
        self.device, self.stream, self.seconds = device, stream, seconds
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (str(self), self.device, self.stream, self.seconds))


class ModelClosed(GertError):
    """The model was closed (``close()``) before a request of it started: the one error every front door raises for
    it (Model.run / run(list) / submit / run_async, a Sequence's step, gert.InferenceSession, gert_triton). A
    request already running when close() came finishes first."""

    MESSAGE = "the model was closed before this request started"

    def __init__(self, message: str = MESSAGE) -> None:
        super().__init__(message)


class DeviceUnavailable(GertError):
    """No device can take the request now: each one of the model's is being recovered after a device failure.
    Retrying later succeeds once a device is back."""


class SessionReplaced(GertError):
    """A graph was being built in a stream's Session when a device recovery (or close()) retired that Session: the
    build is void (its graph went with the Session); the shape is built again in the new Session when needed."""
