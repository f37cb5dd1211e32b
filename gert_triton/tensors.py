"""pb_utils tensors <-> numpy arrays, BF16 included.

numpy has no bfloat16 of its own, so the Python backend stub hands a TYPE_BF16 tensor only through DLPack
(``as_numpy()`` has no array for it) and takes one only from DLPack (``Tensor(name, array)`` maps numpy dtypes, and
ml_dtypes' bfloat16 is not one of them): docs/triton-python-backend.md in the Triton repository, python_backend
PR #371. gert runs bfloat16 as ``ml_dtypes.bfloat16`` arrays; this module moves them through DLPack capsules
("dltensor", DLPack 0.x, the version the stub speaks) with ctypes: a BF16 input is copied out of the capsule
(numpy cannot import it), a BF16 output is exported from its array, which stays alive until the stub's deleter call.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from gert.dtypes import bfloat16, is_bfloat16
from gert.errors import GertError


_CPU, _CUDA_HOST = 1, 3  # DLDeviceType kDLCPU, kDLCUDAHost
_INT, _UINT, _FLOAT, _BFLOAT, _BOOL = 0, 1, 2, 4, 6  # DLDataTypeCode


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
_capsule_set_name.restype = ctypes.c_int
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]

_USED = b"used_dltensor"


def _numpy_dtype(code: int, bits: int) -> np.dtype:
    bf16 = bfloat16() if code == _BFLOAT and bits == 16 else None
    if bf16 is not None:
        return bf16
    kind = {_INT: "i", _UINT: "u", _FLOAT: "f", _BOOL: "b"}.get(code)
    if kind is None or bits % 8:
        raise GertError(f"DLPack tensor of dtype code {code} with {bits} bits has no numpy dtype")
    return np.dtype(f"{kind}{bits // 8}") if kind != "b" else np.dtype(np.bool_)


def array_from_dlpack(capsule) -> np.ndarray:
    """A copy of the CPU tensor in a "dltensor" capsule (bfloat16 as ml_dtypes.bfloat16); the capsule is consumed
    (renamed and its deleter called, as a DLPack consumer must)."""
    if not _capsule_is_valid(capsule, b"dltensor"):
        raise GertError("not an unconsumed DLPack capsule")
    managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    t = managed.dl_tensor
    try:
        if t.device.device_type not in (_CPU, _CUDA_HOST):
            raise GertError(
                f"DLPack tensor on device type {t.device.device_type}: gert_triton reads CPU tensors "
                "(leave FORCE_CPU_ONLY_INPUT_TENSORS at its default)"
            )
        if t.dtype.lanes != 1:
            raise GertError(f"DLPack tensor with {t.dtype.lanes} lanes")
        dtype = _numpy_dtype(t.dtype.code, t.dtype.bits)
        shape = tuple(t.shape[i] for i in range(t.ndim))
        count = int(np.prod(shape, dtype=np.int64))
        if t.strides and count > 1:
            expect, stride = [], 1
            for d in reversed(shape):
                expect.append(stride)
                stride *= d
            if any(shape[i] != 1 and t.strides[i] != s for i, s in enumerate(reversed(expect))):
                raise GertError("DLPack tensor is not C-contiguous")
        nbytes = count * dtype.itemsize
        raw = (ctypes.c_uint8 * nbytes).from_address(t.data + t.byte_offset) if nbytes else b""
        return np.frombuffer(bytes(raw), dtype=dtype).reshape(shape)
    finally:
        _capsule_set_name(capsule, _USED)
        if managed.deleter:
            managed.deleter(ctypes.pointer(managed))


_exports: dict = {}  # address of an exported DLManagedTensor -> what must live until its deleter runs
_exports_lock = threading.Lock()


@_DELETER
def _release(managed) -> None:
    with _exports_lock:
        _exports.pop(ctypes.addressof(managed.contents), None)


def live_exports() -> int:
    """Exported arrays whose consumer has not called the deleter yet (the stub calls it when it frees the tensor)."""
    with _exports_lock:
        return len(_exports)


class DLPackArray:
    """A C-contiguous CPU array as a DLPack producer (``__dlpack__`` / ``__dlpack_device__``), bfloat16 included."""

    def __init__(self, array: np.ndarray):
        self.array = np.ascontiguousarray(array)

    def __dlpack_device__(self) -> tuple:
        return _CPU, 0

    def __dlpack__(self, stream=None):
        a = self.array
        if is_bfloat16(a.dtype):
            code, bits = _BFLOAT, 16
        else:
            code = {"i": _INT, "u": _UINT, "f": _FLOAT, "b": _BOOL}.get(a.dtype.kind)
            if code is None:
                raise GertError(f"dtype {a.dtype} has no DLPack type")
            bits = a.dtype.itemsize * 8
        managed = _DLManagedTensor()
        shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        managed.dl_tensor = _DLTensor(
            a.ctypes.data,
            _DLDevice(_CPU, 0),
            a.ndim,
            _DLDataType(code, bits, 1),
            ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
            None,
            0,
        )
        managed.deleter = _release
        address = ctypes.addressof(managed)
        with _exports_lock:
            _exports[address] = (managed, shape, a)
        return _capsule_new(address, b"dltensor", None)


def as_array(tensor) -> np.ndarray:
    """The numpy array of a pb_utils input tensor; a BF16 one (no numpy view in the stub) copied out via DLPack."""
    try:
        arr = tensor.as_numpy()
    except Exception as e:  # noqa: BLE001 - the stub's TritonModelException for BF16 (and GPU tensors)
        first = e
        arr = None
    else:
        first = None
    if arr is not None:
        return arr
    to_dlpack = getattr(tensor, "to_dlpack", None)
    if to_dlpack is None:
        raise GertError(f"input '{tensor.name()}': the tensor has no numpy view" + (f" ({first})" if first else ""))
    return array_from_dlpack(to_dlpack())


def to_tensor(pb_utils, name: str, arr: np.ndarray):
    """A pb_utils output tensor of ``arr`` (C-contiguous); bfloat16 goes as a TYPE_BF16 tensor through DLPack."""
    if is_bfloat16(arr.dtype):
        return pb_utils.Tensor.from_dlpack(name, DLPackArray(arr))
    return pb_utils.Tensor(name, arr if arr.flags.c_contiguous else np.ascontiguousarray(arr))
