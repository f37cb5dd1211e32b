"""dtype mapping: numpy <-> ge::DataType <-> ONNX TensorProto element types.

Every type that numpy, GE and ONNX all support; bfloat16 through ``ml_dtypes`` when it is installed.
Anything else raises ``GertError`` naming the type.
"""

from __future__ import annotations

import numpy as np

from gert.errors import GertError

# ge::DataType values (graph/types.h, CANN 8.5)
DT_FLOAT, DT_FLOAT16, DT_INT8, DT_INT32, DT_UINT8 = 0, 1, 2, 3, 4
DT_INT16, DT_UINT16, DT_UINT32, DT_INT64, DT_UINT64 = 6, 7, 8, 9, 10
DT_DOUBLE, DT_BOOL, DT_BF16 = 11, 12, 27

# ONNX TensorProto.DataType values
ONNX_FLOAT, ONNX_UINT8, ONNX_INT8, ONNX_UINT16, ONNX_INT16, ONNX_INT32, ONNX_INT64 = 1, 2, 3, 4, 5, 6, 7
ONNX_BOOL, ONNX_FLOAT16, ONNX_DOUBLE, ONNX_UINT32, ONNX_UINT64, ONNX_BFLOAT16 = 9, 10, 11, 12, 13, 16
# TensorProto.DataType by its name in lower case, as ONNX Runtime names tensor types ("tensor(float16)"): onnx 1.23's
# table (tests/test_dtypes.py checks it against the installed onnx), so that reading one needs no onnx import
ONNX_ELEM_BY_NAME = {
    "undefined": 0,
    "float": 1,
    "uint8": 2,
    "int8": 3,
    "uint16": 4,
    "int16": 5,
    "int32": 6,
    "int64": 7,
    "string": 8,
    "bool": 9,
    "float16": 10,
    "double": 11,
    "uint32": 12,
    "uint64": 13,
    "complex64": 14,
    "complex128": 15,
    "bfloat16": 16,
    "float8e4m3fn": 17,
    "float8e4m3fnuz": 18,
    "float8e5m2": 19,
    "float8e5m2fnuz": 20,
    "uint4": 21,
    "int4": 22,
    "float4e2m1": 23,
    "float8e8m0": 24,
    "uint2": 25,
    "int2": 26,
    "float6e2m3": 27,
    "float6e3m2": 28,
}

_TABLE: list[tuple[np.dtype, int, int, str]] = [
    (np.dtype(np.float32), DT_FLOAT, ONNX_FLOAT, "DT_FLOAT"),
    (np.dtype(np.float16), DT_FLOAT16, ONNX_FLOAT16, "DT_FLOAT16"),
    (np.dtype(np.float64), DT_DOUBLE, ONNX_DOUBLE, "DT_DOUBLE"),
    (np.dtype(np.int8), DT_INT8, ONNX_INT8, "DT_INT8"),
    (np.dtype(np.int16), DT_INT16, ONNX_INT16, "DT_INT16"),
    (np.dtype(np.int32), DT_INT32, ONNX_INT32, "DT_INT32"),
    (np.dtype(np.int64), DT_INT64, ONNX_INT64, "DT_INT64"),
    (np.dtype(np.uint8), DT_UINT8, ONNX_UINT8, "DT_UINT8"),
    (np.dtype(np.uint16), DT_UINT16, ONNX_UINT16, "DT_UINT16"),
    (np.dtype(np.uint32), DT_UINT32, ONNX_UINT32, "DT_UINT32"),
    (np.dtype(np.uint64), DT_UINT64, ONNX_UINT64, "DT_UINT64"),
    (np.dtype(np.bool_), DT_BOOL, ONNX_BOOL, "DT_BOOL"),
]
_BY_NUMPY = {row[0]: row for row in _TABLE}
_BY_GE = {row[1]: row for row in _TABLE}
_BY_ONNX = {row[2]: row for row in _TABLE}
_bf16_tried = False


def bfloat16() -> np.dtype | None:
    """ml_dtypes' bfloat16 (numpy has none of its own), or None without ml_dtypes. Imported at the first need, not by
    `import gert`: ~2 MB of resident memory a serving process that never sees a bfloat16 does not keep (issue 41).
    Its row joins the tables then."""
    global _bf16_tried
    if not _bf16_tried:
        try:
            import ml_dtypes

            row = (np.dtype(ml_dtypes.bfloat16), DT_BF16, ONNX_BFLOAT16, "DT_BF16")
            _TABLE.append(row)
            _BY_NUMPY[row[0]], _BY_GE[row[1]], _BY_ONNX[row[2]] = row, row, row
        except ImportError:  # pragma: no cover - depends on the environment
            pass
        _bf16_tried = True
    found = _BY_GE.get(DT_BF16)
    return None if found is None else found[0]


def is_bfloat16(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is ml_dtypes' bfloat16 (without importing ml_dtypes: an array of it means it is loaded)."""
    return dtype.name == "bfloat16"


def supported_numpy_dtypes() -> list[np.dtype]:
    bfloat16()
    return [row[0] for row in _TABLE]


def ge_dtype(dtype) -> int:
    """The ge::DataType of a numpy dtype (or anything np.dtype() takes)."""
    row = _BY_NUMPY.get(dtype) if isinstance(dtype, np.dtype) else None
    if row is not None:  # the common case, without building a dtype
        return row[1]
    try:
        dt = np.dtype(dtype).newbyteorder("=")
    except TypeError as e:
        raise GertError(f"dtype {dtype!r} is not a numpy dtype") from e
    if is_bfloat16(dt):
        bfloat16()
    row = _BY_NUMPY.get(dt)
    if row is None:
        names = ", ".join(str(r[0]) for r in _TABLE)
        raise GertError(f"dtype {np.dtype(dtype)} has no ge::DataType; supported: {names}")
    return row[1]


def numpy_dtype(ge_type: int) -> np.dtype:
    """The numpy dtype of a ge::DataType value."""
    row = _BY_GE.get(int(ge_type))
    if row is None and int(ge_type) == DT_BF16 and bfloat16() is not None:
        row = _BY_GE[DT_BF16]
    if row is None:
        raise GertError(
            f"ge::DataType {ge_type} has no numpy dtype here"
            + ("" if ge_type != DT_BF16 else " (install ml_dtypes for bfloat16)")
        )
    return row[0]


def ge_name(ge_type: int) -> str:
    if int(ge_type) == DT_BF16:
        return "DT_BF16"
    row = _BY_GE.get(int(ge_type))
    return row[3] if row else f"ge::DataType({ge_type})"


def onnx_to_numpy(elem_type: int) -> np.dtype:
    row = _BY_ONNX.get(int(elem_type))
    if row is None and int(elem_type) == ONNX_BFLOAT16 and bfloat16() is not None:
        row = _BY_ONNX[ONNX_BFLOAT16]
    if row is None:
        raise GertError(f"ONNX element type {elem_type} is not supported by gert")
    return row[0]


def numpy_to_onnx(dtype) -> int:
    return _BY_GE[ge_dtype(dtype)][2]
