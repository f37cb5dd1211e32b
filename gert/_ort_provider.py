"""The host NPU's compute provider: ONNX Runtime, with inputs and outputs bound to device buffers.

The host NPU (C++) parses, validates, schedules and orders graph runs; it calls this provider from a stream's
worker thread to compute them. Device memory on the host NPU is host memory, so ONNX Runtime reads the inputs
and writes the outputs in place through IOBinding: no copies. The GIL is held only inside these calls, and
ONNX Runtime releases it while it computes.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from typing import Callable, Optional, Sequence

import numpy as np

from gert.dtypes import numpy_dtype

TensorArg = tuple  # (ptr: int, nbytes: int, ge_dtype: int, dims: tuple[int, ...])

_BIND_CACHE_LIMIT = 64


class OrtExecutable:
    """One compiled graph: an ONNX Runtime session per compute-thread count, created on first use."""

    def __init__(self, model: bytes, in_names: Sequence[str], in_dims: Sequence[tuple], out_names: Sequence[str]):
        self.model = model
        self.in_names = list(in_names)
        self.in_dims = [tuple(d) for d in in_dims]
        self.out_names = list(out_names)
        self._sessions: dict[int, object] = {}
        self._lock = threading.Lock()
        self._bindings: dict[tuple, object] = {}
        # key of a run's raw tensor descriptions -> a callable that repeats it (see _cann's provider trampoline)
        self.fast: dict[object, Callable[[], object]] = {}
        self._tls = threading.local()  # .last_run: the run this thread just made, for remember()

    def _overrides(self, sess) -> dict[str, int]:
        """Free-dimension overrides for dims the graph fixes (ge.inputShape / input_shape) but ONNX names."""
        fixed: dict[str, int] = {}
        clash: set[str] = set()
        for meta, dims in zip(sess.get_inputs(), self.in_dims):
            for name, value in zip(meta.shape, dims):
                if isinstance(name, str) and name and value >= 0:
                    if fixed.get(name, value) != value:
                        clash.add(name)
                    fixed[name] = value
        return {k: v for k, v in fixed.items() if k not in clash}

    def session(self, threads: int):
        threads = max(1, int(threads))
        sess = self._sessions.get(threads)
        if sess is not None:
            return sess
        import onnxruntime as ort

        with self._lock:
            sess = self._sessions.get(threads)
            if sess is None:
                so = ort.SessionOptions()
                so.intra_op_num_threads = threads
                so.inter_op_num_threads = 1
                so.log_severity_level = 3
                if self._sessions:  # reuse the overrides found for the first session
                    overrides = next(iter(self._sessions.values()))._gert_overrides
                else:
                    probe = ort.InferenceSession(self.model, sess_options=so, providers=["CPUExecutionProvider"])
                    overrides = self._overrides(probe)
                    if not overrides:
                        probe._gert_overrides = overrides
                        self._sessions[threads] = probe
                        return probe
                for name, value in overrides.items():
                    so.add_free_dimension_override_by_name(name, value)
                sess = ort.InferenceSession(self.model, sess_options=so, providers=["CPUExecutionProvider"])
                sess._gert_overrides = overrides
                self._sessions[threads] = sess
        return sess

    def run(self, threads: int, inputs: Sequence[TensorArg], outputs: Sequence[TensorArg],
            alloc: Callable[[int], int]) -> list:
        """Runs once; returns per output None (written in place) or (ptr, nbytes, dims) of what it produced."""
        sess = self.session(threads)
        bound_all = all(o[0] and all(d >= 0 for d in o[3]) for o in outputs)
        key = (threads, threading.get_ident(), tuple((i[0], i[2], i[3]) for i in inputs),
               tuple((o[0], o[2], o[3]) for o in outputs)) if bound_all else None
        io = self._bindings.get(key) if key is not None else None
        if io is None:
            io = sess.io_binding()
            for name, (ptr, nbytes, dt, dims) in zip(self.in_names, inputs):
                npdt = numpy_dtype(dt)
                if ptr == 0:  # an empty tensor: ONNX Runtime wants an address even for zero bytes
                    io.bind_cpu_input(name, np.empty(dims, npdt))
                else:
                    io.bind_input(name, "cpu", 0, npdt, list(dims), ptr)
            for name, (ptr, nbytes, dt, dims) in zip(self.out_names, outputs):
                if ptr and all(d >= 0 for d in dims):
                    io.bind_output(name, "cpu", 0, numpy_dtype(dt), list(dims), ptr)
                else:
                    io.bind_output(name, "cpu")
            if key is not None:
                if len(self._bindings) >= _BIND_CACHE_LIMIT:
                    self._bindings.clear()
                self._bindings[key] = io
        sess.run_with_iobinding(io)
        if bound_all:
            self._tls.last_run = functools.partial(sess.run_with_iobinding, io)
            return [None] * len(outputs)
        self._tls.last_run = None
        produced = io.copy_outputs_to_cpu()
        results = []
        for (ptr, nbytes, dt, dims), arr in zip(outputs, produced):
            if ptr and all(d >= 0 for d in dims):
                results.append(None)
                continue
            arr = np.ascontiguousarray(arr)
            if ptr:
                if arr.nbytes > nbytes:
                    raise ValueError(f"output of shape {arr.shape} needs {arr.nbytes} bytes, the buffer holds {nbytes}")
                dst = ptr
            else:
                dst = alloc(arr.nbytes)
            if arr.nbytes:
                ctypes.memmove(dst, arr.ctypes.data, arr.nbytes)
            results.append((dst, arr.nbytes, tuple(arr.shape)))
        return results


    def remember(self, key) -> None:
        """Let the run just made (if it wrote every output in place) be repeated by ``fast[key]()``."""
        last: Optional[Callable[[], object]] = getattr(self._tls, "last_run", None)
        if last is not None:
            if len(self.fast) >= _BIND_CACHE_LIMIT:
                self.fast.clear()
            self.fast[key] = last
            self._tls.last_run = None


class OrtGraphProvider:
    """Compiles graphs for the host NPU: validates the model with ONNX Runtime and finds static output shapes."""

    def compile(self, model: bytes, inputs: Sequence[tuple], outputs: Sequence[tuple]):
        """inputs/outputs: (name, ge_dtype, dims) with -1 for dynamic dims. Returns (executable, [(dtype, dims)])."""
        exe = OrtExecutable(model, [i[0] for i in inputs], [i[2] for i in inputs], [o[0] for o in outputs])
        sess = exe.session(1)
        ort_in = [m.name for m in sess.get_inputs()]
        if ort_in != exe.in_names:
            raise ValueError(f"ONNX Runtime sees inputs {ort_in}, the parser saw {exe.in_names}")
        result = [(o[1], tuple(o[2])) for o in outputs]
        if all(d >= 0 for i in inputs for d in i[2]):  # static: every output shape is fixed; find it
            feeds = {name: np.zeros(dims, numpy_dtype(dt)) for name, dt, dims in inputs}
            produced = sess.run(exe.out_names, feeds)
            result = [(o[1], tuple(int(d) for d in arr.shape)) for o, arr in zip(outputs, produced)]
        return exe, result
