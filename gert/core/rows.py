"""Rows: several arrays that form one batch along its batch axis, left apart.

Model.run_batch hands the executor a Rows per input instead of np.concatenate(...). On axis 0 each request's rows are
copied straight into their place in the device buffer (one copy per request, no host staging copy of the whole
batch). On another axis ([T, N, F] with the batch N) a request's rows are not one block of memory; the executor lays
the parts out once, in one host buffer of the run's shape (padding included), and uploads that: one copy, however
the batch was merged, cut into chunks or padded. A Rows looks enough like an array for validation (shape, dtype,
ndim, size, nbytes) and takes row ranges (for chunks and split batches) without copying.
"""

from __future__ import annotations

import numpy as np

from gert.errors import GertError


class Rows:
    """Parts with one dtype and one shape off the batch ``axis``, as one batch of the sum of their rows. On axis 0
    the parts are C-contiguous (each is uploaded as it is); on another axis they may be views (laid out by
    ``write_to``)."""

    __slots__ = ("parts", "shape", "dtype", "axis")

    def __init__(self, parts: list, what: str = "input", axis: int = 0):
        if not parts:
            raise GertError(f"{what}: no rows")
        arrays = [np.require(np.asarray(p), requirements="C") if axis == 0 else np.asarray(p) for p in parts]
        first = arrays[0]
        if first.ndim <= axis:
            raise GertError(
                f"{what}: a {first.ndim}-d array has no batch axis {axis} to join on"
                if first.ndim
                else f"{what}: a 0-d array has no batch axis to join on"
            )
        rest = first.shape[:axis] + first.shape[axis + 1 :]
        for i, a in enumerate(arrays[1:], start=1):
            if a.dtype != first.dtype:
                raise GertError(
                    f"{what}: request {i} has dtype {a.dtype}, request 0 has {first.dtype}; one batch takes one dtype"
                )
            if a.ndim != first.ndim or a.shape[:axis] + a.shape[axis + 1 :] != rest:
                raise GertError(
                    f"{what}: request {i} has shape {a.shape}, request 0 has {first.shape}; "
                    "one batch takes one non-batch shape"
                )
        self.parts = arrays
        self.axis = axis
        self.shape = first.shape[:axis] + (sum(a.shape[axis] for a in arrays),) + first.shape[axis + 1 :]
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

    def take(self, start: int, rows: int) -> "Rows":
        """Rows start:start+rows along the batch axis, as views of the parts (no copy)."""
        axis = self.axis
        total = self.shape[axis]
        start, stop = max(0, min(start, total)), max(0, min(start + rows, total))
        picked, offset = [], 0
        for a in self.parts:
            n = a.shape[axis]
            lo, hi = max(start - offset, 0), min(stop - offset, n)
            if lo < hi:
                picked.append(_along(a, axis, lo, hi))
            offset += n
        if not picked:
            picked = [_along(self.parts[0], axis, 0, 0)]
        out = Rows.__new__(Rows)
        out.parts, out.dtype, out.axis = picked, self.dtype, axis
        out.shape = self.shape[:axis] + (max(stop - start, 0),) + self.shape[axis + 1 :]
        return out

    def __getitem__(self, rows: slice) -> "Rows":
        """Rows start:stop (step 1) of a batch on axis 0, as views of the parts."""
        if not isinstance(rows, slice) or rows.step not in (None, 1) or self.axis != 0:
            raise TypeError("Rows only slices contiguous row ranges of a batch on axis 0; use take() on another axis")
        start, stop, _ = rows.indices(self.shape[0])
        return self.take(start, stop - start)

    def write_to(self, dst: np.ndarray) -> None:
        """Each part into its place in ``dst`` (at least this batch's shape on every axis; the rest is left as it
        is: the caller's padding)."""
        axis, offset = self.axis, 0
        index = [slice(0, s) for s in self.shape]
        for a in self.parts:
            n = a.shape[axis]
            index[axis] = slice(offset, offset + n)
            dst[tuple(index)] = a
            offset += n

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """The joined batch (a copy): for the paths that stage on the host anyway."""
        joined = np.concatenate(self.parts, axis=self.axis)
        return joined if dtype is None else joined.astype(dtype, copy=False)


def _along(a: np.ndarray, axis: int, lo: int, hi: int) -> np.ndarray:
    """a[..., lo:hi, ...] on ``axis`` (a view)."""
    if axis == 0:
        return a[lo:hi]
    index = [slice(None)] * a.ndim
    index[axis] = slice(lo, hi)
    return a[tuple(index)]
