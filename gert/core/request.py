"""A request after validation, as the Engine hands it to a stream (gert/core/pool.py -> recovery -> executor)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Request:
    """One request after validation: arrays by input name and the real size of each dynamic dim."""

    arrays: dict
    sizes: dict  # dim name -> real size
    run_sizes: dict  # dim name -> size the graph runs at (gear, or real)
    key: tuple = field(default=())
    out: Optional[dict] = None  # output name -> the caller's out= array, written by D2H directly when it fits
    timeout: Optional[float] = None  # seconds the request may take on its stream (None: no limit)
    # output name -> DeviceBuffer the output is written into on the device (no D2H; absent from the results).
    # Inputs given as a gert.DeviceTensor are bound as they are (no H2D): together, a recurrent state stays on the
    # device from one step to the next (gert.sequence)
    device_out: Optional[dict] = None
    device: Optional[int] = None  # run on a stream of this device (where the request's device tensors live)
    real_batch: Optional[int] = None  # rows that are real when the caller padded the batch itself (gear stats)
    # device-side work queued on the request's stream: before the run (D2D copies (dst, dmax, src, n) and zero fills
    # (ptr, dmax, n): a batch of sequences gathers its states), and after a successful run (D2D copies: scattered
    # back). On the stream, so ordered with the run without the calling thread needing the device's context.
    before: Optional[list] = None
    after: Optional[list] = None
