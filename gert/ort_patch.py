"""gert.patch_onnxruntime(): make ``onnxruntime.InferenceSession`` build gert sessions, for applications that
cannot be edited. Explicit only: importing gert patches nothing.

    gert.patch_onnxruntime()                   # sessions asking for CANNExecutionProvider run on gert
    with gert.patch_onnxruntime(when="always"): # every session runs on gert, until the block ends
        from rapidocr_onnxruntime import RapidOCR
        ...

Patch before the application imports the names (``from onnxruntime import InferenceSession`` binds the class at
import). Patched: ``onnxruntime.InferenceSession`` (a subclass, so isinstance checks still hold), ``SessionOptions``
(gert's, which remembers free-dimension overrides) and, with ``when="cann"``, ``get_available_providers()`` lists
CANNExecutionProvider, so applications that check before they ask do ask.
"""
from __future__ import annotations

import threading
from typing import Optional

from gert.errors import GertError
from gert.ort_session import CANN_PROVIDER, GERT_PROVIDER, InferenceSession, session_options_class

WHEN = ("cann", "always")
_lock = threading.Lock()
_saved: Optional[dict] = None


def _wants_gert(providers) -> bool:
    for p in providers or ():
        name = p[0] if isinstance(p, (tuple, list)) else p
        if name in (CANN_PROVIDER, GERT_PROVIDER):
            return True
    return False


class _Patch:
    """Returned by patch_onnxruntime(); as a context manager it unpatches on exit."""

    def __init__(self, when: str) -> None:
        self.when = when

    def __enter__(self) -> "_Patch":
        return self

    def __exit__(self, *exc) -> None:
        unpatch_onnxruntime()


def patch_onnxruntime(when: str = "cann") -> _Patch:
    """Route ``onnxruntime.InferenceSession(...)`` to gert: when the application asks for the CANN execution
    provider (``when="cann"``), or always (``when="always"``)."""
    if when not in WHEN:
        raise GertError(f"patch_onnxruntime: when must be one of {WHEN}, got {when!r}")
    import onnxruntime as ort

    global _saved
    with _lock:
        if _saved is not None:
            raise GertError("onnxruntime is already patched; call gert.unpatch_onnxruntime() first")
        original = ort.InferenceSession
        original_providers = ort.get_available_providers

        class PatchedInferenceSession(original):
            """onnxruntime.InferenceSession, patched by gert: builds a gert.InferenceSession when asked."""

            def __new__(cls, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
                if when == "always" or _wants_gert(providers):
                    return InferenceSession(path_or_bytes, sess_options, providers, provider_options, **kwargs)
                return super().__new__(cls)

        PatchedInferenceSession.__name__ = PatchedInferenceSession.__qualname__ = "InferenceSession"

        def get_available_providers() -> list:
            have = list(original_providers())
            return have if CANN_PROVIDER in have else [CANN_PROVIDER] + have

        _saved = {"InferenceSession": original, "SessionOptions": ort.SessionOptions,
                  "get_available_providers": original_providers}
        ort.InferenceSession = PatchedInferenceSession  # not its home module's: the host NPU computes with that one
        ort.SessionOptions = session_options_class()
        if when == "cann":
            ort.get_available_providers = get_available_providers
    return _Patch(when)


def unpatch_onnxruntime() -> None:
    """Put onnxruntime's own classes back (a no-op when not patched)."""
    global _saved
    with _lock:
        if _saved is None:
            return
        import onnxruntime as ort

        ort.InferenceSession = _saved["InferenceSession"]
        ort.SessionOptions = _saved["SessionOptions"]
        ort.get_available_providers = _saved["get_available_providers"]
        _saved = None
