"""gert's runtime core: the request pipeline shared by every front door (docs/architecture.md).

- ``onnx_io``: the one ONNX I/O reader (inputs, outputs, value-dependent outputs, the output batch axes by shape
  inference);
- ``validate``: the one input validator;
- ``batching``: the one batcher (batch key, merge, split, the output batch axis);
- ``engine``: the pipeline validate -> resolve -> batch -> dispatch -> run under recovery -> split.
"""

__version__ = "0.1.0"  # gert's version (gert.__version__); part of every compile cache key
