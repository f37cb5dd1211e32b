"""PP-OCR det from the installed rapidocr-onnxruntime wheel, served by gert (1/model.onnx is a symlink to it,
made at load: examples/ocr_pipeline.py link_model)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))))
from ocr_pipeline import gert_model  # (examples/ocr_pipeline.py)

TritonPythonModel = gert_model("det")
