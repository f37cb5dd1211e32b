# cython: language_level=3, embedsignature=True
# distutils: language = c++
"""gert._cann: thin Cython bindings over the CANN ACL runtime (or the host NPU that implements it).

Contract (as CuPy's cupy_backends/cuda/api/runtime.pyx): one Python function per C call, errors become
``AclError`` carrying the code and the runtime's own message, values are returned instead of out-params,
blocking calls release the GIL, callbacks go through a ``with gil`` trampoline that keeps its objects alive.
The object layer (Device, Stream, Event, DeviceBuffer, HostBuffer) owns every handle it creates.

This file is the module built against a CANN toolkit: only CANN's API. With the host NPU built in, setup.py
compiles _cann_hostnpu.pyx instead, which adds the host NPU's own features (_host.pxi, _provider.pxi).
"""

include "_registry.pxi"
include "_errors.pxi"
include "_build.pxi"
include "_runtime.pxi"
include "_device.pxi"
include "_stream.pxi"
include "_event.pxi"
include "_memory.pxi"
include "_ge.pxi"
include "_fused.pxi"
include "_onnx.pxi"
