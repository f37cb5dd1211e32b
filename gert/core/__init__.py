"""gert's runtime core: the request pipeline shared by every front door (docs/architecture.md).

- ``onnx_io``: the one ONNX I/O reader (inputs, outputs, value-dependent outputs, the output batch axes by shape
  inference);
- ``validate``: the one input validator;
- ``batching``: the one batcher (batch key, merge, split, the output batch axis);
- ``engine``: the pipeline validate -> resolve -> batch -> dispatch -> run under recovery -> split.
"""

__version__ = "0.2.0"  # gert.__version__ (= pyproject.toml's, CHANGELOG.md); part of every compile cache key
