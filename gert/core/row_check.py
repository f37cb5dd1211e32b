"""The row proof's cross-check: run k random rows together and each alone, and compare.

gert.core.row_proof decides which outputs have independent rows; this checks the decision on the running model
(``Model.check_rows()``): an output the proof calls independent whose rows differ between the batch and the row
alone is a bug in a rule, reported as an error naming the output, never silently trusted either way.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional

import numpy as np

from gert.core.shapes import ShapePlan
from gert.errors import GertError

_SIZES = (8, 16, 32, 48, 64, 4, 1)  # a non-batch dynamic dim's size, first that the model takes


def random_rows(plan: ShapePlan, rows: int, sizes: Mapping[str, int], rng: np.random.Generator) -> dict:
    """One request of ``rows`` rows: floats from a normal distribution, integers 0 (valid indices), booleans at
    random; non-batch dynamic dims at ``sizes``."""
    out = {}
    for t in plan.inputs:
        shape = []
        for axis, d in enumerate(t.shape):
            dim = plan.input_axes.get((t.name, axis))
            shape.append(rows if dim == "batch" else sizes.get(dim, 1) if dim is not None else int(d))
        if t.dtype.kind == "f":
            out[t.name] = rng.standard_normal(shape).astype(t.dtype)
        elif t.dtype.kind == "b":
            out[t.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            out[t.name] = np.zeros(shape, t.dtype)
    return out


def check_rows(
    plan: ShapePlan,
    run: Callable[[dict], dict],
    rows: int = 3,
    seed: int = 0,
    sizes: Optional[Mapping[str, int]] = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> dict:
    """Run ``rows`` random rows as one request and each row alone (``run``: the model's run); returns {output:
    "independent" | "not batched" | "not proved"}; GertError naming the first output the proof calls independent
    whose rows differ."""
    if plan.batch is None:
        return {t.name: "not batched" for t in plan.outputs}
    rng = np.random.default_rng(seed)
    dims = [n for n in plan.dims if n != "batch"]
    tried = [dict(sizes)] if sizes else [{n: s for n in dims} for s in _SIZES]
    last: Optional[Exception] = None
    for chosen in tried:
        batch = random_rows(plan, rows, chosen, rng)
        try:
            together = run(batch)
        except GertError as e:  # these sizes do not fit the model: the next ones
            last = e
            continue
        alone = [run({n: _row(plan, n, v, i) for n, v in batch.items()}) for i in range(rows)]
        return _compare(plan, together, alone, rtol, atol)
    raise GertError(f"check_rows: no sizes of the dims {dims} ran ({last})")


def _row(plan: ShapePlan, name: str, value: np.ndarray, i: int) -> np.ndarray:
    axis = plan.batch_axis(name)
    if axis is None:
        return value
    return np.ascontiguousarray(np.take(value, [i], axis=axis))


def _compare(plan: ShapePlan, together: dict, alone: list, rtol: float, atol: float) -> dict:
    verdict = {}
    for t in plan.outputs:
        axis = plan.batch_axis(t.name, output=True)
        if t.name in plan.unsplit:
            verdict[t.name] = "not proved"
            continue
        if axis is None:
            verdict[t.name] = "not batched"
            continue
        for i, one in enumerate(alone):
            got = np.take(together[t.name], [i], axis=axis)
            if got.shape != one[t.name].shape or not np.allclose(
                got, one[t.name], rtol=rtol, atol=atol, equal_nan=True
            ):
                raise GertError(
                    f"check_rows: output '{t.name}': row {i} of a batch of {len(alone)} differs from "
                    f"the row run alone, but the row proof says its rows are independent (batch axis "
                    f"{axis}); this is a bug in gert's row rules: please report it with the model"
                )
        verdict[t.name] = "independent"
    return verdict
