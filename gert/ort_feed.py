"""gert.InferenceSession's feed checks: a request checked by gert's validator (gert/core/validate.py) and its
errors told as ONNX Runtime tells them (exception class and message), including the dims free-dimension overrides
fix. One FeedCheck per session, built from what ONNX Runtime reports of the model's inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gert.errors import GertError
from gert.ort_io import ort_class, ort_run_error


def _ort_errors():
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    return state


class InvalidArgument(GertError, _ort_errors().InvalidArgument):
    """ONNX Runtime's InvalidArgument (bad input name, dtype, rank or dims; unknown output name), from gert."""


class MissingInputs(GertError, ValueError):
    """ONNX Runtime raises ValueError for required inputs missing from the feed."""


def dtype_name(dtype: np.dtype) -> str:
    """ONNX Runtime's element type name of a numpy dtype ('float', 'double', 'int64', 'string', ...)."""
    names = {"float32": "float", "float64": "double", "bool": "bool", "object": "string"}
    if dtype.kind in "US":
        return "string"
    return names.get(str(dtype), str(dtype))


class FeedCheck:
    """The checks of one session's feeds: ``input_info`` (the gert.Model's inputs by name: dtype), ``input_args``
    (ONNX Runtime's NodeArgs by name: its types and the overridden dims), ``overridable`` (initializer names)."""

    def __init__(self, input_info: Mapping[str, Any], input_args: Mapping[str, Any], overridable: set) -> None:
        self.input_info = dict(input_info)
        self.input_args = dict(input_args)
        self.overridable = set(overridable)

    def feed(self, input_feed: Mapping[str, Any], validate: Callable[[dict], Any]) -> dict:
        """The feed checked by the model's validator (gert/core/validate.py), its errors told as ONNX Runtime tells
        them (exception class and message); free-dimension overrides fix dims as ONNX Runtime fixes them."""
        from gert.core.validate import InputError

        if not isinstance(input_feed, Mapping):
            raise InvalidArgument(f"input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        info = self.input_info
        for name, value in input_feed.items():  # np.asarray(None, float32) would be NaN: ONNX Runtime fails the run
            if value is None and name in info:
                raise InvalidArgument(
                    f"[gert] : INVALID_ARGUMENT : input '{name}' is None; ONNX Runtime fails the run "
                    f"with 'Missing Input: {name}'"
                )
        # ONNX Runtime converts a value that is not an array to the input's type
        feed = {
            n: v if isinstance(v, np.ndarray) or n not in info else np.asarray(v, dtype=info[n].dtype)
            for n, v in input_feed.items()
        }
        try:
            validate(feed)
        except InputError as e:
            raise self.ort_error(e, feed) from None
        for name, a in feed.items():
            self.check_dims(name, a)  # the overridden dims (the model's own fixed dims passed above)
        return feed

    def ort_error(self, e, feed: Mapping[str, Any]) -> GertError:
        """ONNX Runtime's exception and message for the validator's InputError ``e``."""
        if e.kind == "names" and e.missing:
            return MissingInputs(f"Required inputs ({e.missing}) are missing from input feed ({list(feed)}).")
        if e.kind == "names":
            name = e.unexpected[0]
            if name in self.overridable:
                return InvalidArgument(
                    f"[gert] : INVALID_ARGUMENT : input '{name}' overrides an initializer; "
                    "gert compiles initializers into the graph and cannot override them"
                )
            return InvalidArgument(f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Invalid input name: {name}")
        arg = self.input_args.get(e.input)
        if e.kind == "dtype":
            return InvalidArgument(
                f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Unexpected input data type. "
                f"Actual: (tensor({dtype_name(e.actual[0])})) , expected: ({arg.type})"
            )
        if e.kind == "rank":
            return InvalidArgument(
                f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Invalid rank for input: {e.input} "
                f"Got: {len(e.actual[1])} Expected: {len(arg.shape)} Please fix either the "
                "inputs/outputs or the model."
            )
        if e.kind == "dims":
            try:
                self.check_dims(e.input, feed[e.input])
            except InvalidArgument as ort_error:
                return ort_error
        if e.kind == "dim":  # sizes ONNX Runtime finds apart in the kernel that meets them: its Fail
            return ort_class("Fail")(f"[ONNXRuntimeError] : 1 : FAIL : {e}")
        return InvalidArgument(f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : {e}")

    def run_error(self, e: BaseException, feed: Mapping[str, Any]) -> BaseException | None:
        """ONNX Runtime's exception for an error raised while running ``feed`` (None: raise ``e`` as it is)."""
        from gert.core.validate import InputError

        if isinstance(e, InputError):
            told = self.ort_error(e, feed)
            return None if told is e else told
        return ort_run_error(e)

    def check_dims(self, name: str, a) -> None:
        arg = self.input_args.get(name)
        if arg is None:
            return
        bad = [(i, a.shape[i], d) for i, d in enumerate(arg.shape) if isinstance(d, int) and a.shape[i] != d]
        if bad:
            lines = "".join(f"\n index: {i} Got: {got} Expected: {want}" for i, got, want in bad)
            raise InvalidArgument(
                f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: "
                f"{name} for the following indices{lines}\n Please fix either the "
                "inputs/outputs or the model."
            )
