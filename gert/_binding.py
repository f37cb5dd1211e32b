"""What the binding (gert._cann) needs from the layers above it, registered into it once at import (gert/__init__.py
calls register() right after loading it): the binding imports nothing from gert (tests/test_layout.py), so that it
stays a 1:1 layer over CANN's API, as CuPy's runtime.pyx is over CUDA's. Where the build has the host NPU, its
compute provider (ONNX Runtime's, gert/hostnpu/ort_provider.py) is given to it here too. Policy stays here, above the
binding: whether Graph.from_onnx checks a model's ops for CANN (GERT_CANN_OPS).
"""

from __future__ import annotations

import os

from gert import _cann, dtypes, errors, hostnpu
from gert.core.tensor import DeviceTensor, GraphSummary
from gert.preview import cann_ops


def check_parse(model: object) -> None:
    """Graph.from_onnx's check before GE's parser, for processes gert.load does not drive: GERT_CANN_OPS set (read at
    each parse: a process may set it at any time) applies its mode (cann_ops.resolve_mode); unset, nothing."""
    if os.environ.get(cann_ops.ENV):
        cann_ops.enforce_parse(model)


def register() -> None:
    """Give gert._cann gert's exception types, DeviceTensor / GraphSummary, GE's dtype table and the parse check
    (resolved once here: the binding's calls look nothing up), the host NPU its compute provider, and take the ACL
    error names of the headers the binding was built against into gert.errors."""
    errors.ACL_ERROR_NAMES.update(_cann.ACL_ERROR_NAMES)
    _cann.register(
        acl_error=errors.AclError,
        ge_error=errors.GeError,
        gert_error=errors.GertError,
        host_function_error=errors.HostFunctionError,
        device_tensor=DeviceTensor,
        graph_summary=GraphSummary,
        numpy_dtype=dtypes.numpy_dtype,
        ge_dtype=dtypes.ge_dtype,
        check_parse=check_parse,
    )
    if hostnpu.available():  # on a real CANN toolkit GE computes graphs itself (and ONNX Runtime is not imported)
        from gert.hostnpu.ort_provider import OrtGraphProvider

        hostnpu.set_host_provider(OrtGraphProvider())
