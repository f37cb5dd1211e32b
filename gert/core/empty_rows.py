"""A request with a dim of size 0, answered without a run.

No graph runs on an empty tensor: some kernels abort the whole process on one (ONNX Runtime's LSTM / GRU / RNN on 0
rows: "terminate called without an active exception"), others fail (a Conv on a 0-wide image), where bad input must
fail alone. A dim padded to a gear runs at a size of at least 1 and is sliced back. One that would run at size 0 is
answered from the plan when every output holds no element (an axis carries a dim of size 0) and has a shape known
from the plan's output axes and the model's fixed dims (gert/core/validate.py ``empty_shapes``): outputs of no
element are the same whatever a run would compute. Otherwise the request is refused alone, with an InputError
naming the input, the dim and the output that needs a run. The Validator refuses such a dim other than the batch
before anything runs; 0 rows of the batch get here (a padded batch runs at a gear instead).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from gert.core.shapes import ShapePlan
from gert.core.validate import empty_error, empty_shapes


def answer(plan: ShapePlan, req) -> Optional[dict]:
    """The outputs of request ``req`` when a dim of size 0 would run unpadded: empty arrays of the outputs' dtypes
    and shapes (the caller's ``out=`` array where it has that shape; outputs written to device buffers left out,
    as a run leaves them out of its results). None when no dim runs at size 0 (the request runs). InputError when
    an output needs a run."""
    empty = [d for d, v in req.sizes.items() if v == 0 and req.run_sizes.get(d, 0) <= 0]
    if not empty:
        return None
    shapes, why = empty_shapes(plan, req.sizes)
    if shapes is None:
        raise empty_error(plan, empty[0], req.arrays, why)
    results = {}
    for o in plan.outputs:
        if req.device_out and o.name in req.device_out:
            continue
        shape = shapes[o.name]
        dst = req.out.get(o.name) if req.out else None
        if isinstance(dst, np.ndarray) and dst.shape == shape and dst.dtype == o.dtype:
            results[o.name] = dst
        else:
            results[o.name] = np.empty(shape, o.dtype)
    return results
