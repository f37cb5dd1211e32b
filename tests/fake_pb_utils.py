"""A minimal fake of Triton's ``triton_python_backend_utils`` (pb_utils), for unit tests of gert_triton outside Triton.

The real module exists only inside the Python backend stub (the C++ classes are attached to it at start-up), so
the unit tests put this module into ``sys.modules["triton_python_backend_utils"]`` (see ``install``). It follows
shared/docs/triton-python-backend.md and the pure-Python part of the real file (pytriton 0.7.0 / Triton 2.51):

- ``Tensor(name, array)``: keeps the array (a C-contiguous copy if it is not contiguous), ``name()``, ``as_numpy()``,
  ``shape()``, ``triton_dtype()``, ``is_cpu()``; dtypes Triton has no type for (e.g. bfloat16) are refused.
- ``InferenceRequest(inputs, requested_output_names, ...)``: the shape of what ``execute`` receives (the test-side
  constructor differs from the BLS one); ``is_cancelled()`` counts its calls.
- ``InferenceResponse``, ``TritonError`` (codes as the stub has them), ``TritonModelException``.
- ``ModelConfig``: the real class's rules (``set_max_batch_size`` refuses to shrink, ``add_input`` only takes name /
  data_type / dims / optional and raises on a dtype or dims conflict, ``set_dynamic_batching`` refuses other
  schedulers).
- ``MetricFamily`` / ``Metric``: counters refuse ``set`` and negative increments (as Triton's core does); every call
  is recorded in ``Metric.calls``; ``FAMILIES`` lists the families created since ``reset()``.
- ``get_model_dir()``: the directory set with ``set_model_dir``.
"""

from __future__ import annotations

import json
import sys

import numpy as np

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_GPU = 2

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
_NUMPY_TO_PROTOCOL = {np.dtype(v): k[len("TYPE_") :] for k, v in TRITON_STRING_TO_NUMPY.items() if v is not np.object_}


def triton_string_to_numpy(triton_type_string: str):
    return TRITON_STRING_TO_NUMPY[triton_type_string]


class TritonModelException(Exception):
    """What the stub raises (and what models raise from initialize / execute / finalize)."""


class TritonError:
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = 1):
        if not isinstance(message, str):
            raise TypeError(f"TritonError message must be a str, got {type(message).__name__}")
        self._message = message
        self._code = code

    def code(self) -> int:
        return self._code

    def message(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class Tensor:
    def __init__(self, name: str, array):
        if not isinstance(name, str):
            raise TypeError("Tensor name must be a str")
        if not isinstance(array, np.ndarray):
            raise TritonModelException(f"Tensor '{name}': expected a numpy array, got {type(array).__name__}")
        if array.dtype != np.object_ and array.dtype not in _NUMPY_TO_PROTOCOL:
            raise TritonModelException(f"Tensor '{name}': numpy dtype {array.dtype} has no Triton type")
        self._name = name
        self._array = array if array.flags.c_contiguous else np.ascontiguousarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list:
        return list(self._array.shape)

    def triton_dtype(self) -> str:
        return "BYTES" if self._array.dtype == np.object_ else _NUMPY_TO_PROTOCOL[self._array.dtype]

    def is_cpu(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._array.dtype}{list(self._array.shape)})"


class InferenceRequest:
    """What execute() receives. ``requested_output_names``: the client's outputs (core fills in every output
    when the client named none, so tests pass the model's outputs for that case)."""

    def __init__(
        self,
        inputs,
        requested_output_names,
        request_id: str = "",
        cancelled: bool = False,
        parameters: dict | None = None,
        correlation_id=0,
        flags: int = 0,
    ):
        self._correlation_id = correlation_id
        self._flags = flags
        self._inputs = list(inputs)
        self._outputs = set(requested_output_names)
        self._id = request_id
        self._cancelled = cancelled
        self._parameters = json.dumps(parameters or {})
        self.cancel_checks = 0

    def inputs(self) -> list:
        return list(self._inputs)

    def requested_output_names(self) -> set:
        return set(self._outputs)

    def request_id(self) -> str:
        return self._id

    def parameters(self) -> str:
        return self._parameters

    def flags(self) -> int:
        return self._flags

    def correlation_id(self):
        return self._correlation_id

    def is_cancelled(self) -> bool:
        self.cancel_checks += 1
        return self._cancelled


class InferenceResponse:
    def __init__(self, output_tensors=None, error: TritonError | None = None, parameters: dict | None = None):
        tensors = list(output_tensors or [])
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(f"output_tensors must be pb_utils.Tensor objects, got {type(t).__name__}")
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(f"error must be a pb_utils.TritonError, got {type(error).__name__}")
        self._tensors = tensors
        self._error = error
        self._parameters = json.dumps(parameters or {})

    def output_tensors(self) -> list:
        return list(self._tensors)

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


def get_input_tensor_by_name(inference_request, name: str):
    for t in inference_request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(inference_response, name: str):
    for t in inference_response.output_tensors():
        if t.name() == name:
            return t
    return None


def get_input_config_by_name(model_config: dict, name: str):
    for i in model_config.get("input", []):
        if i["name"] == name:
            return i
    return None


def get_output_config_by_name(model_config: dict, name: str):
    for o in model_config.get("output", []):
        if o["name"] == name:
            return o
    return None


# ---- auto-complete ------------------------------------------------------------------------------------------------


def default_config(name: str = "model", **fields) -> dict:
    """The config JSON the stub hands auto_complete_config for a config.pbtxt with ``fields`` (repeated and
    primitive fields are always present; message fields such as dynamic_batching only when set)."""
    cfg = {
        "name": name,
        "platform": "",
        "backend": "python",
        "max_batch_size": 0,
        "input": [],
        "output": [],
        "batch_input": [],
        "batch_output": [],
        "instance_group": [],
        "default_model_filename": "",
        "parameters": {},
        "model_warmup": [],
    }
    cfg.update(json.loads(json.dumps(fields)))
    return cfg


class ModelConfig:
    """The real class's rules, on the config dict (only max_batch_size, inputs, outputs and the scheduler change)."""

    def __init__(self, model_config):
        self._model_config = (
            json.loads(model_config) if isinstance(model_config, str) else json.loads(json.dumps(model_config))
        )

    def as_dict(self) -> dict:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        if self._model_config["max_batch_size"] > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {self._model_config['max_batch_size']}, but "
                f"in auto-complete-config function for model '{self._model_config['name']}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but auto-complete-config "
                    f"function for model '{self._model_config['name']}' tries to set scheduling_choice "
                    "as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def _add(self, kind: str, entry: dict, valid: tuple) -> None:
        for prop in entry:
            if prop not in valid:
                raise ValueError(
                    f"{kind} '{entry.get('name')}' in auto-complete-config function for model "
                    f"'{self._model_config['name']}' contains property other than {valid}."
                )
        for prop in ("name", "data_type", "dims"):
            if prop not in entry:
                raise ValueError(
                    f"{kind} '{entry.get('name')}' in auto-complete-config function for model "
                    f"'{self._model_config['name']}' is missing '{prop}' property."
                )
        for current in self._model_config[kind]:
            if current["name"] != entry["name"]:
                continue
            if (
                current.get("data_type", "TYPE_INVALID") != "TYPE_INVALID"
                and current["data_type"] != entry["data_type"]
            ):
                raise ValueError(
                    f"unable to load model '{self._model_config['name']}', configuration expects "
                    f"datatype {current['data_type']} for {kind} '{entry['name']}', model provides "
                    f"{entry['data_type']}"
                )
            if current.get("dims") and list(current["dims"]) != list(entry["dims"]):
                raise ValueError(
                    f"model '{self._model_config['name']}', tensor '{entry['name']}': the model expects "
                    f"dims {entry['dims']} but the model configuration specifies dims {current['dims']}"
                )
            current["data_type"] = entry["data_type"]
            current["dims"] = list(entry["dims"])
            if "optional" in entry:
                current["optional"] = entry["optional"]
            return
        self._model_config[kind].append(json.loads(json.dumps(entry)))

    def add_input(self, input: dict) -> None:  # noqa: A002 - the real signature
        self._add("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict) -> None:
        self._add("output", output, ("name", "data_type", "dims"))

    def set_model_transaction_policy(self, transaction_policy_dict: dict) -> None:
        for k in transaction_policy_dict:
            if k != "decoupled":
                raise ValueError("model transaction property contains property other than 'decoupled'.")
        self._model_config.setdefault("model_transaction_policy", {}).update(transaction_policy_dict)


# ---- metrics ------------------------------------------------------------------------------------------------------

FAMILIES: list = []


class Metric:
    def __init__(self, family: MetricFamily, labels: dict | None, buckets: list | None):
        if labels is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise TritonModelException(f"metric labels must map str to str, got {labels!r}")
        if family.kind == MetricFamily.HISTOGRAM and not buckets:
            raise TritonModelException("a histogram metric needs buckets")
        self.family = family
        self.labels = dict(labels or {})
        self.calls: list = []  # ("increment" | "set" | "observe", value)
        self._value = 0.0
        self._observations: list = []

    def increment(self, value: float) -> None:
        if self.family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("increment is not supported for histograms")
        if self.family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException(f"a counter cannot be incremented by a negative value ({value})")
        self.calls.append(("increment", value))
        self._value += value

    def set(self, value: float) -> None:
        if self.family.kind != MetricFamily.GAUGE:
            raise TritonModelException("set is only supported for gauges")
        self.calls.append(("set", value))
        self._value = value

    def observe(self, value: float) -> None:
        if self.family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("observe is only supported for histograms")
        self.calls.append(("observe", value))
        self._observations.append(value)

    def value(self) -> float:
        return self._value


class MetricFamily:
    COUNTER, GAUGE, HISTOGRAM = 0, 1, 2

    def __init__(self, name: str, description: str, kind: int):
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException(f"unknown metric kind {kind}")
        self.name = name
        self.description = description
        self.kind = kind
        self.metrics: list = []
        FAMILIES.append(self)

    def Metric(self, labels: dict | None = None, buckets: list | None = None) -> Metric:  # noqa: N802
        m = Metric(self, labels, buckets)
        self.metrics.append(m)
        return m


def family(name: str) -> MetricFamily:
    """The (last) family created with ``name``."""
    found = [f for f in FAMILIES if f.name == name]
    if not found:
        raise KeyError(f"no metric family {name!r}; have {[f.name for f in FAMILIES]}")
    return found[-1]


class Logger:
    INFO, WARNING, ERROR, VERBOSE = range(4)
    messages: list = []

    @classmethod
    def log(cls, msg: str, level: int = 0) -> None:
        cls.messages.append((level, msg))

    @classmethod
    def log_info(cls, msg: str) -> None:
        cls.log(msg, cls.INFO)

    @classmethod
    def log_warn(cls, msg: str) -> None:
        cls.log(msg, cls.WARNING)

    @classmethod
    def log_error(cls, msg: str) -> None:
        cls.log(msg, cls.ERROR)

    @classmethod
    def log_verbose(cls, msg: str) -> None:
        cls.log(msg, cls.VERBOSE)


# ---- model dir and installation -----------------------------------------------------------------------------------

_model_dir: str | None = None


def set_model_dir(path: str | None) -> None:
    global _model_dir
    _model_dir = path


def get_model_dir() -> str:
    if _model_dir is None:
        raise TritonModelException("get_model_dir: no model directory (call set_model_dir first)")
    return _model_dir


def reset() -> None:
    """Forget metric families, log messages and the model dir."""
    FAMILIES.clear()
    Logger.messages.clear()
    set_model_dir(None)


MODULE_NAME = "triton_python_backend_utils"


def install(monkeypatch) -> object:
    """Make ``import triton_python_backend_utils`` give this module for the current test (pytest monkeypatch)."""
    reset()
    monkeypatch.setitem(sys.modules, MODULE_NAME, sys.modules[__name__])
    return sys.modules[__name__]
