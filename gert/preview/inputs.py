"""Random inputs for a model's graph inputs, and a plain ONNX Runtime run: what `gert check --fix` and the precision
comparison feed a model when the user gives no inputs (real inputs give real answers)."""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np


def random_inputs(proto, given: Optional[Mapping[str, np.ndarray]] = None, seed: int = 0, dim: int = 1) -> dict:
    """An array per graph input that is not an initializer: ``given`` ones as they are, else random values of the
    declared dtype and shape (symbolic or unknown dims = ``dim``). Floats N(0, 1); integers in [0, 3); bools."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits = {t.name for t in proto.graph.initializer}
    out = {}
    for v in proto.graph.input:
        if v.name in inits:
            continue
        if given and v.name in given:
            out[v.name] = np.asarray(given[v.name])
            continue
        tt = v.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else dim for d in tt.shape.dim)
        if dtype.kind == "f":
            out[v.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            out[v.name] = rng.integers(0, 3, shape).astype(dtype)
        elif dtype.kind == "b":
            out[v.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            raise ValueError(f"input '{v.name}': no random values for dtype {dtype}; pass the input")
    return out


def ort_run(model: bytes, feeds: Mapping[str, np.ndarray]) -> dict:
    """Outputs by name from ONNX Runtime's CPU provider (the reference gert's host NPU computes with)."""
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, dict(feeds))))
