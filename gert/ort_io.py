"""The rest of onnxruntime.InferenceSession's run API over gert (gert.ort_session mixes it in): ``run_options``,
the feeds ONNX Runtime accepts beyond its dtype/rank/dims checks, ``io_binding`` / ``run_with_iobinding``,
``run_with_ort_values``, ``end_profiling`` and the fallback switches, each with ONNX Runtime's behaviour and
exception types (checked against onnxruntime 1.2x/1.3x):

- ``run_options``: an ``onnxruntime.RunOptions`` or None (anything else: TypeError, as pybind's signature check);
  ``terminate=True`` fails the run with ``Fail: ... Exiting due to terminate flag being set to true.`` (ONNX
  Runtime checks the flag before each kernel; gert checks it before the request is queued, as one graph is one
  kernel to gert). Its other fields only tune ONNX Runtime's logging and memory arenas.
- A Python or numpy scalar, or a string, as a feed value: RuntimeError, as ONNX Runtime's binding raises (a 0-d
  input takes a 0-d array). Lists are converted to the input's dtype, as ONNX Runtime converts them.
- A feed of None for an input: ONNX Runtime passes it as a missing input and the first kernel that reads it fails
  (``Fail: ... Missing Input: s``); gert fails the same way before running.
- A 0-d (scalar) input: ONNX Runtime does not check the shape of a scalar input at all, so a one-element array of
  any rank ((1,), (1, 1)) runs as the scalar; gert reshapes it to 0-d. More than one element cannot be a 0-d input
  of gert's compiled graph: InvalidArgument naming the input.
- IOBinding: CPU inputs (numpy, a host pointer, an OrtValue), outputs to gert-allocated arrays, to a preallocated
  host buffer or to an OrtValue; device names ONNX Runtime knows are accepted for outputs (gert returns them in host
  memory, as its ``run`` does); ``run_with_iobinding`` with another session's binding is a ValueError, and one with
  no output bound fails "At least one output should be requested." as ONNX Runtime does.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gert.core.error_kinds import ErrorKind, kind_of
from gert.errors import GertError
from gert.ort_providers import check_providers

_ORT_STATUS = re.compile(r"\[ONNXRuntimeError\] : (\d+) : ([A-Z_]+) : ")
# ONNX Runtime's status names -> its Python exception classes (onnxruntime_pybind11_state)
_STATUS_CLASSES = {
    "FAIL": "Fail",
    "INVALID_ARGUMENT": "InvalidArgument",
    "NO_SUCHFILE": "NoSuchFile",
    "NO_MODEL": "NoModel",
    "ENGINE_ERROR": "EngineError",
    "RUNTIME_EXCEPTION": "RuntimeException",
    "INVALID_PROTOBUF": "InvalidProtobuf",
    "MODEL_LOADED": "ModelLoaded",
    "NOT_IMPLEMENTED": "NotImplemented",
    "INVALID_GRAPH": "InvalidGraph",
    "EP_FAIL": "EPFail",
}
_TERMINATED = "Exiting due to terminate flag being set to true."
_DEVICES = ("cpu", "cuda", "cann", "npu", "dml", "gpu", "webgpu")  # OrtDevice.make names gert accepts for outputs


_classes: dict = {}  # ONNX Runtime's exception class name -> gert's subclass of it (ort_class)


def _state():
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    return state


class Fail(GertError, _state().Fail):
    """ONNX Runtime's Fail (a run that failed: terminate flag, missing input), from gert."""


_classes["Fail"] = Fail


class ScalarInputShape(GertError, _state().InvalidArgument):
    """A 0-d input fed more than one element (ONNX Runtime's InvalidArgument class)."""


class UnhandledFeed(GertError, RuntimeError):
    """A feed value ONNX Runtime's binding cannot convert (a Python or numpy scalar, a string): its RuntimeError."""


def ort_class(name: str) -> type:
    """gert's subclass of ONNX Runtime's exception class ``name`` (and of GertError), made once."""
    cls = _classes.get(name)
    if cls is None:
        base = getattr(_state(), name, None) or _state().Fail
        cls = _classes[name] = type(
            name, (GertError, base), {"__doc__": f"ONNX Runtime's {name}, from gert.", "__module__": __name__}
        )
    return cls


def ort_run_error(e: BaseException) -> BaseException | None:
    """ONNX Runtime's exception for gert's error ``e`` raised while running (None: ``e`` already is one, or is no
    gert error). A failure the host NPU's ONNX Runtime reported keeps its status (INVALID_ARGUMENT, FAIL, ...),
    class and message; a device or runtime failure without one is ONNX Runtime's Fail. The gert error is the
    translation's ``gert_error`` (and its cause)."""
    if kind_of(e) is ErrorKind.INTERNAL or isinstance(e, _ort_bases()):
        return None
    message = str(e)
    m = _ORT_STATUS.search(message)
    if m is not None:
        told = ort_class(_STATUS_CLASSES.get(m.group(2), "Fail"))(message[m.start() :])
    else:
        told = ort_class("Fail")(f"[ONNXRuntimeError] : 1 : FAIL : {message}")
    told.gert_error = e
    return told


def _ort_bases() -> tuple:
    state = _state()
    return tuple(getattr(state, n) for n in set(_STATUS_CLASSES.values()) if hasattr(state, n)) + (
        RuntimeError,
        ValueError,
    )


class ScalarFeedShapes:
    """ONNX Runtime's output shapes for a feed that gives a 0-d input a one-element array of rank > 0: ONNX Runtime
    computes with the array as given (a (1,) scalar broadcasts to (1,) outputs), gert's compiled graph with the 0-d
    value. The shapes ONNX Runtime would give come from shape inference at the fed shapes (once per feed
    signature); an output is reshaped to them when they are known and hold its elements, else kept."""

    def __init__(self, load_model) -> None:
        self._load = load_model  # () -> the model (bytes or a ModelProto), read when first needed
        self._proto = None
        self._known: dict = {}  # feed signature -> {output name: shape}

    def apply(self, input_feed: Mapping[str, Any], result: Mapping[str, np.ndarray]) -> dict:
        key = tuple((n, np.shape(v)) for n, v in input_feed.items())
        shapes = self._known.get(key)
        if shapes is None:
            shapes = self._known[key] = self._infer(dict(key))
            if len(self._known) > 64:
                self._known.clear()
        out = dict(result)
        for name, shape in shapes.items():
            a = out.get(name)
            if a is not None and a.shape != shape and a.size == int(np.prod(shape, dtype=np.int64)):
                out[name] = a.reshape(shape)
        return out

    def _infer(self, fed: dict) -> dict:
        from gert.core import shape_infer
        from gert.core.skeleton import skeleton

        if self._proto is None:
            self._proto = skeleton(self._load())
        try:
            done = shape_infer.infer(self._proto, fed)
        except Exception:  # noqa: BLE001 - no inference: the outputs keep gert's shapes
            return {}
        return {
            o.name: tuple(dims)
            for o, dims in zip(self._proto.graph.output, done.output_dims)
            if dims is not None and all(type(d) is int for d in dims)
        }


def check_run_options(run_options) -> None:
    """TypeError unless None or an onnxruntime.RunOptions; Fail when its terminate flag is set."""
    if run_options is None:
        return
    if not isinstance(run_options, _state().RunOptions):
        raise TypeError(
            f"run(): incompatible function arguments: run_options must be an onnxruntime.RunOptions "
            f"or None, got {type(run_options).__name__}"
        )
    if run_options.terminate:
        raise Fail(f"[ONNXRuntimeError] : 1 : FAIL : {_TERMINATED}")


def from_ortvalues(input_feed: Any) -> Any:
    """The feed with onnxruntime.OrtValue values as host arrays (ONNX Runtime's run takes them as feeds too)."""
    if not isinstance(input_feed, Mapping) or all(type(v) is np.ndarray for v in input_feed.values()):
        return input_feed
    OrtValue = _ortvalue_class()
    if not any(isinstance(v, OrtValue) for v in input_feed.values()):
        return input_feed
    return {n: v.numpy() if isinstance(v, OrtValue) else v for n, v in input_feed.items()}


def ort_feed(input_feed: Any, scalar_inputs: frozenset) -> Any:
    """The feed with ONNX Runtime's acceptance rules applied before gert's checks: None is a missing input (Fail);
    a one-element array for a 0-d input is that scalar."""
    if not isinstance(input_feed, Mapping):
        return input_feed
    for name, value in input_feed.items():  # conversion errors first: ONNX Runtime converts before it runs
        if isinstance(value, (str, bytes)):
            raise UnhandledFeed(f"Input must be a list of dictionaries or a single numpy array for input '{name}'.")
        if isinstance(value, (int, float, complex, np.generic)):  # bool is an int
            raise UnhandledFeed(
                f"Unable to handle object of type {type(value)} (input '{name}': ONNX Runtime takes "
                f"a numpy array, e.g. np.array({value!r}, np.float32) for a 0-d input)"
            )
    feed = None
    for name, value in input_feed.items():
        if value is None:
            raise Fail(
                f"[ONNXRuntimeError] : 1 : FAIL : Missing Input: {name} (the feed gives None for input "
                f"'{name}'; ONNX Runtime fails the first node that reads it)"
            )
        if name in scalar_inputs and isinstance(value, np.ndarray) and value.ndim > 0:
            if value.size != 1:
                raise ScalarInputShape(
                    f"[gert] : INVALID_ARGUMENT : input '{name}' is 0-d (a scalar) in the model; "
                    f"got shape {value.shape} with {value.size} elements: gert's compiled graph "
                    "takes one value"
                )
            feed = dict(input_feed) if feed is None else feed
            feed[name] = value.reshape(())
    return input_feed if feed is None else feed


# ---- OrtValues ------------------------------------------------------------------------------------------------


def _ortvalue_class():
    from onnxruntime import OrtValue

    return OrtValue


def from_ortvalue(name: str, value) -> np.ndarray:
    """The host array of an onnxruntime.OrtValue input (gert computes from host memory)."""
    if not isinstance(value, _ortvalue_class()):
        raise TypeError(
            f"input '{name}': run_with_ort_values takes onnxruntime.OrtValue values, got {type(value).__name__}"
        )
    return value.numpy()


def to_ortvalue(array: np.ndarray):
    return _ortvalue_class().ortvalue_from_numpy(np.ascontiguousarray(array))


# ---- IOBinding ------------------------------------------------------------------------------------------------


class IOBinding:
    """onnxruntime.IOBinding over a gert session: inputs bound from host memory, outputs to gert-allocated arrays, a
    preallocated host buffer or an OrtValue. ``get_outputs`` / ``copy_outputs_to_cpu`` give the last run's outputs
    in the order they were bound."""

    def __init__(self, session) -> None:
        self._session = session
        self._inputs: dict = {}
        self._outputs: dict = {}  # name -> None (gert allocates), (array view over a host buffer), or OrtValue
        self._results: list = []

    # inputs
    def bind_cpu_input(self, name: str, arr_on_cpu) -> None:
        self._check_input(name)
        self._inputs[name] = arr_on_cpu

    def bind_input(self, name: str, device_type: str, device_id: int, element_type, shape, buffer_ptr) -> None:
        """A host buffer (device_type 'cpu') read at run time; gert takes no device pointer from another runtime."""
        self._check_input(name)
        if str(device_type).lower() != "cpu":
            raise GertError(
                f"bind_input('{name}'): gert binds host memory ('cpu'); a {device_type} pointer belongs "
                "to another runtime's allocator. Bind the host array with bind_cpu_input"
            )
        self._inputs[name] = _host_array(element_type, shape, buffer_ptr)

    def bind_ortvalue_input(self, name: str, ortvalue) -> None:
        self._check_input(name)
        self._inputs[name] = from_ortvalue(name, ortvalue)

    def synchronize_inputs(self) -> None:
        """Host memory needs no synchronization."""

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    # outputs
    def bind_output(
        self, name: str, device_type: str = "cpu", device_id: int = 0, element_type=None, shape=None, buffer_ptr=None
    ) -> None:
        if str(device_type).lower() not in _DEVICES:
            raise Exception(f"Unsupported device type: {device_type}")  # noqa: TRY002 - ONNX Runtime's own class
        if buffer_ptr is None:
            self._outputs[name] = None
            return
        if element_type is None or shape is None:
            raise ValueError("`element_type` and `shape` are to be provided if pre-allocated memory is provided")
        if str(device_type).lower() != "cpu":
            raise GertError(
                f"bind_output('{name}'): gert writes outputs to host memory ('cpu'); a {device_type} "
                "pointer belongs to another runtime's allocator"
            )
        self._outputs[name] = _host_array(element_type, shape, buffer_ptr)

    def bind_ortvalue_output(self, name: str, ortvalue) -> None:
        if not isinstance(ortvalue, _ortvalue_class()):
            raise TypeError(
                f"bind_ortvalue_output('{name}'): expected an onnxruntime.OrtValue, got {type(ortvalue).__name__}"
            )
        self._outputs[name] = ortvalue

    def synchronize_outputs(self) -> None:
        """Outputs are in host memory when run_with_iobinding returns."""

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def get_outputs(self) -> list:
        """The last run's outputs as OrtValues (in host memory), in the order they were bound."""
        return [r if isinstance(r, _ortvalue_class()) else to_ortvalue(r) for r in self._results]

    def copy_outputs_to_cpu(self) -> list:
        """The last run's outputs as numpy arrays, in the order they were bound."""
        return [r.numpy() if isinstance(r, _ortvalue_class()) else np.array(r) for r in self._results]

    def _check_input(self, name: str) -> None:
        if name not in [a.name for a in self._session.get_inputs()]:
            raise RuntimeError(f"Failed to find NodeArg with name: {name} in the def list")

    def _run(self, run_options) -> None:
        """run_with_iobinding: ONNX Runtime's messages, as it raises them there (RuntimeError "Error in execution")."""
        if not self._outputs:
            raise RuntimeError("Error in execution: At least one output should be requested.")
        try:
            check_run_options(run_options)
            values = self._session.run(list(self._outputs), dict(self._inputs))
        except (Fail, GertError) as e:
            raise _execution_error(e) from e
        results = []
        for (name, target), value in zip(self._outputs.items(), values):
            if target is None:
                results.append(value)
            elif isinstance(target, np.ndarray):
                if target.shape != value.shape or target.dtype != value.dtype:
                    raise RuntimeError(
                        f"Error in execution: output '{name}' is {value.dtype} of shape {value.shape}; "
                        f"the bound buffer holds {target.dtype} of shape {target.shape}"
                    )
                np.copyto(target, value)
                results.append(target)
            else:
                if tuple(target.shape()) != value.shape or target.numpy().dtype != value.dtype:
                    raise RuntimeError(
                        f"Error in execution: output '{name}' is {value.dtype} of shape {value.shape}; "
                        f"the bound OrtValue holds {target.data_type()} of shape {target.shape()}"
                    )
                target.update_inplace(np.ascontiguousarray(value))
                results.append(target)
        self._results = results


def _execution_error(e: BaseException) -> RuntimeError:
    """run_with_iobinding's error: ONNX Runtime's status message without its status prefix."""
    message = str(e)
    m = _ORT_STATUS.match(message)
    if m is not None:
        message = message[m.end() :]
    return RuntimeError(f"Error in execution: {message}")


def _host_array(element_type, shape, buffer_ptr) -> np.ndarray:
    """A numpy view over host memory at ``buffer_ptr`` (numpy dtype or ONNX element type number)."""
    if isinstance(element_type, int) and not isinstance(element_type, bool):
        from onnx import helper

        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(element_type))
    else:
        dtype = np.dtype(element_type)
    shape = tuple(int(d) for d in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = (ctypes.c_char * max(nbytes, 1)).from_address(int(buffer_ptr))
    return np.frombuffer(raw, dtype=dtype, count=nbytes // dtype.itemsize).reshape(shape)


# ---- profiling ------------------------------------------------------------------------------------------------


class Profiler:
    """SessionOptions.enable_profiling: one Chrome-trace event per run, written by end_profiling() to
    ``{profile_file_prefix}_{date}.json`` (ONNX Runtime's file name and format; its events are per kernel, gert's
    per graph run). Without profiling end_profiling() returns '' as ONNX Runtime does."""

    def __init__(self, sess_options) -> None:
        self.enabled = bool(getattr(sess_options, "enable_profiling", False))
        self.prefix = str(
            getattr(sess_options, "profile_file_prefix", "onnxruntime_profile_") or "onnxruntime_profile_"
        )
        self.start_ns = time.monotonic_ns() if self.enabled else 0
        self._events: list = []
        self._lock = threading.Lock()

    def record(self, name: str, t0_ns: int, t1_ns: int) -> None:
        with self._lock:
            self._events.append(
                {
                    "cat": "Session",
                    "pid": os.getpid(),
                    "tid": threading.get_native_id(),
                    "dur": (t1_ns - t0_ns) // 1000,
                    "ts": (t0_ns - self.start_ns) // 1000,
                    "ph": "X",
                    "name": name,
                    "args": {},
                }
            )

    def end(self) -> str:
        if not self.enabled:
            return ""
        path = f"{self.prefix}_{time.strftime('%Y-%m-%d_%H-%M-%S')}.json"
        with self._lock:
            events, self._events = self._events, []
            self.enabled = False  # as ONNX Runtime: profiling stops at end_profiling()
        with open(path, "w") as f:
            json.dump(events, f)
        return path


class SessionRunVariants:
    """Mixed into gert.InferenceSession: the run variants and switches ONNX Runtime's session has beyond run()."""

    def io_binding(self) -> IOBinding:
        """An onnxruntime.IOBinding-like binding for run_with_iobinding (ONNX Runtime's own on its CPU provider)."""
        if self._cpu is not None:
            return self._cpu.io_binding()
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options=None) -> None:
        if self._cpu is not None:
            return self._cpu.run_with_iobinding(iobinding, run_options)
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise ValueError("IOBinding must be used with the session that created it.")
        iobinding._run(run_options)

    def run_with_ort_values(
        self, output_names: Sequence[str] | None, input_dict_ort_values: Mapping[str, Any], run_options=None
    ) -> list:
        """run() with onnxruntime.OrtValue inputs; the outputs as OrtValues (in host memory)."""
        if self._cpu is not None:
            return self._cpu.run_with_ort_values(output_names, input_dict_ort_values, run_options)
        names = [a.name for a in self.get_inputs()]
        missing = [n for n in names if n not in input_dict_ort_values]
        if missing:
            raise ValueError(
                f"Required inputs ({missing}) are missing from input feed ({list(input_dict_ort_values)})."
            )
        feed = {n: from_ortvalue(n, v) for n, v in input_dict_ort_values.items()}
        return [to_ortvalue(a) for a in self.run(output_names, feed, run_options)]

    def set_providers(self, providers: Sequence | None = None, provider_options: Sequence[dict] | None = None) -> None:
        """Load the model again with these providers' options, as ONNX Runtime re-creates its session; the old
        gert.Model is closed once the new one is ready (a failed load leaves the session as it was)."""
        check_providers(providers)  # an unknown name: ONNX Runtime's RuntimeError, the session as it was
        reported, load = self._load_arguments(providers, provider_options)
        old_load, self._load_options = self._load_options, load
        old = (self._model, self._cpu, self._providers, self._edges_session)
        self._cpu = self._edges_session = None
        try:
            self._providers = reported
            model = self._load_or_fall_back(providers)
        except BaseException:
            self._load_options = old_load
            self._model, self._cpu, self._providers, self._edges_session = old
            raise
        self._model = model
        for held in (old[0], old[3]):
            if held is not None and held is not self._model and held is not self._edges_session:
                held.close()

    def end_profiling(self) -> str:
        """The profile file written (SessionOptions.enable_profiling), else ''."""
        if self._cpu is not None:
            return self._cpu.end_profiling()
        return self._profiler.end()

    def get_profiling_start_time_ns(self) -> int:
        return self._profiler.start_ns

    def disable_fallback(self) -> None:
        """gert has no fallback provider to switch to: accepted, as ONNX Runtime accepts it."""

    def enable_fallback(self) -> None:
        """gert has no fallback provider to switch to: accepted, as ONNX Runtime accepts it."""
