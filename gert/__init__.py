"""gert: run ONNX graphs on Ascend NPUs through CANN's Graph Engine, or on the built-in host NPU.

The runtime layer (devices, streams, events, device and pinned host memory) comes from the
compiled bindings in ``gert._cann``; docs/architecture.md describes the layers.
"""

from gert import _moved

_moved.install()  # old module paths (gert.rows, gert.bench, ...) stay importable; first: an older binding imports some

from gert.errors import (
    AclError,
    CacheWarning,
    DeviceUnavailable,
    GeError,
    GertError,
    HostFunctionError,
    ModelClosed,
    RequestTimeout,
    RowsNotIndependent,
)
from gert._cann import (
    Graph,
    Session,
    ge_finalize,
    ge_last_warning,
    ge_initialize,
    Device,
    DeviceBuffer,
    Event,
    HostBuffer,
    MemoryInfo,
    Stream,
    backend,
    device_count,
    memory_info,
)
from gert import _binding

_binding.register()  # before any use: what gert._cann needs from above (gert's exceptions, DeviceTensor, dtypes, ...)
from gert import hostnpu  # the host NPU's own features (and its compute provider), where the build has them
from gert.hostnpu import clear_faults, host_counters, host_spin_micros, inject_fault, reset_host_counters

from gert.core.tensor import DeviceTensor, GraphSummary
from gert.core.shapes import TensorInfo
from gert.model import Model, load
from gert.core.load_config import LoadConfig
from gert.tracing import Trace, trace
from gert.sequence import Sequence
from gert import dtypes
from gert.preview.cann_ops import CannCompatibilityWarning, CannReport
from gert.preview.check import cann_check

from gert.core import __version__

# ONNX Runtime's session API (gert.ort_session, gert.ort_patch): loaded on first use, so `import gert` stays light
_ORT_FACADE = {
    "InferenceSession": "gert.ort_session",
    "SessionOptions": "gert.ort_session",
    "NodeArg": "gert.ort_session",
    "ModelMetadata": "gert.ort_session",
    "RunOptions": "gert.ort_session",
    "LoraAdapter": "gert.ort_session",
    "patch_onnxruntime": "gert.ort_patch",
    "unpatch_onnxruntime": "gert.ort_patch",
    "compare_precision": "gert.preview.compare",
    "find_keep_fp32": "gert.preview.compare",
}


def __getattr__(name: str):
    module = _ORT_FACADE.get(name)
    if module is None:
        raise AttributeError(f"module 'gert' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "AclError",
    "CacheWarning",
    "DeviceUnavailable",
    "GeError",
    "GertError",
    "HostFunctionError",
    "ModelClosed",
    "RequestTimeout",
    "RowsNotIndependent",
    "Device",
    "DeviceBuffer",
    "Event",
    "HostBuffer",
    "MemoryInfo",
    "Stream",
    "Graph",
    "Session",
    "ge_initialize",
    "ge_finalize",
    "ge_last_warning",
    "DeviceTensor",
    "GraphSummary",
    "dtypes",
    "Model",
    "load",
    "LoadConfig",
    "Sequence",
    "TensorInfo",
    "Trace",
    "trace",
    "InferenceSession",
    "SessionOptions",
    "NodeArg",
    "ModelMetadata",
    "patch_onnxruntime",
    "unpatch_onnxruntime",
    "RunOptions",
    "LoraAdapter",
    "backend",
    "clear_faults",
    "device_count",
    "host_counters",
    "inject_fault",
    "host_spin_micros",
    "memory_info",
    "reset_host_counters",
    "cann_check",
    "CannReport",
    "CannCompatibilityWarning",
    "compare_precision",
    "find_keep_fp32",
    "__version__",
]
