"""BLS: the whole PP-OCR pipeline in one Python model, det -> crops -> cls -> rec, the three models called on the
gert_triton models det, cls and rec with ``async_exec``. Every request of a batch runs at once (asyncio.gather),
so their model calls meet in those models' dynamic batchers and run as one batch.

Input ``image`` uint8 [1, H, W, 3] (BGR); outputs ``boxes`` [1, n, 4, 2], ``text`` [1, n] (UTF-8), ``scores``
[1, n]: what RapidOCR()(image) returns (examples/ocr_pipeline.py ocr). A bad image gets its own INVALID_ARG.
"""

import asyncio
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))))
import ocr_pipeline as op  # (examples/ocr_pipeline.py)

from gert_triton.error_codes import error_response
from gert_triton.tensors import as_array


class ModelCallError(Exception):
    """A model the pipeline called answered with an error."""


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in (config.get("parameters") or {}).items()}
        self.models = {step: params.get(f"{step}_model", step) for step in ("det", "cls", "rec")}
        op.steps()  # RapidOCR's pre/post objects, built once at load

    async def infer(self, step: str, x: np.ndarray) -> np.ndarray:
        """One BLS call of the model serving ``step`` on batch ``x``."""
        request = pb_utils.InferenceRequest(
            model_name=self.models[step], requested_output_names=[op.OUTPUTS[step]], inputs=[pb_utils.Tensor("x", x)]
        )
        response = await request.async_exec()
        if response.has_error():
            raise ModelCallError(f"model '{self.models[step]}': {response.error().message()}")
        return pb_utils.get_output_tensor_by_name(response, op.OUTPUTS[step]).as_numpy()

    async def execute(self, requests: list) -> list:
        # every image is prepared before the first det call, so that the det calls leave back to back and meet in
        # det's dynamic batcher (preparing between them would space them by a resize each)
        prepared = [self.prepare(r) for r in requests]
        return list(await asyncio.gather(*(self.answer(p) for p in prepared)))

    def prepare(self, request):
        """det's input for the request's image, or the request's INVALID_ARG response."""
        try:
            image = as_array(pb_utils.get_input_tensor_by_name(request, "image"))
            if image.ndim != 4 or image.shape[0] != 1:
                raise ValueError(
                    f"input 'image': expected one image per request, [1, H, W, 3], got {list(image.shape)}"
                )
            return op.prepare(image[0])
        except Exception as e:  # noqa: BLE001 - this request alone is bad
            return error_response(pb_utils, e, checking=True)

    async def answer(self, prepared):
        if not isinstance(prepared, tuple):
            return prepared  # the request's error
        try:
            found = await op.ocr_prepared(prepared, self.infer)
            text = np.array([t.encode("utf-8") for t in found.texts], dtype=np.object_).reshape(1, -1)
            return pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("boxes", found.boxes[np.newaxis]),
                    pb_utils.Tensor("text", text),
                    pb_utils.Tensor("scores", np.array(found.scores, np.float32).reshape(1, -1)),
                ]
            )
        except Exception as e:  # noqa: BLE001
            return error_response(pb_utils, e)
