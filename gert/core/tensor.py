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
            raise GertError(
                f"DeviceTensor: shape {self.shape} of {self.dtype} needs {self.nbytes} bytes, "
                f"the buffer holds {self.buffer.nbytes}"
            )

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def ptr(self) -> int:
        return self.buffer.ptr

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

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


_NOT_STATIC = (
    "graph {graph_id} is an unknown-shape graph (an input dim is dynamic, or a shape depends on input "
    "values): GE's GetCompiledGraphSummary reports {what} only for static graphs; the outputs' shapes "
    "come with each execution"
)


@dataclass(frozen=True)
class GraphSummary:
    """What CompileGraph found (GetCompiledGraphSummary). On a graph that is not static, GE's output shape, dtype and
    memory getters fail: reading those fields raises GeError (GE never reports a -1 shape)."""

    is_static: bool
    _const_memory_size: Optional[int]
    _feature_memory_size: Optional[int]
    _output_shapes: Optional[list]
    _output_dtypes: Optional[list]
    graph_id: int = 0

    def _get(self, value, what: str):
        if value is None:
            from gert.errors import GeError

            raise GeError(0xFFFFFFFF, _NOT_STATIC.format(graph_id=self.graph_id, what=what))
        return value

    @property
    def const_memory_size(self) -> int:
        return self._get(self._const_memory_size, "the const memory size")

    @property
    def feature_memory_size(self) -> int:
        return self._get(self._feature_memory_size, "the feature memory size")

    @property
    def output_shapes(self) -> list:
        return self._get(self._output_shapes, "output shapes")

    @property
    def output_dtypes(self) -> list:
        return self._get(self._output_dtypes, "output dtypes")
