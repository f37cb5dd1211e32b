# What the binding needs from the layers above it, given to it once by gert at import (gert/_binding.py calls
# register(); gert.hostnpu gives the host NPU its compute provider, set_host_provider in _provider.pxi): gert's
# exception types, DeviceTensor and GraphSummary, GE's dtype table, and the check Graph.from_onnx runs on a model
# before parsing it. The binding imports nothing from gert (tests/test_layout.py), as CuPy's runtime.pyx imports
# nothing from cupy: it holds what it is given, resolved once, so a call pays no import or lookup for it. Until then
# each one is a stand-in that raises NotRegistered naming it.


class NotRegistered(RuntimeError):
    """gert._cann was used before gert registered what it needs from the layers above it (gert does at import)."""


cdef object _missing(str name):
    return NotRegistered(f"gert._cann needs {name}, which gert registers into it at import (gert._cann.register, "
                         f"called by gert/_binding.py) and has not: import gert before using gert._cann")


cdef class _Unregistered:
    """Stands for a type or function gert registers: calling it raises NotRegistered naming it."""
    cdef readonly str name

    def __init__(self, str name):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise _missing(self.name)

    def __repr__(self):
        return f"<gert._cann: {self.name}, not registered>"


def _refuse(cls, *args, **kwargs):
    raise _missing(f"gert.errors.{cls.__name__}")


cdef object _unregistered_error(str name):
    """An exception type standing for gert's ``name`` (so that ``except`` clauses hold): raising it raises
    NotRegistered."""
    return type(name, (Exception,), {"__new__": staticmethod(_refuse), "__module__": "gert._cann"})


cdef object _AclError = _unregistered_error("AclError")
cdef object _GeError = _unregistered_error("GeError")
cdef object _GertError = _unregistered_error("GertError")
cdef object _HostFunctionError = _unregistered_error("HostFunctionError")
cdef object _DeviceTensor = _Unregistered("gert.core.tensor.DeviceTensor")
cdef object _GraphSummary = _Unregistered("gert.core.tensor.GraphSummary")
cdef object _numpy_dtype = _Unregistered("gert.dtypes.numpy_dtype")
cdef object _ge_dtype = _Unregistered("gert.dtypes.ge_dtype")
cdef object _check_parse = _Unregistered("the model check of Graph.from_onnx (gert/_binding.py)")


cdef object _exception_type(str name, value):
    if not (isinstance(value, type) and issubclass(value, BaseException)):
        raise TypeError(f"register: {name} must be an exception type, got {value!r}")
    return value


cdef object _callable(str name, value):
    if not callable(value):
        raise TypeError(f"register: {name} must be callable, got {value!r}")
    return value


def register(*, acl_error, ge_error, gert_error, host_function_error, device_tensor, graph_summary, numpy_dtype,
             ge_dtype, check_parse):
    """Give the binding what it needs from above, once at import (gert/_binding.py): the exception types it raises
    (``acl_error(code, message)``, ``ge_error(code, message)``, ``gert_error(message)``,
    ``host_function_error(errors)``), ``device_tensor(buffer, shape, dtype)`` for the outputs GE allocates,
    ``graph_summary(...)`` for Session.summary, GE's dtype table (``numpy_dtype(ge_type)``, ``ge_dtype(dtype)``),
    and ``check_parse(model)``, called by Graph.from_onnx before it parses (the policy of whether it checks anything
    is the caller's). Registering again replaces them."""
    global _AclError, _GeError, _GertError, _HostFunctionError, _DeviceTensor, _GraphSummary
    global _numpy_dtype, _ge_dtype, _check_parse
    given = (_exception_type("acl_error", acl_error), _exception_type("ge_error", ge_error),
             _exception_type("gert_error", gert_error), _exception_type("host_function_error", host_function_error),
             _callable("device_tensor", device_tensor), _callable("graph_summary", graph_summary),
             _callable("numpy_dtype", numpy_dtype), _callable("ge_dtype", ge_dtype),
             _callable("check_parse", check_parse))
    (_AclError, _GeError, _GertError, _HostFunctionError, _DeviceTensor, _GraphSummary, _numpy_dtype, _ge_dtype,
     _check_parse) = given


def registered() -> dict:
    """What the binding holds now (register's keywords; an unregistered one is a stand-in raising NotRegistered)."""
    return {"acl_error": _AclError, "ge_error": _GeError, "gert_error": _GertError,
            "host_function_error": _HostFunctionError, "device_tensor": _DeviceTensor,
            "graph_summary": _GraphSummary, "numpy_dtype": _numpy_dtype, "ge_dtype": _ge_dtype,
            "check_parse": _check_parse}
