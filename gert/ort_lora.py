"""LoRA adapters (``RunOptions.add_active_adapter``) on gert.InferenceSession, honoured.

ONNX Runtime feeds an active adapter's parameters as the run's inputs: each names a graph input, usually an
initializer listed as one (an overridable initializer, the base weights). gert compiles initializers into GE's graph,
so a set of active adapters gets a model of its own, with those initializers replaced, loaded on first use and kept
by the session (``AdapterModels``); parameters that name plain graph inputs join the feed. ONNX Runtime's
RunOptions and LoraAdapter say nothing of what they hold, so gert's subclasses record it (``patch_onnxruntime`` puts
them in place of onnxruntime's; ``gert.RunOptions`` / ``gert.LoraAdapter`` otherwise).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from gert.ort_io import ort_class

_classes: dict = {}
_KEPT = 4  # adapter sets whose models a session keeps


def _ort():
    import onnxruntime

    return onnxruntime


def lora_adapter_class() -> type:
    """onnxruntime.LoraAdapter that remembers the adapter file (or bytes) it loaded."""
    cls = _classes.get("LoraAdapter")
    if cls is None:

        class LoraAdapter(_ort().LoraAdapter):
            __doc__ = lora_adapter_class.__doc__

            def Load(self, path):  # noqa: N802 - ONNX Runtime's name
                super().Load(path)
                self.gert_parameters = _read_parameters(path)

        cls = _classes["LoraAdapter"] = LoraAdapter
    return cls


def run_options_class() -> type:
    """onnxruntime.RunOptions that remembers its active adapters."""
    cls = _classes.get("RunOptions")
    if cls is None:

        class RunOptions(_ort().RunOptions):
            __doc__ = run_options_class.__doc__

            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self.gert_adapters: list = []

            def add_active_adapter(self, adapter) -> None:
                super().add_active_adapter(adapter)
                self.gert_adapters.append(adapter)

        cls = _classes["RunOptions"] = RunOptions
    return cls


def _read_parameters(path) -> dict:
    fmt = _ort().AdapterFormat.read_adapter(str(path))
    return {str(k): np.array(v.numpy()) for k, v in fmt.get_parameters().items()}


def active_parameters(run_options) -> dict:
    """The parameters of the run's active adapters (a later adapter's value wins); {} without adapters. An adapter
    gert cannot read (loaded before gert's class was in place) is refused with ONNX Runtime's NotImplemented,
    never ignored."""
    out: dict = {}
    for adapter in getattr(run_options, "gert_adapters", None) or ():
        params = getattr(adapter, "gert_parameters", None)
        if params is None:
            raise ort_class("NotImplemented")(
                "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : this LoraAdapter was made by onnxruntime.LoraAdapter, "
                "whose parameters gert cannot read: make it with gert.LoraAdapter (or after gert.patch_onnxruntime())"
            )
        out.update(params)
    return out


class AdapterModels:
    """The gert.Models of the adapter sets a session ran, each loaded on first use (``load(params)``)."""

    def __init__(self, load: Callable[[Mapping[str, np.ndarray]], Any]) -> None:
        self._load = load
        self._models: dict = {}
        self._lock = threading.Lock()

    def get(self, params: Mapping[str, np.ndarray]):
        key = tuple(sorted((n, v.dtype.str, v.shape, v.tobytes()) for n, v in params.items()))
        with self._lock:
            model = self._models.get(key)
            if model is None:
                if len(self._models) >= _KEPT:
                    for old in self._models.values():
                        old.close()
                    self._models.clear()
                model = self._models[key] = self._load(params)
        return model

    def close(self) -> None:
        with self._lock:
            for m in self._models.values():
                m.close()
            self._models.clear()


def split(params: Mapping[str, np.ndarray], initializers: set, inputs: set) -> tuple:
    """(parameters that replace initializers, parameters fed as inputs); a name that is neither is ONNX Runtime's
    InvalidArgument."""
    replace, feed = {}, {}
    for name, value in params.items():
        if name in initializers:
            replace[name] = value
        elif name in inputs:
            feed[name] = value
        else:
            raise ort_class("InvalidArgument")(
                f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Invalid input name: "
                f"{name} (a parameter of an active LoRA adapter)"
            )
    return replace, feed


def model_with(data: bytes, replace: Mapping[str, np.ndarray], model_dir: str | None) -> bytes:
    """The model's bytes with the initializers ``replace`` names set to its values (its external data read in from
    ``model_dir``, the model file's directory)."""
    import onnx

    from gert.ort_model import inline_external, replace_initializers

    proto = onnx.load_from_string(data)
    replace_initializers(proto, replace)
    return inline_external(proto, model_dir)
