"""Execution-provider names as gert.InferenceSession reports them, and the check of names a caller gives.

Below both ort_session (the constructor warns on an unknown name) and ort_io (set_providers raises), so neither
imports the other for it.
"""

from __future__ import annotations

import threading
import warnings

GERT_PROVIDER = "GertExecutionProvider"
CANN_PROVIDER = "CANNExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"

_warned: set = set()
_warned_lock = threading.Lock()


def warn_once(name: str, message: str) -> None:
    """A UserWarning the first time ``name`` is seen in this process (ONNX Runtime logs such notes once)."""
    with _warned_lock:
        if name in _warned:
            return
        _warned.add(name)
    warnings.warn(message, UserWarning, stacklevel=4)


def check_providers(providers, constructor: bool = False) -> None:
    """Provider names ONNX Runtime does not know: the constructor warns and goes on (as ONNX Runtime falls back);
    set_providers raises ONNX Runtime's RuntimeError."""
    import onnxruntime

    known = set(onnxruntime.get_all_providers()) | {GERT_PROVIDER}
    for p in providers or ():
        name = p[0] if isinstance(p, (tuple, list)) else p
        if name in known:
            continue
        if not constructor:
            raise RuntimeError(f"Unknown Provider Type: {name}")
        warn_once(f"provider.{name}", f"Specified provider '{name}' is not in available provider names.")
