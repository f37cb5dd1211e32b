"""gert.rows.Rows and Model.run_batch, which hands the executor each request's rows instead of a host-concatenated
batch: row slicing across parts, the errors, and run_batch results (exact gear, padded batch, a batch split over
streams through the middle of a request, a padded non-batch axis, a batch above the top gear) against the
reference of each request alone."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gert
from _helpers import RUNTIME
from gert import _cann
from gert.core import batching, transfers
from gert.core._merge import lay_out, merge
from gert.errors import GertError
from gert.rows import Rows
from triton_models import seq_expected, seq_inputs, seq_model

pytestmark = RUNTIME


def test_rows_shape_and_slices_across_parts():
    parts = [np.arange(k * 6, (k + n) * 6, dtype=np.float32).reshape(n, 2, 3) for k, n in ((0, 1), (1, 3), (4, 2))]
    r = Rows(parts)
    joined = np.concatenate(parts)
    assert r.shape == (6, 2, 3) and r.dtype == np.float32 and r.ndim == 3
    assert r.size == joined.size and r.nbytes == joined.nbytes
    np.testing.assert_array_equal(np.asarray(r), joined)
    for start in range(7):
        for stop in range(start, 7):
            s = r[start:stop]
            assert s.shape == (stop - start, 2, 3), (start, stop)
            np.testing.assert_array_equal(np.asarray(s), joined[start:stop])
            assert all(any(np.shares_memory(p, q) for q in parts) for p in s.parts if p.size), "views, not copies"
    with pytest.raises(TypeError):
        r[::2]


def test_rows_refuses_mixed_parts():
    a = np.zeros((1, 3), np.float32)
    with pytest.raises(GertError, match=r"input 'x': request 1 has dtype float64, request 0 has float32"):
        Rows([a, np.zeros((1, 3))], "input 'x'")
    with pytest.raises(GertError, match=r"request 2 has shape \(1, 4\), request 0 has \(1, 3\)"):
        Rows([a, a, np.zeros((1, 4), np.float32)])
    with pytest.raises(GertError, match="0-d"):
        Rows([np.float32(1), np.float32(2)])
    with pytest.raises(GertError, match="no rows"):
        Rows([])


class _Device:
    """A device buffer of the host NPU (.ptr, .nbytes) that lay_out's copies and fills are applied to by the binding,
    as the Python path's dynamic graphs queue them (memcpy_uploads_async: the one place a merged batch's parts are
    placed, also behind Session.run_fused and the hot path's FusedCall); read back whole. It starts as 0xA5 bytes
    (no pad value): a byte left unwritten shows. The binding checks every copy and fill against the buffer."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self.buffer = gert.DeviceBuffer(max(nbytes, 1))
        self.ptr = self.buffer.ptr
        self.stream = gert.Stream()
        _cann.memset(self.ptr, self.buffer.nbytes, 0xA5, self.buffer.nbytes)

    def apply(self, uploads: list, fills: list) -> np.ndarray:
        _cann.memcpy_uploads_async(uploads, self.stream.handle)
        for dptr, dmax, n, value in fills:
            assert n <= dmax == self.nbytes - (dptr - self.ptr)
            _cann.memset_async(dptr, dmax, value, n, self.stream.handle)
        self.stream.synchronize()
        out = np.empty(self.buffer.nbytes, np.uint8)
        self.buffer.copy_to(out)
        return out[: self.nbytes]


@st.composite
def _merges(draw):
    """Requests of one dtype and non-batch shape (random rank, batch axis, sizes, 0-row requests too), an input
    without the batch axis, optional pad rows, and the run's shape: the merged rows plus gear rows on the batch
    axis, and on axis 0 maybe padded non-batch axes."""
    dtype = np.dtype(draw(st.sampled_from(["float32", "float64", "float16", "int8", "int64", "uint16", "bool"])))
    ndim = draw(st.integers(1, 4))
    axis = draw(st.integers(0, ndim - 1))
    rest = draw(st.lists(st.integers(0, 3), min_size=ndim - 1, max_size=ndim - 1))
    rows = draw(st.lists(st.integers(0, 4), min_size=1, max_size=6))
    seed = draw(st.integers(0, 2**16))
    pad_value = draw(st.sampled_from([0, 1, -1, 7]))
    total = sum(rows)
    pad_to = draw(st.one_of(st.none(), st.integers(0, total + 3)))
    gear = draw(st.integers(0, 3))  # rows the executor pads on top (the graph's gear)
    wider = draw(st.lists(st.integers(0, 2), min_size=ndim - 1, max_size=ndim - 1))  # padded non-batch axes
    return dtype, axis, rest, rows, seed, pad_value, pad_to, gear, wider


def _shape(rest: list, axis: int, n: int) -> tuple:
    return tuple(rest[:axis]) + (n,) + tuple(rest[axis:])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=_merges())
def test_the_one_merge_is_numpys_concatenate_plus_padding(case):
    """gert/core/_merge.pyx, the merge behind Batcher.merge, Transfers.upload and HotPath.run_list: the merged
    batch of random requests equals np.concatenate along the batch axis with the pad rows appended, and lay_out
    puts exactly that (and the run's padding, of the pad value) into the device buffer: no request's row lost,
    moved or doubled, nothing left unwritten."""
    dtype, axis, rest, rows, seed, pad_value, pad_to, gear, wider = case
    rng = np.random.default_rng(seed)
    reqs = [
        {"x": (rng.integers(-100, 100, _shape(rest, axis, n)) * 0.5).astype(dtype), "k": np.array(3, np.int64)}
        for n in rows
    ]
    total = sum(rows)
    out = merge(reqs, {"x": axis, "k": None}, pad_to, {"x": pad_value}, total)
    want = np.concatenate([r["x"] for r in reqs], axis=axis)
    if pad_to is not None and pad_to > total:
        want = np.concatenate([want, np.full(_shape(rest, axis, pad_to - total), pad_value, dtype)], axis=axis)
    x = out["x"]
    assert out["k"] is reqs[0]["k"]  # an input without the batch axis: the first request's
    if len(reqs) == 1 and not (pad_to is not None and pad_to > total):
        assert x is reqs[0]["x"]  # a lone unpadded request: its own array
    else:
        assert type(x) is Rows and x.axis == axis and x.shape == want.shape and x.dtype == dtype
        assert x.nbytes == want.nbytes and x.size == want.size and x.ndim == want.ndim
        assert all(p is r["x"] for p, r in zip(x.parts, reqs)), "the requests' own arrays, not copies"
    np.testing.assert_array_equal(np.asarray(x), want)
    # the run's shape: gear rows on the batch axis; on axis 0 maybe wider non-batch axes (staged on the host)
    shape = list(want.shape)
    shape[axis] += gear
    if axis == 0:
        shape[1:] = [d + w for d, w in zip(shape[1:], wider)]
    shape = tuple(shape)
    run = np.full(shape, pad_value, dtype)
    run[tuple(slice(0, d) for d in want.shape)] = want
    dev = _Device(run.nbytes)
    uploads: list = []
    fills: list = []
    lay_out(x, shape, dev, pad_value, uploads, fills)
    assert all(dmax == dev.nbytes - (dptr - dev.ptr) for dptr, dmax, _ in uploads)
    np.testing.assert_array_equal(dev.apply(uploads, fills).view(dtype).reshape(shape), run)


def test_the_python_path_runs_the_one_merge():
    """Batcher.merge, Transfers.upload and gert.rows.Rows are gert/core/_merge.pyx's (no second copy in Python)."""
    assert batching.merge is merge and transfers.Transfers.upload is lay_out
    assert transfers.Rows is batching.Rows is Rows and Rows.__module__ == "gert.core._merge"


def test_rows_refuses_mixed_parts_naming_the_input_the_request_and_both_values():
    with pytest.raises(GertError, match=r"input 'y': request 1 has shape \(2, 3\), request 0 has \(2, 4\)"):
        Rows([np.zeros((2, 4)), np.zeros((2, 3))], "input 'y'", axis=0)
    with pytest.raises(GertError, match=r"input 'y': a 1-d array has no batch axis 1 to join on"):
        Rows([np.zeros(2), np.zeros(2)], "input 'y'", axis=1)
    with pytest.raises(GertError, match=r"request 1 has shape \(2,\), request 0 has \(2, 1\)"):
        Rows([np.zeros((2, 1)), np.zeros(2)])


def check_batch(model, requests: list) -> None:
    results = model.run_batch(requests)
    assert len(results) == len(requests)
    for i, (out, req) in enumerate(zip(results, requests)):
        exp = seq_expected(req)
        for k, v in exp.items():
            assert out[k].shape == v.shape and np.array_equal(out[k], v), f"request {i} output {k}"


@pytest.fixture(scope="module")
def seq():
    return seq_model()


def test_run_batch_exact_and_padded_gears(seq):
    with gert.load(seq, max_batch=4) as m:
        check_batch(m, [seq_inputs(b, 5, uid) for uid, b in enumerate([1, 2, 1])])  # 4 rows: gear 4
        check_batch(m, [seq_inputs(b, 5, uid) for uid, b in enumerate([1, 2])])  # 3 rows padded to 4
        check_batch(m, [seq_inputs(b, 5, uid) for uid, b in enumerate([2, 3, 1, 2])])  # 8 rows: two runs of 4
        hits = {k: g["hits"] for k, g in m.stats()["gears"].items()}
        assert hits == {"S=5,batch=4": 4}


def test_run_batch_split_over_streams_through_a_request(seq):
    with gert.load(seq, max_batch=8, streams=2, cube_cores=1, split_batch=True) as m:
        # 1 + 3 + 2 rows split 3 / 3: the second request's rows land in both halves
        check_batch(m, [seq_inputs(b, 4, uid) for uid, b in enumerate([1, 3, 2], start=10)])
        assert sum(s["requests"] for s in m.stats()["streams"]) == 2


def test_run_batch_with_a_padded_non_batch_axis(seq):
    with gert.load(seq, max_batch=4, gears={"S": [8]}, shape_policy={"S": "pad"}) as m:
        check_batch(m, [seq_inputs(b, 5, uid) for uid, b in enumerate([1, 2], start=20)])
        assert list(m.stats()["gears"]) == ["S=8,batch=4"]


def test_run_batch_errors_name_the_request_and_other_shapes_are_grouped(seq):
    with gert.load(seq, max_batch=4) as m:
        good = seq_inputs(1, 5, 1)
        check_batch(m, [good, seq_inputs(1, 6, 2)])  # other non-batch shapes: grouped (run_many), each its own
        with pytest.raises(GertError, match=r"request 1: inputs \['m'\] are missing"):
            m.run_batch([good, {"a": good["a"]}])
        with pytest.raises(GertError, match="expected dtype int64"):
            m.run_batch([{**good, "m": good["m"].astype(np.int32)}] * 2)
        check_batch(m, [good, good])  # still serving


def test_pieces_beyond_the_device_end_are_refused_by_the_runtime():
    """An upload made of pieces (memcpy_uploads_async, Session.run_fused) whose pieces hold more than its device end:
    the piece that would cross it is refused as a single copy is (ACL_ERROR_RT_PARAM_INVALID), whatever its offset
    (the room left is never computed past the end), and the pieces before it land."""
    dev = _Device(16)
    pieces = [np.full(2, 7, np.float32), np.full(2, 8, np.float32), np.ones(4, np.float32), np.ones(4, np.float32)]
    with pytest.raises(gert.AclError) as e:  # 48 bytes into 16: the third piece starts at the end
        _cann.memcpy_uploads_async([(dev.ptr, 16, pieces)], dev.stream.handle)
    assert e.value.code == 107000
    np.testing.assert_array_equal(dev.apply([], []).view(np.float32), [7, 7, 8, 8])
    with pytest.raises(gert.AclError):  # one piece alone larger than the device end
        _cann.memcpy_uploads_async([(dev.ptr, 16, [np.ones(8, np.float32)])], dev.stream.handle)
