"""gert.dtypes' tables against the installed onnx (gert reads them without importing it)."""

from __future__ import annotations

import onnx

from gert.dtypes import ONNX_ELEM_BY_NAME


def test_the_element_types_by_name_are_onnxs():
    assert ONNX_ELEM_BY_NAME == {k.lower(): v for k, v in onnx.TensorProto.DataType.items()}
