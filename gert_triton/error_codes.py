"""The one map from a gert error to the Triton error code a request is answered with.

Clients and load balancers retry UNAVAILABLE and never INVALID_ARG, so the code says whose fault a failure is:
- INVALID_ARG: the request itself is wrong (a plain GertError: a bad shape, dtype, value, unknown sequence);
- UNAVAILABLE: retry later: a request timeout, a device under recovery (gert.core.recovery.error_class), and out of
  device memory, after gert released its caches and retried (memory that other requests, sequences or models hold);
- INTERNAL: a device or runtime failure, and anything that is not a GertError (a bug, a postprocess that raised).
Decided by the error's type and code (and those of its cause chain), never by its message text.
"""

from __future__ import annotations

from gert.errors import AclError, GeError, GertError
from gert.core.recovery import OOM_CODES, error_class

_CLASS_CODES = {"invalid": "INVALID_ARG", "internal": "INTERNAL", "unavailable": "UNAVAILABLE"}


def _out_of_memory(e: BaseException) -> bool:
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (AclError, GeError)) and e.code in OOM_CODES:
            return True
        e = e.__cause__
    return False


def triton_code(e: BaseException, checking: bool = False) -> str:
    """The pb_utils.TritonError attribute name ("INVALID_ARG", "UNAVAILABLE", "INTERNAL") for ``e``.
    ``checking``: raised while one request was read and checked alone (its inputs, a subclass's preprocess), before
    anything ran: an error that is not a gert error is that request's fault too."""
    if _out_of_memory(e):
        return "UNAVAILABLE"
    if not isinstance(e, GertError):
        return "INVALID_ARG" if checking else "INTERNAL"
    return _CLASS_CODES[error_class(e)]


def error_text(e: BaseException, checking: bool = False) -> str:
    """The message a client gets: a gert error's own text (and any error met while checking a request); anything
    else with its type name."""
    return str(e) if checking or isinstance(e, GertError) else f"{type(e).__name__}: {e}"


def error_response(pb_utils, e: BaseException, checking: bool = False):
    """A pb_utils.InferenceResponse that answers a request with ``e`` (``checking``: see triton_code)."""
    code = getattr(pb_utils.TritonError, triton_code(e, checking))
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(error_text(e, checking), code))
