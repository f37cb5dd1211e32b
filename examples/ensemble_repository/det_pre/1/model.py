"""The ensemble's det_pre step (examples/ocr_pipeline.py det_pre): what `gert repo init --pre/--post` writes, plus
the import path of examples/, where ocr_pipeline lives."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))))
from gert_triton.steps import TritonPythonModel  # noqa: F401  (parameter 'function' names the step)
