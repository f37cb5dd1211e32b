"""Rows: several arrays that form one batch along axis 0, left apart.

Model.run_batch hands the executor a Rows per input instead of np.concatenate(...): each request's rows are copied
straight into their place in the device buffer (one copy per request, no host staging copy of the whole batch).
A Rows looks enough like an array for validation (shape, dtype, ndim, size, nbytes) and slices by rows (for
split batches) without copying.
"""
from __future__ import annotations

import numpy as np

from gert.errors import GertError


class Rows:
    """C-contiguous parts with one dtype and one non-batch shape, as one (sum of rows, ...) batch."""

    __slots__ = ("parts", "shape", "dtype")

    def __init__(self, parts: list, what: str = "input"):
        if not parts:
            raise GertError(f"{what}: no rows")
        arrays = [np.require(np.asarray(p), requirements="C") for p in parts]
        first = arrays[0]
        if first.ndim == 0:
            raise GertError(f"{what}: a 0-d array has no batch axis to join on")
        for i, a in enumerate(arrays[1:], start=1):
            if a.dtype != first.dtype:
                raise GertError(f"{what}: request {i} has dtype {a.dtype}, request 0 has {first.dtype}; "
                                "one batch takes one dtype")
            if a.shape[1:] != first.shape[1:]:
                raise GertError(f"{what}: request {i} has shape {a.shape}, request 0 has {first.shape}; "
                                "one batch takes one non-batch shape")
        self.parts = arrays
        self.shape = (sum(a.shape[0] for a in arrays),) + first.shape[1:]
        self.dtype = first.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __getitem__(self, rows: slice) -> "Rows":
        """Rows start:stop (step 1) as views of the parts."""
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise TypeError("Rows only slices contiguous row ranges")
        start, stop, _ = rows.indices(self.shape[0])
        picked, offset = [], 0
        for a in self.parts:
            n = a.shape[0]
            lo, hi = max(start - offset, 0), min(stop - offset, n)
            if lo < hi:
                picked.append(a[lo:hi])
            offset += n
        if not picked:
            picked = [self.parts[0][:0]]
        out = Rows.__new__(Rows)
        out.parts, out.dtype = picked, self.dtype
        out.shape = (max(stop - start, 0),) + self.shape[1:]
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """The joined batch (a copy): for the paths that stage on the host anyway."""
        joined = np.concatenate(self.parts, axis=0)
        return joined if dtype is None else joined.astype(dtype, copy=False)
