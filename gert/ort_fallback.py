"""gert.InferenceSession's provider semantics when GE cannot take a model: ONNX Runtime's CPU provider runs it.

ONNX Runtime's CANN execution provider runs on the NPU what CANN's parser takes and leaves the rest to the CPU
provider. When GE's parser refuses a model (string, sequence, optional or map tensors, a graph without inputs, an
operator CANN lacks under ``cann_ops="strict"``) and the session's providers list ``CPUExecutionProvider`` (or name
none, as ONNX Runtime then uses every provider it has), the refused nodes at the model's edges run on the CPU and the
core on gert when that split is sound (gert/ort_partition.py); otherwise this module runs the whole model on ONNX
Runtime's own CPU session, warns once naming the nodes and GE's reason, and reports ``["CPUExecutionProvider"]`` from
``get_providers()``. With a providers list without it the session fails with ONNX Runtime's error for nodes left to a
CPU provider that is not allowed.

A load that fails for another reason raises ONNX Runtime's own exception for the model when ONNX Runtime refuses it
too (its class and message, gert's error as ``gert_error``), else ONNX Runtime's Fail with gert's message.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from typing import Any

from gert.errors import GertError, refused_by_ge_parser
from gert.ort_io import ort_class

CPU_PROVIDER = "CPUExecutionProvider"
_NO_CPU = (
    "This session contains graph nodes that are assigned to the default CPU EP, but fallback to CPU EP has "
    "been explicitly disabled by the user."
)
_warned: set = set()
_lock = threading.Lock()


ge_refused = refused_by_ge_parser  # GE's parser refusing the model (gert/errors.py)


def cpu_allowed(providers: Sequence | None) -> bool:
    """ONNX Runtime's CPU provider may run nodes: none named (all available), or CPUExecutionProvider listed."""
    if providers is None:
        return True
    return any((p[0] if isinstance(p, (tuple, list)) else p) == CPU_PROVIDER for p in providers)


def _ort_session_class():
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

    return InferenceSession  # ONNX Runtime's own, never gert's patch


def cpu_session(source, sess_options) -> Any:
    """ONNX Runtime's CPU session of the model (``source``: a path or the bytes)."""
    return _ort_session_class()(source, sess_options, providers=[CPU_PROVIDER])


def no_cpu_error(e: BaseException, nodes: Sequence) -> BaseException:
    """ONNX Runtime's error for a model whose nodes would need the CPU provider the providers list leaves out."""
    told = ort_class("Fail")(
        f"[ONNXRuntimeError] : 1 : FAIL : {_NO_CPU} (GE cannot take {_names(nodes)}: {e}; add "
        f"'{CPU_PROVIDER}' to providers to run the model on ONNX Runtime's CPU provider)"
    )
    told.gert_error = e
    return told


def warn_fallback(e: BaseException, graph_name: str, nodes: Sequence) -> None:
    """Once per model: the session runs on ONNX Runtime's CPU provider, the nodes and GE's reason named."""
    key = (graph_name, tuple(n.name or n.op_type for n in nodes))
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(
        f"gert.InferenceSession: GE cannot take the model '{graph_name}' ({e}); its nodes "
        f"{_names(nodes)} run on ONNX Runtime's {CPU_PROVIDER}",
        UserWarning,
        stacklevel=4,
    )


def load_error(e: BaseException, source, sess_options) -> BaseException:
    """ONNX Runtime's exception for a model gert failed to load: ONNX Runtime's own when it refuses the model too,
    else Fail with gert's message; ``gert_error`` is gert's."""
    if isinstance(e, GertError) and hasattr(e, "gert_error"):
        return e
    try:
        cpu_session(source, sess_options)
    except Exception as ort_error:  # noqa: BLE001 - ONNX Runtime's classes: Fail, InvalidGraph, InvalidArgument, ...
        told = ort_class(type(ort_error).__name__)(str(ort_error)) if _is_ort(ort_error) else ort_error
    else:
        told = ort_class("Fail")(f"[ONNXRuntimeError] : 1 : FAIL : {e}")
    told.gert_error = e
    return told


def _is_ort(e: BaseException) -> bool:
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    return type(e).__module__ == state.__name__ or type(e).__name__ in (
        "Fail",
        "InvalidGraph",
        "InvalidArgument",
        "InvalidProtobuf",
        "NoSuchFile",
    )


def _names(nodes: Sequence, most: int = 8) -> str:
    shown = [f"{n.op_type}('{n.name}')" if n.name else n.op_type for n in nodes[:most]]
    more = f" and {len(nodes) - most} more" if len(nodes) > most else ""
    return "[" + ", ".join(shown) + "]" + more if nodes else "[no nodes]"
