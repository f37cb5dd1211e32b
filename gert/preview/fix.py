"""`gert check --fix`: convert a model above CANN's highest opset down to the highest opset where its ops map.

ONNX's version_converter does the conversion; the converted model is checked against the original on ONNX Runtime
with random inputs (max |d| per output) before it is written, then checked against the CANN table again. What no
opset can fix (an op CANN never maps) stays flagged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from gert.preview import cann_ops
from gert.preview.inputs import ort_run, random_inputs


@dataclass
class FixResult:
    """What --fix did: the target opset (None: nothing to convert to), the converted model's report and the largest
    |difference| of its outputs against the original's, or why it could not."""

    target: Optional[int]
    report: Optional[cann_ops.CannReport] = None
    max_abs_diff: dict = field(default_factory=dict)
    model: Optional[bytes] = None
    error: str = ""

    @property
    def written(self) -> bool:
        return self.model is not None


def fix(proto, tolerance: float = 1e-4) -> FixResult:
    """Convert ``proto`` (a ModelProto) down to the highest opset <= 18 where every op CANN maps at all maps."""
    import onnx
    from onnx import version_converter

    before = cann_ops.check_proto(proto)
    version = before.opsets.get(cann_ops.DEFAULT_DOMAIN)
    t = cann_ops.table()
    ops = [(n.domain or cann_ops.DEFAULT_DOMAIN, n.op_type) for n, _ in cann_ops.walk_nodes(proto.graph, "main")]
    target = cann_ops.best_opset([o for o in ops if t.opsets(*o) or o[1] == "Constant"], t,
                                 min(version or 0, cann_ops.MAX_STANDARD_OPSET))
    if version is None or target is None:
        return FixResult(None, before, error="no ai.onnx opset at which the model's mapped ops all map")
    if target == version:
        return FixResult(target, before, error=f"the model is at opset {version} already, where every op CANN maps "
                                               "at all maps: no conversion can help the ops left")
    try:
        converted = version_converter.convert_version(proto, target)
        onnx.checker.check_model(converted)
    except Exception as e:  # noqa: BLE001 - version_converter raises plain RuntimeErrors
        return FixResult(target, before, error=f"ONNX's version_converter could not convert opset {version} -> "
                                               f"{target}: {str(e).strip().splitlines()[0][:300]}")
    data = converted.SerializeToString()
    try:
        feeds = random_inputs(proto)
        a = ort_run(proto.SerializeToString(), feeds)
        b = ort_run(data, feeds)
    except Exception as e:  # noqa: BLE001
        return FixResult(target, before, error=f"ONNX Runtime could not run the models to compare them: {e}")
    diffs = {}
    for name, x in a.items():
        y = b.get(name)
        if y is None or np.shape(x) != np.shape(y):
            return FixResult(target, before, error=f"output '{name}' differs in shape after conversion")
        diffs[name] = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if np.size(x) else 0.0
    worst = max(diffs.values(), default=0.0)
    scale = max((float(np.max(np.abs(x))) for x in a.values() if np.size(x) and x.dtype.kind in "fiu"), default=1.0)
    if not worst <= tolerance * max(1.0, scale):
        return FixResult(target, before, diffs, error=f"the converted model's outputs differ by up to {worst:g}")
    return FixResult(target, cann_ops.check_proto(converted), diffs, data)
