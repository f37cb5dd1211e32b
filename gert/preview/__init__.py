"""NPU preview: what a real CANN would do with a model before it meets one.

- cann_ops, check: would CANN 8.x's ONNX parser map every node? (``gert.cann_check``, ``gert.load(cann_ops=...)``,
  ``gert check``)
- precision: GE's precision modes emulated on the host NPU (``gert.load(precision_mode=..., keep_fp32=...)``)
- compare: fp16 vs fp32 per output, and a small keep-fp32 set (``gert.compare_precision``, ``gert.find_keep_fp32``,
  ``gert precision``)
Kept apart from the runtime core: the core calls in at two points (gert/core/compile_cache.py compile_graph sets the
compile's precision settings, gert/hostnpu/ort_provider.py compile applies them).
"""

from gert.preview.cann_ops import CannCompatibilityWarning, CannReport, Unsupported
from gert.preview.check import cann_check
from gert.preview.precision import PrecisionSettings

__all__ = ["CannCompatibilityWarning", "CannReport", "Unsupported", "cann_check", "PrecisionSettings"]
