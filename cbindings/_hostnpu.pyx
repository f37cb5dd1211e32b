# cython: language_level=3, embedsignature=True
# distutils: language = c++
"""gert._hostnpu: the host NPU's own features (counters, spin time, the ONNX Runtime compute provider) for a gert
built against the host NPU packaged as a toolkit (cbindings/hostnpu/build_toolkit.py). It links the toolkit's
libraries and is built only when the toolkit is the host NPU; on real CANN it does not exist and gert works without
it. gert.hostnpu imports it and gives it the compute provider (set_host_provider), at ``import gert``."""

include "_host.pxi"
include "_provider.pxi"
