"""gert.rows.Rows and Model.run_batch, which hands the executor each request's rows instead of a host-concatenated
batch: row slicing across parts, the errors, and run_batch results (exact gear, padded batch, a batch split over
streams through the middle of a request, a padded non-batch axis, a batch above the top gear) against the
reference of each request alone."""

from __future__ import annotations

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
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
