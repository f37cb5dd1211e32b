"""gert.patch_onnxruntime(): make ``onnxruntime.InferenceSession`` build gert sessions, for applications that
cannot be edited. Explicit only: importing gert patches nothing.

    gert.patch_onnxruntime()                   # sessions asking for CANNExecutionProvider run on gert
    with gert.patch_onnxruntime(when="always"): # every session runs on gert, until the block ends
        from rapidocr_onnxruntime import RapidOCR
        ...

Patch before the application imports the names (``from onnxruntime import InferenceSession`` binds the class at
import). Patched: ``onnxruntime.InferenceSession`` (a subclass; the gert sessions it builds are instances of it and of
onnxruntime's own class, so isinstance checks hold), ``SessionOptions`` (gert's, which remembers free-dimension
overrides and initializers), ``RunOptions`` and ``LoraAdapter`` (gert's, which remember the active adapters: see
gert.ort_lora) and, with ``when="cann"``, ``get_available_providers()`` lists CANNExecutionProvider, so applications
that check before they ask do ask.
"""

from __future__ import annotations

import threading

from gert.errors import GertError
from gert.ort_lora import lora_adapter_class, run_options_class
from gert.ort_session import CANN_PROVIDER, GERT_PROVIDER, InferenceSession, session_options_class

WHEN = ("cann", "always")
_lock = threading.Lock()
_saved: dict | None = None


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

    def __enter__(self) -> _Patch:
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
                    # an instance of this class: Python then runs its __init__, gert.InferenceSession's
                    return object.__new__(GertSession)
                return super().__new__(cls)

        class GertSession(InferenceSession, PatchedInferenceSession):
            """gert.InferenceSession, an instance of onnxruntime.InferenceSession (patched and original) too: every
            public method is gert's (gert.ort_session, gert.ort_io, gert.ort_api)."""

        PatchedInferenceSession.__name__ = PatchedInferenceSession.__qualname__ = "InferenceSession"
        GertSession.__name__ = GertSession.__qualname__ = "InferenceSession"
        GertSession.__module__ = InferenceSession.__module__  # shows as gert.ort_session.InferenceSession: it is one

        def get_available_providers() -> list:
            have = list(original_providers())
            return have if CANN_PROVIDER in have else [CANN_PROVIDER] + have

        _saved = {
            "InferenceSession": original,
            "SessionOptions": ort.SessionOptions,
            "get_available_providers": original_providers,
            "RunOptions": ort.RunOptions,
            "LoraAdapter": ort.LoraAdapter,
        }
        ort.InferenceSession = PatchedInferenceSession  # not its home module's: the host NPU computes with that one
        ort.SessionOptions = session_options_class()
        ort.RunOptions = run_options_class()
        ort.LoraAdapter = lora_adapter_class()
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
        ort.RunOptions = _saved["RunOptions"]
        ort.LoraAdapter = _saved["LoraAdapter"]
        ort.get_available_providers = _saved["get_available_providers"]
        _saved = None
