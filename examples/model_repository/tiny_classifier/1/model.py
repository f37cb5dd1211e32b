from gert_triton import TritonPythonModel  # noqa: F401  (config.pbtxt parameters drive the rest)
