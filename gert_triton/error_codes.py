"""The one map from a gert error to the Triton error code a request is answered with.

Clients and load balancers retry UNAVAILABLE and never INVALID_ARG, so the code says whose fault a failure is:
- INVALID_ARG: the request itself is wrong (a plain GertError: a bad shape, dtype, value, unknown sequence);
- UNAVAILABLE: retry later: a request timeout, a device under recovery, and out of device memory, after gert released
  its caches and retried (memory that other requests, sequences or models hold);
- INTERNAL: a device or runtime failure, and anything that is not a GertError (a bug, a postprocess that raised).
Mapped from the error's kind (gert/core/error_kinds.py: its type and code, and those of its cause chain for out of
memory), never from its message text.
"""

from __future__ import annotations

from gert.core.error_kinds import ErrorKind, error_class, in_chain, kind_of
from gert.errors import GertError

_CLASS_CODES = {"invalid": "INVALID_ARG", "internal": "INTERNAL", "unavailable": "UNAVAILABLE"}


def triton_code(e: BaseException, checking: bool = False) -> str:
    """The pb_utils.TritonError attribute name ("INVALID_ARG", "UNAVAILABLE", "INTERNAL") for ``e``.
    ``checking``: raised while one request was read and checked alone (its inputs, a subclass's preprocess), before
    anything ran: an error that is not a gert error is that request's fault too."""
    if in_chain(e, ErrorKind.OUT_OF_MEMORY):
        return "UNAVAILABLE"
    if kind_of(e) is ErrorKind.INTERNAL:
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
