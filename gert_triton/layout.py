"""Triton's batch axis <-> the model's: Triton puts a batching model's batch first ([B, ...dims]); a model whose batch
is elsewhere (a recurrent state [layers, batch, hidden], gert.load(batch_dim=...)) gets it moved to its own axis, and
its outputs get it moved back. Inputs without the batch axis (a 0-d sample rate) arrive as [1, ...] and lose it.
``squeeze``: inputs whose config says ``dims: [1]`` where the model's dims (batch axis left out) are [] (the
``reshape: { shape: [] }`` auto-complete cannot write, gert_triton.model_config.squeezed_inputs): the axis goes."""

from __future__ import annotations

from typing import AbstractSet, Optional

import numpy as np

from gert.core.shapes import ShapePlan


class Layout:
    def __init__(self, plan: ShapePlan, triton_batch: bool, squeeze: AbstractSet[str] = frozenset()):
        self.triton_batch = triton_batch  # max_batch_size > 0: Triton adds the batch axis at 0
        self.inputs = {t.name: plan.batch_axis(t.name) for t in plan.inputs}
        self.outputs = {t.name: plan.batch_axis(t.name, output=True) for t in plan.outputs}
        self.squeeze = frozenset(squeeze) if triton_batch else frozenset()
        # nothing to move: no Triton batch axis, or the model's batch is axis 0 of every tensor
        self.identity = not triton_batch or (
            not self.squeeze and all(a == 0 for a in list(self.inputs.values()) + list(self.outputs.values()))
        )

    def to_model(self, name: str, arr: np.ndarray) -> np.ndarray:
        if self.identity:
            return arr
        if name in self.squeeze and arr.ndim >= 2 and arr.shape[-1] == 1:
            arr = arr.reshape(arr.shape[:-1])
        axis = self.inputs.get(name)
        if axis is None:
            return arr[0]
        if not axis:
            return arr
        if arr.shape[0] == 1:  # one row (every sequence request): a reshape, cheaper than moveaxis
            return arr.reshape(arr.shape[1 : axis + 1] + (1,) + arr.shape[axis + 1 :])
        return np.moveaxis(arr, 0, axis)

    def to_triton(self, name: str, arr: np.ndarray) -> np.ndarray:
        if self.identity:
            return arr
        axis = self.outputs.get(name)
        if axis is None:
            return arr[None]
        if not axis:
            return arr
        if arr.shape[axis] == 1:
            return arr.reshape((1,) + arr.shape[:axis] + arr.shape[axis + 1 :])
        return np.moveaxis(arr, axis, 0)

    def model_axis(self, name: str, config_axis: int) -> Optional[int]:
        """The model axis of dim ``config_axis`` of a config input entry (whose dims leave Triton's batch out)."""
        if not self.triton_batch:
            return config_axis
        axis = self.inputs.get(name)
        if axis is None:
            return config_axis
        return config_axis if config_axis < axis else config_axis + 1
