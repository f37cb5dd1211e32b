"""The core limits of a stream whose device's cores its model's streams share by load.

Why: with several streams per device and no core limits given, fixed limits would either leave a lone request on a
part of the cores or let every stream claim all of them (on an NPU: kernels of all streams contending for every
core). CANN applies a stream's limit to the tasks launched after it is set (``aclrtSetStreamResLimit``; GE's rt2
executor sets it on every ExecuteGraphWithStreamAsync), so each launch sets it: the device's cores over the model's
streams in use on it then, this one included. A lone request runs with every core, two at once with half each.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple


class CoreShare:
    """One stream's share: ``busy()`` counts its device's streams in use now (the pool's queue, read per launch)."""

    def __init__(self, busy: Callable[[], int]):
        self.busy = busy
        self._set_for: tuple = (None, 0)  # (the stream, the streams in use) its limits were last set for

    def apply(self, stream, device_cores: Tuple[int, int]) -> Optional[Tuple[int, int]]:
        """Set ``stream``'s limits for the streams in use now, where they changed since its last launch: the new
        (cube, vector) limits, or None when nothing changed (no runtime call: one per change of the load)."""
        n = max(1, self.busy())
        if self._set_for == (stream, n):
            return None
        cube, vector = device_cores
        stream.cube_cores = max(1, cube // n)
        if vector:
            stream.vector_cores = max(1, vector // n)
        self._set_for = (stream, n)
        return stream.cube_cores, stream.vector_cores
