"""Device tensors (a DeviceBuffer with a shape and dtype) and the compile summary of a GE graph."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from gert._cann import DeviceBuffer, Stream
from gert.dtypes import ge_dtype
from gert.errors import GertError


@dataclass
class DeviceTensor:
    """``shape`` x ``dtype`` elements at the start of ``buffer`` (device memory); what GE graphs take and give."""

    buffer: DeviceBuffer
    shape: tuple
    dtype: np.dtype
    ge_dtype: int = field(init=False)

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        if any(d < 0 for d in self.shape):
            raise GertError(f"DeviceTensor: shape {self.shape} has a negative dim")
        self.dtype = np.dtype(self.dtype)
        self.ge_dtype = ge_dtype(self.dtype)
        if self.nbytes > self.buffer.nbytes:
            raise GertError(f"DeviceTensor: shape {self.shape} of {self.dtype} needs {self.nbytes} bytes, "
                            f"the buffer holds {self.buffer.nbytes}")

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def ptr(self) -> int:
        return self.buffer.ptr

    @classmethod
    def empty(cls, shape: Sequence[int], dtype, device=None) -> "DeviceTensor":
        """Uninitialized device memory for ``shape`` x ``dtype``."""
        dt = np.dtype(dtype)
        n = math.prod(int(d) for d in shape) * dt.itemsize
        return cls(DeviceBuffer(n, device), tuple(shape), dt)

    @classmethod
    def from_numpy(cls, array, stream: Optional[Stream] = None, device=None) -> "DeviceTensor":
        """Copy a numpy array to the device (queued on ``stream`` when given; the array stays alive until its
        synchronize)."""
        a = np.asarray(array)
        if not a.flags.c_contiguous:
            a = np.require(a, requirements="C")
        t = cls.empty(a.shape, a.dtype, device if stream is None or device is not None else stream.device_id)
        t.buffer.copy_from(a, stream)
        return t

    def to_numpy(self, stream: Optional[Stream] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Copy to a numpy array (into ``out`` when given). With ``stream``, the copy is queued: synchronize before
        reading the result."""
        if out is None:
            out = np.empty(self.shape, self.dtype)
        elif out.shape != self.shape or out.dtype != self.dtype:
            raise GertError(f"to_numpy: out is {out.shape} {out.dtype}, the tensor is {self.shape} {self.dtype}")
        if self.nbytes:
            self.buffer.copy_to(out.reshape(-1).view(np.uint8) if out.flags.c_contiguous else out, stream)
        return out

    def __repr__(self) -> str:
        return f"DeviceTensor(shape={self.shape}, dtype={self.dtype}, ptr=0x{self.ptr:x})"


@dataclass(frozen=True)
class GraphSummary:
    """What CompileGraph found (GetCompiledGraphSummary)."""

    is_static: bool
    const_memory_size: int
    feature_memory_size: int
    output_shapes: list
    output_dtypes: list
