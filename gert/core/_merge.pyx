# cython: language_level=3
"""Several requests' rows merged along the batch axis into one batch, compiled: the one implementation for the Python
path (gert.core.batching: Batcher.merge; gert.core.transfers: Transfers.upload lays a batch out with lay_out) and the
compiled hot path (HotPath.run_list, gert/core/_hotpath.pyx, which cimports join: gert/core/_merge.pxd).

A merged batch is a Rows: the requests' arrays kept apart (no host concatenation), checked to share one dtype and one
shape off the batch axis, with the sum of their rows on it. On axis 0 its parts are one upload, laid one after the
other in the device buffer by the binding (cbindings/_fused.pxi ``_push_pieces``: the one place that places them,
gathering small ones on the host first; lay_out only lists the parts), then the padding rows up to the gear
(lay_out: a memset for 0, else one more upload); on another axis the parts are laid out once in a host array of the
run's shape, padding included. The hot path's prepared run is the upload lay_out listed for the whole batch and the
same fills, fed with the parts of the Rows that join built from the caller's arrays, placed by the same binding code.
"""
import math

import numpy as np

from gert.errors import GertError

cdef object _ndarray = np.ndarray
cdef object _require = np.require
cdef object _asarray = np.asarray


cdef class Rows:
    """Parts with one dtype and one shape off the batch ``axis``, as one batch of the sum of their rows. On axis 0
    the parts are C-contiguous (each is uploaded as it is); on another axis they may be views (laid out by
    ``write_to``). Looks enough like an array for validation (shape, dtype, ndim, size, nbytes) and takes row ranges
    (for chunks and split batches) without copying."""

    def __init__(self, parts: list, what: str = "input", axis: int = 0):
        self._fill(list(parts), axis, what, True)

    cdef bint _fill(self, list parts, Py_ssize_t axis, object what, bint strict, list counts=None) except -1:
        """Check ``parts`` and take them: True (``counts``, if given, gets each part's rows). ``strict`` (the Python path): each part made an array (on axis 0
        C-contiguous, copied if it is not), and a mismatch raises GertError naming ``what``, the request and both
        values. Not strict (the hot path, on the caller's raw input): every part must be an ndarray already with rows
        (a request of 0 rows is the Python path's: answered without a run), and a mismatch returns False (the caller
        takes the Python path, which raises)."""
        cdef Py_ssize_t k = len(parts), i, nd, d, n, total = 0
        cdef object a, first, dt
        cdef tuple s, fs
        if k == 0:
            if strict:
                raise GertError(f"{what}: no rows")
            return False
        if strict:
            parts = [_require(_asarray(p), requirements="C") if axis == 0 else _asarray(p) for p in parts]
        first = parts[0]
        if not strict and type(first) is not _ndarray:
            return False
        fs = first.shape
        nd = len(fs)
        if nd <= axis:
            if strict:
                raise GertError(
                    f"{what}: a {nd}-d array has no batch axis {axis} to join on"
                    if nd
                    else f"{what}: a 0-d array has no batch axis to join on"
                )
            return False
        dt = first.dtype
        total = fs[axis]
        if not strict and total == 0:
            return False
        if counts is not None:
            counts.append(fs[axis])
        for i in range(1, k):
            a = parts[i]
            if not strict and type(a) is not _ndarray:
                return False
            if a.dtype is not dt and a.dtype != dt:
                if strict:
                    raise GertError(
                        f"{what}: request {i} has dtype {a.dtype}, request 0 has {dt}; one batch takes one dtype"
                    )
                return False
            s = a.shape
            if len(s) != nd:
                if strict:
                    _other_shape(what, i, s, fs)
                return False
            for d in range(nd):
                if d != axis and s[d] is not fs[d] and s[d] != fs[d]:
                    if strict:
                        _other_shape(what, i, s, fs)
                    return False
            n = s[axis]
            if not strict and n == 0:
                return False
            total += n
            if counts is not None:
                counts.append(s[axis])
        self.parts = parts
        self.axis = axis
        self.shape = (total,) + fs[1:] if axis == 0 else fs[:axis] + (total,) + fs[axis + 1:]
        self.dtype = dt
        return True

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def take(self, Py_ssize_t start, Py_ssize_t rows) -> Rows:
        """Rows start:start+rows along the batch axis, as views of the parts (no copy)."""
        cdef Py_ssize_t axis = self.axis, total = self.shape[axis], stop, offset = 0, n, lo, hi
        start, stop = max(0, min(start, total)), max(0, min(start + rows, total))
        cdef list picked = []
        for a in self.parts:
            n = a.shape[axis]
            lo, hi = max(start - offset, 0), min(stop - offset, n)
            if lo < hi:
                picked.append(_along(a, axis, lo, hi))
            offset += n
        if not picked:
            picked = [_along(self.parts[0], axis, 0, 0)]
        cdef Rows out = Rows.__new__(Rows)
        out.parts, out.dtype, out.axis = picked, self.dtype, axis
        out.shape = self.shape[:axis] + (max(stop - start, 0),) + self.shape[axis + 1:]
        return out

    def __getitem__(self, rows: slice) -> Rows:
        """Rows start:stop (step 1) of a batch on axis 0, as views of the parts."""
        if not isinstance(rows, slice) or rows.step not in (None, 1) or self.axis != 0:
            raise TypeError("Rows only slices contiguous row ranges of a batch on axis 0; use take() on another axis")
        start, stop, _ = rows.indices(self.shape[0])
        return self.take(start, stop - start)

    def write_to(self, dst) -> None:
        """Each part into its place in ``dst`` (at least this batch's shape on every axis; the rest is left as it
        is: the caller's padding)."""
        cdef Py_ssize_t axis = self.axis, offset = 0, n
        index = [slice(0, s) for s in self.shape]
        for a in self.parts:
            n = a.shape[axis]
            index[axis] = slice(offset, offset + n)
            dst[tuple(index)] = a
            offset += n

    def __array__(self, dtype=None, copy=None):
        """The joined batch (a copy): for the paths that stage on the host anyway."""
        joined = np.concatenate(self.parts, axis=self.axis)
        return joined if dtype is None else joined.astype(dtype, copy=False)


cdef object _other_shape(object what, Py_ssize_t i, tuple shape, tuple first):
    raise GertError(
        f"{what}: request {i} has shape {shape}, request 0 has {first}; one batch takes one non-batch shape"
    )


cdef object _along(object a, Py_ssize_t axis, Py_ssize_t lo, Py_ssize_t hi):
    """a[..., lo:hi, ...] on ``axis`` (a view)."""
    if axis == 0:
        return a[lo:hi]
    index = [slice(None)] * a.ndim
    index[axis] = slice(lo, hi)
    return a[tuple(index)]


cdef Rows join(list parts, Py_ssize_t axis, object what, bint strict, list counts=None):
    """The Rows of ``parts`` joined on ``axis`` (Rows._fill; ``counts`` gets each part's rows); None when not
    ``strict`` and they do not form one batch."""
    cdef Rows r = Rows.__new__(Rows)
    if not r._fill(parts, axis, what, strict, counts):
        return None
    return r


cpdef dict merge(object requests, object axes, object pad_to, object pad_values, Py_ssize_t total):
    """One batch of ``requests`` (input name -> array each; ``total`` rows in all): each input with a batch axis
    (``axes``: name -> axis, None: no batch axis) joined on it as a Rows, padded with rows of its ``pad_values``
    (name -> value, 0 if absent) up to ``pad_to`` rows (None: no padding); an input without the batch axis taken
    from the first request. A lone unpadded request's arrays are its own."""
    first = requests[0]
    cdef bint pad = pad_to is not None and pad_to > total
    cdef dict out = {}
    cdef list parts
    for n in first:
        axis = axes.get(n)
        if axis is None:
            out[n] = first[n]
            continue
        parts = [r[n] for r in requests]
        if pad:
            like = _asarray(parts[0])
            shape = list(like.shape)
            shape[axis] = pad_to - total
            parts.append(np.full(shape, pad_values.get(n, 0), like.dtype))
        out[n] = parts[0] if len(parts) == 1 else join(parts, axis, f"input '{n}'", True)
    return out


cpdef lay_out(object arr, object shape, object buf, object pad_value, list uploads, list fills):
    """The H2D copies (dptr, dmax, host array, or a list of host arrays laid one after the other) and memsets (dptr,
    dmax, nbytes, value) that lay ``arr`` out in the device buffer ``buf`` (.ptr, .nbytes) as ``shape`` (>= arr.shape
    on every axis), appended to ``uploads`` and ``fills``. A Rows on axis 0 is one upload of its parts in order (no
    host concatenation; the binding places them, as it places the hot path's: Session.run_fused,
    memcpy_uploads_async, FusedCall), then the padding rows: a memset for 0, else one upload of them. A batch on
    another axis (a Rows, or a strided view) or a padded non-batch axis is laid out once in a host array of
    ``shape`` (padding included): only C-contiguous memory is uploaded."""
    cdef bint strided = (type(arr) is _ndarray and not arr.flags.c_contiguous
                         or type(arr) is Rows and (<Rows>arr).axis != 0)
    if not strided and arr.shape[1:] == shape[1:] and len(shape) > 0:  # real rows, then pad rows (if padded)
        if type(arr) is Rows:  # its parts laid one after the other: placed by the binding (Session.run_fused)
            if arr.nbytes:
                uploads.append((buf.ptr, buf.nbytes, [part for part in (<Rows>arr).parts if part.nbytes]))
        else:
            uploads.append((buf.ptr, buf.nbytes, arr))
        pad_bytes = (shape[0] - arr.shape[0]) * math.prod(shape[1:]) * arr.dtype.itemsize
        if pad_bytes:
            if pad_value == 0:
                fills.append((buf.ptr + arr.nbytes, buf.nbytes - arr.nbytes, pad_bytes, 0))
            else:
                pad = np.full((shape[0] - arr.shape[0],) + shape[1:], pad_value, arr.dtype)
                uploads.append((buf.ptr + arr.nbytes, buf.nbytes - arr.nbytes, pad))
        return
    if not strided and arr.shape == shape:  # 0-d
        uploads.append((buf.ptr, buf.nbytes, arr))
        return
    # a padded non-batch axis or batch on another axis: staged on the host in one copy
    staged = np.empty(shape, arr.dtype) if arr.shape == tuple(shape) else np.full(shape, pad_value, arr.dtype)
    if type(arr) is Rows:
        arr.write_to(staged)
    else:
        staged[tuple([slice(0, s) for s in arr.shape])] = arr
    uploads.append((buf.ptr, buf.nbytes, staged))
