"""The binding (gert._cann) imports nothing from gert (issue 39 step 4; tests/test_layout.py reads its sources): what
it needs from above (gert's exception types, DeviceTensor / GraphSummary, the dtype table, Graph.from_onnx's op
check, the host NPU's compute provider) is registered into it once at import by gert/_binding.py. Loaded alone, the
binding imports no gert module and each use of something missing raises NotRegistered naming it."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import gert
from gert import _binding, _cann, dtypes, errors, hostnpu
from gert.core.tensor import DeviceTensor, GraphSummary

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_gert_registers_what_the_binding_needs_at_import():
    assert _cann.registered() == {
        "acl_error": errors.AclError,
        "ge_error": errors.GeError,
        "gert_error": errors.GertError,
        "host_function_error": errors.HostFunctionError,
        "device_tensor": DeviceTensor,
        "graph_summary": GraphSummary,
        "numpy_dtype": dtypes.numpy_dtype,
        "ge_dtype": dtypes.ge_dtype,
        "check_parse": _binding.check_parse,
    }
    assert errors.ACL_ERROR_NAMES and errors.ACL_ERROR_NAMES == _cann.ACL_ERROR_NAMES


def test_the_binding_raises_gerts_own_errors_with_the_headers_names():
    with pytest.raises(gert.AclError) as e:
        gert.DeviceBuffer(64, 99)
    assert e.value.name == "ACL_ERROR_RT_INVALID_DEVICEID"


@pytest.mark.hostnpu_only
def test_the_host_npu_computes_with_the_provider_gert_gave_it():
    assert type(hostnpu.host_provider()).__name__ == "OrtGraphProvider"


def test_register_names_a_wrong_argument():
    given = dict(_cann.registered())
    with pytest.raises(TypeError, match="register: acl_error must be an exception type, got 42"):
        _cann.register(**{**given, "acl_error": 42})
    with pytest.raises(TypeError, match="register: check_parse must be callable, got 'off'"):
        _cann.register(**{**given, "check_parse": "off"})
    assert _cann.registered() == given  # a refused registration changes nothing


# The binding loaded by itself, as nothing in gert does: gert/__init__.py is not run, so nothing is registered.
_ALONE = """
import glob, importlib.util, json, sys
import onnx
from onnx import TensorProto, helper as oh

spec = importlib.util.spec_from_file_location("gert._cann", glob.glob("gert/_cann.*.so")[0])
cann = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cann)
x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2])
y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [2])
model = oh.make_model(oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                      opset_imports=[oh.make_opsetid("", 17)]).SerializeToString()
out = {"gert_modules": sorted(m for m in sys.modules if m.split(".")[0] == "gert" and m != "gert._cann"),
       "provider": repr(cann.host_provider()) if cann.backend() == "hostnpu" else "None"}

def attempt(name, call):
    try:
        call()
        out[name] = None
    except Exception as e:
        out[name] = [type(e).__name__, str(e)]

attempt("device", lambda: cann.DeviceBuffer(64, 99))
attempt("parse", lambda: cann.Graph.from_onnx(model))

class AclError(Exception):
    pass

class GeError(Exception):
    pass

cann.register(acl_error=AclError, ge_error=GeError, gert_error=Exception, host_function_error=Exception,
              device_tensor=tuple, graph_summary=dict, numpy_dtype=str, ge_dtype=int, check_parse=lambda m: None)
attempt("device_registered", lambda: cann.DeviceBuffer(64, 99))

def compile_graph():
    s = cann.Session()
    s.add_graph(1, cann.Graph.from_onnx(model))
    s.compile_graph(1)

if cann.backend() == "hostnpu":
    attempt("compile_without_provider", compile_graph)
print("RESULT " + json.dumps(out))
"""


def _alone() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GERT_")}
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_ALONE)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    return json.loads(next(line for line in p.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT ") :])


def test_the_binding_alone_imports_no_gert_module_and_names_what_is_missing():
    out = _alone()
    assert out["gert_modules"] == []  # loading it imported nothing from gert (but itself)
    assert out["provider"] == "None"  # the host NPU's provider is given by gert, not taken by the binding
    name, message = out["device"]
    assert name == "NotRegistered" and "gert._cann needs gert.errors.AclError" in message
    assert "import gert before using gert._cann" in message
    name, message = out["parse"]
    assert name == "NotRegistered" and "the model check of Graph.from_onnx" in message
    # registered, the binding raises what it was given; the host NPU without a provider says so
    assert out["device_registered"][0] == "AclError"
    if "compile_without_provider" in out:
        name, message = out["compile_without_provider"]
        assert name == "GeError" and "no compute provider is registered with the host NPU" in message
