"""Rows: several arrays that form one batch along its batch axis, left apart.

Model.run_batch hands the executor a Rows per input instead of np.concatenate(...). On axis 0 each request's rows are
copied straight into their place in the device buffer (one copy per request, no host staging copy of the whole
batch). On another axis ([T, N, F] with the batch N) a request's rows are not one block of memory; the executor lays
the parts out once, in one host buffer of the run's shape (padding included), and uploads that: one copy, however
the batch was merged, cut into chunks or padded. A Rows looks enough like an array for validation (shape, dtype,
ndim, size, nbytes) and takes row ranges (for chunks and split batches) without copying.

Rows is compiled (gert/core/_merge.pyx): the one merge of requests' rows, which the compiled hot path's run(list)
joins its requests with too. This module is its name for the Python side.
"""

from __future__ import annotations

from gert.core._merge import Rows

__all__ = ["Rows"]
