"""gert.dtypes' tables against the installed onnx (gert reads them without importing it)."""

from __future__ import annotations

import onnx

from _helpers import run_python
from gert.dtypes import ONNX_ELEM_BY_NAME


def test_the_element_types_by_name_are_onnxs():
    assert ONNX_ELEM_BY_NAME == {k.lower(): v for k, v in onnx.TensorProto.DataType.items()}


def test_bfloat16_is_imported_at_its_first_need_and_maps_then():
    """`import gert` (and gert_triton's model) does not import ml_dtypes (~2 MB per serving process); the first
    bfloat16 lookup of any kind imports it and maps it both ways."""
    out = run_python(
        """
        import sys
        import numpy as np
        import gert, gert_triton.model
        from gert import dtypes
        from gert_triton.model_config import triton_dtype
        print("ml_dtypes" in sys.modules)
        bf16 = dtypes.numpy_dtype(dtypes.DT_BF16)
        print("ml_dtypes" in sys.modules, bf16.name, dtypes.ge_dtype(bf16) == dtypes.DT_BF16)
        print(dtypes.onnx_to_numpy(dtypes.ONNX_BFLOAT16) == bf16, dtypes.numpy_to_onnx(bf16), triton_dtype(bf16))
        print(bf16 in dtypes.supported_numpy_dtypes(), dtypes.ge_name(dtypes.DT_BF16))
        """
    )
    assert out.split("\n")[-5:-1] == ["False", "True bfloat16 True", "True 16 TYPE_BF16", "True DT_BF16"], out
