"""gert_triton: serve ONNX models on gert through Triton Inference Server's Python backend.

model.py is one line: ``from gert_triton import TritonPythonModel``; config.pbtxt parameters drive the rest.
"""

from gert_triton.model import TritonPythonModel

__all__ = ["TritonPythonModel"]
