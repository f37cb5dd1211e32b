"""A batch's outputs split into its requests' rows (gert/core/_split.pyx, compiled): the one implementation behind
Batcher.split / batching.take (the Python path) and HotPath.run_list (the compiled path). Checked against the plain
Python it replaced, on each kind of output: batch on axis 0, on another axis, no batch axis, fewer dims than the
axis, a Rows."""

from __future__ import annotations

import numpy as np
import pytest

from gert.core import batching
from gert.core._split import split, take
from gert.core.rows import Rows


def _take(value, axis, start, rows):
    """batching.take as it was in Python."""
    if axis is None or len(value.shape) <= axis:
        return value
    if type(value) is Rows:
        return value.take(start, rows)
    if axis == 0:
        return value[start : start + rows]
    index = [slice(None)] * len(value.shape)
    index[axis] = slice(start, start + rows)
    return value[tuple(index)]


def _split(out, rows, axes):
    """Batcher.split's loop as it was in Python."""
    results: list = [dict() for _ in rows]
    for name, value in out.items():
        offset = 0
        for res, r in zip(results, rows):
            res[name] = _take(value, axes.get(name), offset, r)
            offset += r
    return results


def _outputs() -> tuple:
    rng = np.random.default_rng(0)
    out = {
        "first": rng.standard_normal((6, 3)).astype(np.float32),  # batch on axis 0
        "middle": rng.standard_normal((2, 6, 4)),  # batch on axis 1 ([T, N, F])
        "shared": np.arange(5),  # no batch axis: every request gets it whole
        "flat": np.float32(7.0),  # a 0-d output named with an axis: fewer dims than the axis, as it is
        "rows": Rows([rng.standard_normal((2, 3)), rng.standard_normal((4, 3))], "output", 0),
    }
    axes = {"first": 0, "middle": 1, "shared": None, "flat": 0, "rows": 0}
    return out, axes


@pytest.mark.parametrize("rows", [[6], [1, 5], [2, 2, 2], [3, 0, 3], [np.int64(4), np.int64(2)]])
def test_split_gives_each_request_the_rows_the_python_code_gave(rows):
    out, axes = _outputs()
    got, want = split(out, rows, axes), _split(out, rows, axes)
    assert len(got) == len(want) == len(rows)
    for g, w in zip(got, want):
        assert list(g) == list(w)
        for name in w:
            if isinstance(w[name], Rows):
                assert g[name].shape == w[name].shape
                np.testing.assert_array_equal(np.concatenate(g[name].parts), np.concatenate(w[name].parts))
            else:
                assert type(g[name]) is type(w[name]) and np.shape(g[name]) == np.shape(w[name])
                np.testing.assert_array_equal(g[name], w[name])
    # views, not copies: a request's rows share the batch's memory
    assert all(np.shares_memory(g["first"], out["first"]) for g in got if g["first"].size)


@pytest.mark.parametrize("axis, start, rows", [(0, 1, 2), (1, 2, 3), (None, 0, 1), (2, 0, 1), (1, 5, 4)])
def test_take_is_the_python_take(axis, start, rows):
    value = np.arange(2 * 6 * 4).reshape(2, 6, 4) if axis != 2 else np.arange(12).reshape(6, 2)
    want = _take(value, axis, start, rows)
    got = take(value, axis, start, rows)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert batching.take is take  # the Python path's take is this one


def test_batcher_split_uses_the_compiled_split():
    assert batching.split_rows is split
