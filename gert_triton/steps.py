"""Python steps around a gert model in a Triton ensemble: a plain function as a Triton Python model.

A step function takes one request's tensors (a dict of name -> numpy array, the batch axis removed when the model
batches) and returns a dict of name -> array. ``@step(inputs=..., outputs=...)`` declares the tensors the function
adds to the pipeline (name -> (dtype, dims), dims without the batch axis, -1 where dynamic), so that
``gert repo init --pre/--post`` can write their config entries: a pre step declares the client's inputs and any
extra outputs it hands to the post step (the model's inputs are its outputs too); a post step declares its outputs
(its inputs are the model's outputs and the pre step's extra outputs).

``TritonPythonModel`` here serves such a function: config.pbtxt parameter ``function`` ("module:function") names
it, parameter ``role`` ("pre" or "post") says whose fault a failure is: a pre step's error is the request's
(INVALID_ARG, as gert_triton answers a failing ``preprocess``), a post step's is the server's (INTERNAL).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from gert.errors import GertError
from gert_triton.cancellation import Cancellation, cancelled_response
from gert_triton.error_codes import error_response
from gert_triton.model_config import triton_dtype
from gert_triton.tensors import as_array, to_tensor

ROLES = ("pre", "post")


@dataclass(frozen=True)
class Declared:
    """A tensor a step adds: its config data_type ("TYPE_FP32") and dims (no batch axis, -1 where dynamic)."""

    name: str
    data_type: str
    dims: tuple


def _declare(tensors: Optional[dict]) -> tuple:
    out = []
    for name, (dtype, dims) in (tensors or {}).items():
        data_type = dtype if isinstance(dtype, str) and dtype.startswith("TYPE_") else triton_dtype(dtype)
        out.append(Declared(str(name), data_type, tuple(int(d) for d in dims)))
    return tuple(out)


def step(inputs: Optional[dict] = None, outputs: Optional[dict] = None) -> Callable:
    """Declare what a step function adds: ``inputs`` / ``outputs`` {name: (numpy dtype or "TYPE_...", dims)}."""

    def mark(fn: Callable) -> Callable:
        fn.step_inputs = _declare(inputs)
        fn.step_outputs = _declare(outputs)
        return fn

    return mark


def resolve(spec: str) -> Callable:
    """The function "module:function" names (module importable, dotted names allowed after the colon)."""
    module, sep, attr = str(spec).partition(":")
    if not sep or not module or not attr:
        raise GertError(f"step function {spec!r} is not 'module:function'")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise GertError(
            f"step function {spec!r}: cannot import {module!r} ({e}); it must be importable where the "
            "server runs (or name a file: path/file.py:function)"
        ) from e
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise GertError(f"step function {spec!r}: module {module!r} has no {attr!r}")
    if not callable(obj):
        raise GertError(f"step function {spec!r} is not callable")
    return obj


def declared(fn: Callable, kind: str) -> tuple:
    """``fn``'s declared "inputs" or "outputs" (empty when it declares none)."""
    return tuple(getattr(fn, f"step_{kind}", ()) or ())


def run_rows(fn: Callable, inputs: dict, batching: bool) -> dict:
    """``fn`` on one request: on each row of the batch axis when batching (the rows' results stacked again; rows
    whose results differ in shape cannot be one response), else on the whole tensors."""
    if not batching:
        return _checked(fn(inputs))
    sizes = {a.shape[0] for a in inputs.values()}
    if len(sizes) != 1:
        raise GertError(f"the inputs' batch sizes differ: { ({k: v.shape[0] for k, v in inputs.items()}) }")
    rows = [_checked(fn({k: v[i] for k, v in inputs.items()})) for i in range(sizes.pop())]
    out = {}
    for name in rows[0]:
        shapes = {r[name].shape for r in rows}
        if len(shapes) > 1:
            raise GertError(
                f"output '{name}' has a different shape for each row of the request ({sorted(shapes)}); "
                "send one row per request"
            )
        out[name] = np.stack([r[name] for r in rows])
    return out


def _checked(result) -> dict:
    if not isinstance(result, dict):
        raise GertError(f"a step function must return a dict of name -> array, got {type(result).__name__}")
    return {k: np.asarray(v) for k, v in result.items()}


def _pb_utils():
    import triton_python_backend_utils as pb_utils  # exists only inside Triton's Python stub (or a test fake)

    return pb_utils


class TritonPythonModel:
    """Serve the step function that config.pbtxt parameter ``function`` names, one request at a time."""

    def initialize(self, args: dict) -> None:
        self.config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in (self.config.get("parameters") or {}).items()}
        if "function" not in params:
            raise GertError("parameter 'function' ('module:function') is missing: it names the step to run")
        role = params.get("role", "pre")
        if role not in ROLES:
            raise GertError(f"parameter 'role': expected one of {ROLES}, got {role!r}")
        self.fn = resolve(params["function"])
        self.checking = role == "pre"  # a pre step's failure is the request's fault (gert_triton.error_codes)
        self.batching = int(self.config.get("max_batch_size", 0) or 0) > 0
        self.inputs = [i["name"] for i in self.config.get("input", [])]
        self.outputs = {o["name"]: o for o in self.config.get("output", [])}

    def execute(self, requests: list) -> list:
        pb_utils = _pb_utils()
        responses = []
        cancel = Cancellation(requests)
        for i, request in enumerate(requests):
            if cancel.cancelled(i):  # the client cancelled it: not run (gert_triton/cancellation.py)
                responses.append(cancelled_response(pb_utils))
                continue
            try:
                inputs = {}
                for name in self.inputs:
                    tensor = pb_utils.get_input_tensor_by_name(request, name)
                    if tensor is None:
                        raise GertError(f"input '{name}' is missing; the step takes {self.inputs}")
                    inputs[name] = as_array(tensor)
                out = run_rows(self.fn, inputs, self.batching)
                missing = [n for n in self.outputs if n not in out]
                if missing:
                    raise GertError(
                        f"step function returned {sorted(out)}, not the outputs {missing} its config declares"
                    )
                for n, entry in self.outputs.items():
                    if triton_dtype(out[n].dtype) != entry.get("data_type"):
                        raise GertError(
                            f"step output '{n}' is {out[n].dtype}, but its config data_type is {entry.get('data_type')}"
                        )
                wanted = request.requested_output_names()
                tensors = [to_tensor(pb_utils, n, out[n]) for n in self.outputs if not wanted or n in wanted]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as e:  # noqa: BLE001 - this request's answer
                responses.append(error_response(pb_utils, e, checking=self.checking))
        return responses
