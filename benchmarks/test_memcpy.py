"""Host-to-device copy through a stream vs numpy.copyto of the same bytes.

gert: ``DeviceBuffer.copy_from(src, stream)`` + ``stream.synchronize()`` (the stream round trip: enqueue, the
stream's worker copies, the waiter wakes), and the synchronous ``DeviceBuffer.copy_from(src)``. Baseline:
``numpy.copyto`` into a host array of the same size. Sizes 4 KiB and 64 MiB. Targets (issue 2): 64 MiB within
1.3x of numpy.copyto; under 10 us per 4 KiB async copy + synchronize.
"""

from __future__ import annotations

import numpy as np
import pytest

import gert
from _common import tag, warm

SIZES = {"4KiB": 4 << 10, "64MiB": 64 << 20}


@pytest.fixture(scope="module")
def stream():
    with gert.Stream() as s:
        yield s


@pytest.mark.parametrize("kind", ["numpy_copyto", "gert_async_sync", "gert_sync"])  # a group's runs back to back
@pytest.mark.parametrize("size", list(SIZES))
def test_memcpy(benchmark, measuring, stream, size, kind):
    nbytes = SIZES[size]
    src = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    tag(benchmark, f"memcpy H2D {size}", "baseline" if kind == "numpy_copyto" else "gert", bytes=nbytes)
    if kind == "numpy_copyto":
        dst = np.empty_like(src)
        warm(lambda: np.copyto(dst, src), measuring)  # pages touched, as the device buffer's are
        benchmark(np.copyto, dst, src)
        assert np.array_equal(dst, src)
        return
    buf = gert.DeviceBuffer(nbytes)
    if kind == "gert_async_sync":

        def fn():
            buf.copy_from(src, stream)
            stream.synchronize()
    else:

        def fn():
            buf.copy_from(src)

    warm(fn, measuring)  # the stream's worker gets a core of its own before timing
    benchmark(fn)
    check = np.empty_like(src)
    buf.copy_to(check)
    assert np.array_equal(check, src)
