"""``gert.load(model, fallback="cpu")``: a model GE's parser refuses runs on ONNX Runtime's CPU provider, when asked.

Never silent: without ``fallback="cpu"`` gert.load raises GE's error, and with it the load warns once naming GE's
reason. The CpuModel answers the request API of gert.Model (run of a dict or a list, submit, run_async, run_batch,
validate, warmup, stats, close, ``with``) on one ONNX Runtime CPU session, with gert's InputError for bad input;
what needs GE (stateful sequences, check_rows, device tensors, ``out=``) raises a GertError that says so.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gert.core.shapes import TensorInfo
from gert.core.validate import InputError
from gert.errors import GertError, ModelClosed

CPU_PROVIDER = "CPUExecutionProvider"
_ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
    "tensor(string)": np.object_,
}


def _info(arg) -> TensorInfo:
    dtype = _ORT_TYPES.get(arg.type)
    if dtype is None:
        raise GertError(
            f"fallback='cpu': {arg.name} is a {arg.type}; gert's request API takes tensors only (use "
            "gert.InferenceSession, which takes what ONNX Runtime takes)"
        )
    return TensorInfo(arg.name, np.dtype(dtype), tuple(d if isinstance(d, int) else (d or "?") for d in arg.shape))


class CpuModel:
    """A model on ONNX Runtime's CPU provider with gert.Model's request API (see the module doc)."""

    def __init__(self, model: str | bytes | os.PathLike, reason: BaseException, streams: int = 1) -> None:
        from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

        source = model if isinstance(model, (bytes, bytearray)) else os.fspath(model)
        self._session = InferenceSession(
            bytes(source) if isinstance(source, bytearray) else source, providers=[CPU_PROVIDER]
        )  # ONNX Runtime's own, never gert's patch
        self.reason = str(reason)
        self.inputs = [_info(a) for a in self._session.get_inputs()]
        self.outputs = [_info(a) for a in self._session.get_outputs()]
        self._names = [o.name for o in self.outputs]
        self._runs = 0
        self._lock = threading.Lock()
        self._closed = False
        self._pool = concurrent.futures.ThreadPoolExecutor(max(1, int(streams)), thread_name_prefix="gert-cpu")
        warnings.warn(
            f"gert.load(fallback='cpu'): GE cannot take the model ({reason}); it runs on ONNX Runtime's {CPU_PROVIDER}",
            UserWarning,
            stacklevel=3,
        )

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def num_streams(self) -> int:
        return 0

    def validate(self, inputs: Mapping[str, Any]) -> None:
        """InputError naming the input, the expected and the actual value, as gert.Model's validator words it."""
        self._checked(inputs)

    def run(self, inputs, out=None, *, timeout: float | None = None):
        """One request (dict -> dict), or a list of them (-> a list in order), each run as given."""
        if out is not None:
            raise GertError("run: out= writes into device-side buffers; the CPU fallback returns new arrays")
        self._check_open()
        if isinstance(inputs, Mapping):
            feed = self._checked(inputs)
            result = self._session.run(self._names, feed)
            with self._lock:
                self._runs += 1
            return dict(zip(self._names, result))
        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
            raise GertError(
                f"run: inputs must be a dict of input name -> array, or a list of such dicts; got "
                f"{type(inputs).__name__}"
            )
        return [self.run(r) for r in inputs]

    def __call__(self, **inputs) -> dict:
        return self.run(inputs)

    def run_batch(self, requests: list, *, timeout: float | None = None) -> list:
        """Each request run on its own: every caller gets exactly its own rows."""
        return [self.run(r) for r in requests]

    def submit(self, inputs: Mapping[str, Any], *, timeout: float | None = None) -> concurrent.futures.Future:
        self._check_open()
        return self._pool.submit(self.run, inputs)

    async def run_async(self, inputs: Mapping[str, Any]) -> dict:
        import asyncio  # here, not at import: 3-4 MB in every Triton stub that never awaits

        return await asyncio.wrap_future(self.submit(inputs))

    def warmup(self, sizes=None, progress: bool = False) -> int:
        """Nothing to compile: ONNX Runtime built its session at load."""
        return 0

    def stats(self) -> dict:
        with self._lock:
            return {"provider": CPU_PROVIDER, "runs": self._runs, "fallback_reason": self.reason}

    def sequence(self, *args, **kwargs):
        raise GertError("sequence: stateful sequences keep their state in device memory; not on the CPU fallback")

    def check_rows(self, *args, **kwargs):
        raise GertError(
            "check_rows: proves gert's batching of a model on the device; the CPU fallback runs each "
            "request alone (nothing to prove)"
        )

    def close(self, timeout: float = 60.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)

    def __enter__(self) -> CpuModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<gert CpuModel on {CPU_PROVIDER}: inputs {[(t.name, str(t.dtype), t.shape) for t in self.inputs]}"
            f"{' (closed)' if self._closed else ''}>"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise ModelClosed()

    def _checked(self, inputs: Mapping[str, Any]) -> dict:
        if not isinstance(inputs, Mapping):
            raise InputError(
                f"inputs must be a dict of input name -> array, got {type(inputs).__name__}",
                "type",
                actual=type(inputs).__name__,
            )
        names = [t.name for t in self.inputs]
        missing = [n for n in names if n not in inputs]
        extra = [n for n in inputs if n not in names]
        if missing or extra:
            raise InputError(
                f"inputs: missing {missing}, unexpected {extra}; the model takes {names}",
                "names",
                expected=names,
                actual=list(inputs),
                missing=missing,
                unexpected=extra,
            )
        feed = {}
        for t in self.inputs:
            a = np.asarray(inputs[t.name])
            if t.dtype == np.object_ and a.dtype.kind in "US":
                a = a.astype(object)
            bad = [
                axis
                for axis, d in enumerate(t.shape)
                if isinstance(d, int) and a.ndim == len(t.shape) and a.shape[axis] != d
            ]
            if a.dtype != t.dtype or a.ndim != len(t.shape) or bad:
                want = (
                    f"dtype {t.dtype}"
                    if a.dtype != t.dtype
                    else f"rank {len(t.shape)}"
                    if a.ndim != len(t.shape)
                    else f"axis {bad[0]} of size {t.shape[bad[0]]}"
                )
                got = (
                    f"{a.dtype}"
                    if a.dtype != t.dtype
                    else f"rank {a.ndim}"
                    if a.ndim != len(t.shape)
                    else f"{a.shape[bad[0]]}"
                )
                raise InputError(
                    f"input '{t.name}': expected {want}, got {got} (the model takes {t.dtype} of shape "
                    f"{t.shape}, the input is {a.dtype} of shape {tuple(a.shape)})",
                    "dtype",
                    t.name,
                    (t.dtype, t.shape),
                    (a.dtype, tuple(a.shape)),
                )
            feed[t.name] = a
        return feed
