"""The host NPU's compute provider: ONNX Runtime, with inputs and outputs bound to device buffers.

The host NPU (C++) parses, validates, schedules and orders graph runs; it calls this provider from a stream's
worker thread to compute them. Device memory on the host NPU is host memory, so ONNX Runtime reads the inputs
and writes the outputs in place through IOBinding: no copies. The GIL is held only inside these calls, and
ONNX Runtime releases it while it computes.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Callable, Union

import numpy as np

from gert.dtypes import DT_BF16, ONNX_BFLOAT16, ONNX_ELEM_BY_NAME, ge_dtype, numpy_dtype, onnx_to_numpy
from gert.hostnpu.model_file import ModelFile
from gert.preview import precision

TensorArg = tuple  # (ptr: int, nbytes: int, ge_dtype: int, dims: tuple[int, ...])
# A model's bytes: bytes, or the GE graph's own lent as a read-only buffer (cbindings/_provider.pxi _ModelView)
ModelBytes = Union[bytes, memoryview]
# What an executable keeps of its model: its bytes, or the model file to read them from (gert/hostnpu/model_file.py)
ModelSource = Union[bytes, memoryview, ModelFile]


def _model_size(model: ModelSource) -> int:
    """The model's size in bytes (a ModelFile's as compiled), without reading it."""
    return model.size if isinstance(model, ModelFile) else len(model)


def _planned(model: ModelSource, in_dims: Sequence[tuple]) -> bool:
    """Whether a graph's runs take ONNX Runtime's memory pattern: a static graph (one shape: one block) of a small
    model, not a dynamic one (_MEM_PATTERN, _PLANNED_MAX_BYTES)."""
    static = all(d >= 0 for dims in in_dims for d in dims)
    return _MEM_PATTERN or (static and _model_size(model) <= _PLANNED_MAX_BYTES)


def _read(model: ModelSource) -> ModelBytes:
    """The bytes of ``model``: read again (and checked) for a ModelFile."""
    return model.read() if isinstance(model, ModelFile) else model


_PROBED_LIMIT = 256
_LEARNED_KEPT = 256  # input shapes whose output shapes a dynamic graph remembers
# Spinning: ONNX Runtime's pool threads can busy-wait for work between the parallel sections of a run (its default)
# instead of sleeping. On the host NPU a run alone on its device (no other run within ComputeShare's 50 ms window:
# cbindings/hostnpu/runtime.h) spins, as ONNX Runtime's default session does, and stops when it ends
# (session.force_spinning_stop), so an idle pool never spins against the next run; a run that shares the device never
# spins (spinning threads take the cores the other runs need: PP-OCR det, 2 streams, 4 clients, bench_shapes: 0.71-0.88x
# ONNX Runtime's throughput with spinning pools everywhere). Measured (issue 23, 2 cores): PP-OCR det, one client, a
# hot size in blocks of 5 runs alternated with ONNX Runtime's default session, gert / ORT 1.27x and 1.33x without
# spinning, 1.05x-1.10x with; bench_shapes det (4 clients, 2 streams), gert / ORT throughput over 2 runs x 3 passes
# 0.90-0.98 (mean 0.937) without, 0.91-0.98 (mean 0.937) with. Without the stop at the end of a run (a pool spinning
# on for ~50 ms, as ONNX Runtime's default does) bench_shapes det lost 5% (0.85-0.97, mean 0.893) and one client gained
# nothing measurable. GERT_HOST_ORT_SPINNING=0: no run spins.
_SPIN = os.environ.get("GERT_HOST_ORT_SPINNING", "1") != "0"
# The device's workspace: every session of the host NPU allocates its intermediate tensors from one arena that ONNX
# Runtime's environment holds (as GE's graphs share one feature-memory pool), not from an arena of its own. With an
# arena per session, a model with many static graphs (policy auto over many sizes) ran each request in memory last
# touched many requests ago. Measured with plain ONNX Runtime sessions, PP-OCR det over 87 sizes, one session per
# size and stream, 2 streams, 4 clients: 0.77x the throughput of one dynamic session per stream with an arena per
# session, 1.01x with the shared arena; 87 sessions after one run each held 2.0 GB, 0.9 GB without their arenas.
# Sessions a user makes are not affected: only sessions that ask for it ("session.use_env_allocators") use it.
# An arena keeps the most its runs ever held at once for the life of the process, rounded up as it grew (ONNX
# Runtime extends an arena by powers of two). That is the device's model too: GE's graphs take their feature memory
# from a pool that stays allocated, and an application's SessionOptions.enable_cpu_mem_arena concerns its CPU
# sessions, not the device's memory. So by default every host NPU session takes the shared arena, also for a model
# whose application turned ONNX Runtime's arena off (RapidOCR does). Measured (benchmarks/bench_memory.py, issue 28),
# RapidOCR x24: with the arena 27.6 s of CPU and 1.44 GB peak RSS; without (intermediates from the heap) 41-46 s of
# CPU and 1.2-1.3 GB; RapidOCR on ONNX Runtime itself 55 s of CPU (spinning) and 1.07 GB. PP-OCR det over 90 sizes:
# 246 MB with the arena, 324 MB without (the heap fragments), 194 MB for ONNX Runtime. The heap's 1.5x CPU is not
# worth its 10-15% of RSS by default (and with no memory pattern on the arena, below, the arena's RSS is ONNX
# Runtime's: RapidOCR x24 0.99 GB, det 197 MB). GERT_HOST_ORT_ARENA=app: follow the application
# (gert.InferenceSession passes enable_cpu_mem_arena = False on: without_arena); =none: no arena for any session.
_ARENA = os.environ.get("GERT_HOST_ORT_ARENA", "shared")
# No memory pattern on the shared arena. ONNX Runtime's memory pattern plans a run's intermediates as one block per
# input shape, taken from the arena at each run: over varied shapes (det at every image size, rec at every batch and
# width) blocks of many sizes fragment the arena, which keeps every page it ever touched. Without it each intermediate
# is a chunk of its own, freed and coalesced as the run goes, and the arena stays near the largest run's live set.
# Measured (benchmarks/bench_memory.py, issue 28, fresh processes, load 5-6 on 2 cores): RapidOCR x24 peak RSS
# 1370 MB with the pattern, 985 MB without (ONNX Runtime itself, heap: 956 MB), 25.2 / 26.6 s of CPU; PP-OCR det over
# 90 sizes 234 / 197 MB (ONNX Runtime 194 MB), 15.9 / 15.5 s of CPU; one session against the other in turns, per
# run, within the noise of the load (det 224x288 .. 736x1024, rec 1..6x48x320..640, cls 6x48x192). Sessions without
# the shared arena (GERT_HOST_ORT_ARENA=none / app) keep ONNX Runtime's default. A static graph (the pad policy's
# gears, policy auto's hot sizes, exact sizes: one shape each, a bounded number of them per model) takes the pattern
# all the same, on a session of its own kind (OrtExecutable.planned): without it two streams' runs at once wait for
# each other at the arena's lock at every operator. So a model served with both holds two sessions (two copies of
# its optimized weights) once both kinds ran. GERT_HOST_ORT_MEM_PATTERN=1: the pattern for every graph.
_MEM_PATTERN = os.environ.get("GERT_HOST_ORT_MEM_PATTERN", "0") == "1"
# Only for a small model: the planned session's second copy of the weights costs ~4x the model's bytes of resident
# memory (ONNX Runtime's parse, optimized graph and prepacked weights), and what it saves is the arena lock's share of
# a run, which shrinks as operators get longer. Measured (issue 41): PP-OCR det (4.7 MB), two single-core streams,
# 4 threads at one static size (320x448): 59.5 vs 59 images/s with and without the pattern (2 alternated pairs of
# fresh processes, within their spread), while its second session raised its Triton stub's peak by 14-19 MB
# (bench_memory.py --work triton3, medians of 5 pairs: 189 MB, 175 without it, ONNX Runtime's own 170); PP-OCR cls
# (0.6 MB): 1.09x the requests/s in bench_triton.py with it (0914836). A static graph of a model larger than
# _PLANNED_MAX_BYTES runs on the model's unplanned session, as its dynamic graph does.


def _planned_max_bytes() -> int:
    """GERT_HOST_ORT_PLANNED_MAX_BYTES (bytes of the model), else 2 MiB."""
    value = os.environ.get("GERT_HOST_ORT_PLANNED_MAX_BYTES", "")
    if not value:
        return 2 << 20
    if not value.isdigit():
        raise ValueError(f"GERT_HOST_ORT_PLANNED_MAX_BYTES must be a whole number of bytes, got {value!r}")
    return int(value)


_PLANNED_MAX_BYTES = _planned_max_bytes()
# One session per model, not one per static size: the graphs of a model compiled at any size (gears, policy auto's
# hot sizes, exact sizes) run on the session of its dynamic-shape graph, which takes the sizes as they come. A
# session per size (free-dimension overrides) held its own optimized graph and copy of the weights (PP-OCR det:
# ~15 MB each, 17 sessions over 90 sizes: 450 MB peak RSS against ONNX Runtime's 194 MB) and ran no faster (det,
# 2 threads, one session against the other in turns: 320x448 63 / 77 ms, 224x288 38 / 32 ms, 640x640 637 / 627 ms,
# dynamic / static; benchmarks/bench_memory.py, issue 28). GE's graphs stay apart (each its own summary, output
# shapes from shape inference, I/O bindings); only ONNX Runtime's session is shared. A graph loaded from GE's compile
# cache is ONNX Runtime's model optimized at its size, and keeps a session of its own. GERT_HOST_ORT_SESSION_PER_SIZE=1:
# a session per size, as before.
_SESSION_PER_SIZE = os.environ.get("GERT_HOST_ORT_SESSION_PER_SIZE", "0") == "1"
# The output shapes of a dynamic graph's run at input shapes it has not run at are told by shape inference (GE's:
# gert/core/shape_infer.py, ~10-20 ms for PP-OCR rec on the loaded 2-core machine, once per input shapes), so that
# ONNX Runtime writes them straight into device memory. Else ONNX Runtime allocates each output and it is copied into
# device memory: two copies of every output at once, then the caller's download a third. Measured (issue 41), a
# Triton stub of PP-OCR rec emulated in-process over bench_memory.py's triton3 requests (1-4 lines, 19 widths, whose
# [N, W/8, 6625] outputs are up to 25 MB): peak RSS 250-262 MB with, 286-305 MB without (ONNX Runtime itself 199).
# Only for a graph that copied an output of _PREDICT_BYTES or more before: inference costs CPU, a small copy nothing
# worth it (PP-OCR cls, [N, 2] outputs: its stub's CPU went 0.5 -> 0.8 s over the triton3 requests with inference at
# every new shape). GERT_HOST_ORT_PREDICT=0: learned shapes only (a run's outputs at the same input shapes before).
_PREDICT = os.environ.get("GERT_HOST_ORT_PREDICT", "1") == "1"
_PREDICT_BYTES = 1 << 20
_ENV_ARENA_LOCK = threading.Lock()
_env_arena: bool | None = None  # registered (or registered before, by someone else): True; failed: False


def _elem(ge_dtype: int):
    """The element type IOBinding takes for a ge::DataType: the numpy dtype, or for bfloat16 the ONNX type number
    (ONNX Runtime's numpy conversion does not know ml_dtypes.bfloat16)."""
    return ONNX_BFLOAT16 if ge_dtype == DT_BF16 else numpy_dtype(ge_dtype)


def _bind_host_input(io, name: str, ge_dtype: int, dims) -> None:
    """Bind a zero-filled host array (kept alive with the binding): for size-0 inputs, which have no device
    address."""
    arr = np.zeros(tuple(dims), numpy_dtype(ge_dtype))
    io.bind_input(name, "cpu", 0, _elem(ge_dtype), list(dims), arr.ctypes.data)
    keep = getattr(io, "_gert_keep", None)
    if keep is None:
        keep = io._gert_keep = []
    keep.append(arr)


def _ort_session(model, **kwargs):
    """An ONNX Runtime session from its own module: ``onnxruntime.InferenceSession`` may be gert's facade
    (gert.patch_onnxruntime), and the host NPU must compute with ONNX Runtime itself.

    ``model``: bytes, or a buffer of them (the GE graph's own bytes, lent: cbindings/_provider.pxi ``_ModelView``),
    copied for the session's creation only. ONNX Runtime's Python session keeps the bytes it was made from for its
    life (``_model_bytes``, only read again to recreate the session after an execution provider failed, which a CPU
    session never does; ONNX Runtime's own TODO says so): the reference is dropped, so that a process holds the
    model's bytes once (GE's graph), not once more per session (issue 41)."""
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

    sess = InferenceSession(model if isinstance(model, (bytes, str, os.PathLike)) else bytes(model), **kwargs)
    if isinstance(getattr(sess, "_model_bytes", None), bytes):
        sess._model_bytes = None
    return sess


class OrtExecutable:
    """One compiled graph. Its ONNX Runtime session per (compute-thread count, spinning) comes from the provider,
    shared with the other graphs of the same model (OrtGraphProvider.shared_session; _SESSION_PER_SIZE): the gears
    and hot sizes of every stream run on one session, one thread pool and one copy of the weights."""

    def __init__(
        self,
        model: ModelBytes,
        in_names: Sequence[str],
        in_dims: Sequence[tuple],
        out_names: Sequence[str],
        provider: OrtGraphProvider,
        group: int = 0,
        overrides: dict | None = None,
        model_dir: str = "",
    ):
        # The model: for a graph compiled by the host NPU, the GE graph's own bytes lent as a buffer (no copy:
        # cbindings/_provider.pxi _ModelView), valid while this executable is held by the host NPU, and for a graph
        # parsed from a file only during its compile, then the file (keep_file); bytes for one loaded from GE's
        # compile cache (the only copy) or rewritten for a precision mode.
        self._model: ModelSource = model
        self.model_dir = model_dir  # the model file's directory: its external data (gert/core/external_data.py)
        # Set for an executable loaded from GE's compile cache: its model is ONNX Runtime's optimized one (sessions
        # skip graph optimization) and its free-dimension overrides were saved with it.
        self.optimized = overrides is not None
        self._fixed_overrides = overrides
        self.digest = provider.digest(model, model_dir)
        self.group = group
        self.in_names = list(in_names)
        self.in_dims = [tuple(d) for d in in_dims]
        self.planned = _planned(model, self.in_dims)
        self.out_names = list(out_names)
        # Outputs ONNX Runtime does not write into a bound buffer: a graph input listed as an output (ORT hands back
        # the input's own value) and a tensor listed twice (a name binds once). Real GE inserts an identity for them;
        # the host NPU copies them after the run (output index -> ("in" | "out", index of the source))
        self._copies = _output_copies(self.in_names, self.out_names)
        self._bound = [i for i in range(len(self.out_names)) if i not in self._copies]
        self._provider = provider
        self._sessions: dict[tuple, object] = {}  # (threads, spin) -> ONNX Runtime session
        self._validated_with: tuple | None = None  # compile's session's key in _sessions (validation_session)
        self._tls = threading.local()  # .last_run: the run this thread just made, for take_replay()
        # input shapes -> the output shapes a run at them produced (dynamic graphs: outputs bound by them next time)
        self._learned: dict[tuple, tuple] = {}
        self._learning = True  # False once a graph's output shapes did not follow its input shapes
        self.outputs_copied = 0  # outputs ONNX Runtime allocated and run() copied into device memory
        self.largest_copied = 0  # bytes of the largest of them

    @property
    def model(self) -> bytes:
        """The model's bytes (a copy made now where the executable holds the GE graph's bytes as a buffer, read
        again where it holds the model's file)."""
        data = _read(self._model)
        return data if isinstance(data, bytes) else bytes(data)

    @property
    def source(self) -> ModelSource:
        """What the executable holds of its model: the GE graph's bytes as a lent buffer, the model file the graph
        was parsed from, or bytes of its own."""
        return self._model

    def keep_file(self, path: str) -> None:
        """At the end of its compile (cbindings/_provider.pxi): the model's bytes are read again from the file
        ``path`` when needed, checked against the ones lent for the compile, which the GE graph of a model file
        frees when the compile ends (cbindings/hostnpu ModelBytes)."""
        model = self._model
        if not isinstance(model, ModelFile):
            self._model = ModelFile(path, len(model), self._provider.content_digest(model))

    def _overrides(self) -> dict[str, int]:
        """Free-dimension overrides for dims the graph fixes (ge.inputShape / input_shape) but ONNX names."""
        if self._fixed_overrides is not None:
            return dict(self._fixed_overrides)
        fixed: dict[str, int] = {}
        clash: set[str] = set()
        for shape, dims in zip(self._provider.input_shapes(self._model, self.digest), self.in_dims):
            for name, value in zip(shape, dims):
                if isinstance(name, str) and name and value >= 0:
                    if fixed.get(name, value) != value:
                        clash.add(name)
                    fixed[name] = value
        return {k: v for k, v in fixed.items() if k not in clash}

    def validation_session(self):
        """The session compile validates the graph with: a live one of the model at any thread count, else the one
        its runs alone take (_compile_threads). LoadGraph's prepare (session()) drops it if its runs take another:
        PP-OCR rec's 2-thread one, made and dropped, left ~10 MB more of each Triton stub's heap in use (issue 41)."""
        overrides = self._overrides() if self.optimized or _SESSION_PER_SIZE else {}
        found = self._provider.live_session(self.digest, overrides, self.planned)
        if found is not None:
            key, sess = found
            self._sessions.setdefault(key, sess)
        else:
            threads = _compile_threads()
            self.run_session(threads, True)
            key = (threads, _SPIN and threads > 1)
        self._validated_with = key
        return self._sessions[key]

    def session(self, threads: int, alone: bool = False):
        """What LoadGraph prepares (gertHostGraphProvider.prepare) for a run with ``threads`` compute threads, ``alone``
        on its device or not: the session of a run alone is made now; a share's (a run beside another, fewer
        threads) only when such a run comes (run_session): a process whose graphs never run side by side (one
        client: RapidOCR) holds one ONNX Runtime session per graph, not two (benchmarks/bench_memory.py)."""
        if alone:
            validated, self._validated_with = self._validated_with, None
            threads = max(1, int(threads))
            if validated is not None and validated != (threads, _SPIN and threads > 1):
                self._sessions.pop(validated, None)  # first: one session of the model at a time while it loads
            return self.run_session(threads, alone)
        if (max(1, int(threads)), False) in self._sessions:
            return self.run_session(threads, alone)
        return None

    def run_session(self, threads: int, alone: bool = False):
        """The session a run with ``threads`` compute threads takes, made on first use; it spins when the run is
        ``alone`` on its device (and has threads to spin)."""
        threads = max(1, int(threads))
        spin = _SPIN and alone and threads > 1
        sess = self._sessions.get((threads, spin))
        if sess is None:
            overrides = self._overrides() if self.optimized or _SESSION_PER_SIZE else {}
            sess = self._provider.shared_session(
                self._model, self.digest, threads, overrides, self.optimized, spin, self.planned
            )
            self._sessions[(threads, spin)] = sess
        return sess

    def run(
        self,
        threads: int,
        alone: bool,
        inputs: Sequence[TensorArg],
        outputs: Sequence[TensorArg],
        alloc: Callable[[int], int],
    ) -> list:
        """Runs once; returns per output None (written in place) or (ptr, nbytes, dims) of what it produced.

        Outputs whose shape the graph does not fix (a dynamic graph) are written straight into device memory when a
        run at the same input shapes showed their shapes before (``_learned``), or shape inference tells them at
        these input shapes (``_predicted``): ONNX Runtime checks a bound output's shape against the one it computes,
        so a graph whose output shapes follow input values (NonZero) fails that check once, runs again without it,
        and stops learning. Otherwise ONNX Runtime allocates them and they are copied into device memory once
        (``outputs_copied`` counts them, ``largest_copied`` the bytes of the largest: inference is asked only once
        that reached _PREDICT_BYTES)."""
        sess = self.run_session(threads, alone)
        bound_all = all(o[0] and all(d >= 0 for d in o[3]) for o in outputs)
        # A repeat of a run whose outputs were all bound never gets here: the host NPU replays it (take_replay).
        in_key = tuple(i[3] for i in inputs)
        learned = None if bound_all or not self._learning else self._learned.get(in_key)
        if learned is None and not bound_all and self._learning and _PREDICT and self.largest_copied >= _PREDICT_BYTES:
            learned = self._predicted(in_key, outputs)
        io = sess.io_binding()
        for name, (ptr, _nbytes, dt, dims) in zip(self.in_names, inputs):
            if ptr == 0:  # an empty tensor: ONNX Runtime wants an address even for zero bytes
                _bind_host_input(io, name, dt, dims)
            else:
                io.bind_input(name, "cpu", 0, _elem(dt), list(dims), ptr)
        planned: dict[int, tuple] = {}  # output index -> (ptr, nbytes, shape) bound by a learned shape
        copies = self._copies
        for i, (name, (ptr, nbytes, dt, dims)) in enumerate(zip(self.out_names, outputs)):
            if copies and i in copies:  # copied after the run (_copy_outputs)
                continue
            if ptr and all(d >= 0 for d in dims):
                io.bind_output(name, "cpu", 0, _elem(dt), list(dims), ptr)
                continue
            if learned is not None:
                shape = learned[i]
                size = math.prod(shape) * numpy_dtype(dt).itemsize
                dst = ptr if ptr and size <= nbytes else (0 if ptr else alloc(size))
                if dst:  # (a device buffer the host NPU allocated and no output keeps is freed after the run)
                    io.bind_output(name, "cpu", 0, _elem(dt), list(shape), dst)
                    planned[i] = (dst, size, shape)
                    continue
            io.bind_output(name, "cpu")
        try:
            if self._bound:  # (a graph whose outputs are all its inputs runs nothing)
                sess.run_with_iobinding(io)
        except Exception as e:
            if not planned:
                told = _ort_status_error(sess, self.in_names, inputs, [self.out_names[i] for i in self._bound])
                if told is None:
                    raise
                raise told from e
            self._learning = False  # output shapes that follow input values: bound shapes cannot be known
            return self.run(threads, alone, inputs, outputs, alloc)
        if bound_all:
            replay = _replay(sess, io) if self._bound else None
            if copies:
                moves = self._copy_outputs(inputs, outputs, [None] * len(outputs), alloc)
                replay = _copying_replay(replay, moves, io)
            self._tls.last_run = replay
            return [None] * len(outputs)
        self._tls.last_run = None
        # Outputs ONNX Runtime allocated: one copy from its buffer (OrtValue) into device memory. Read through the
        # OrtValue, not numpy: that keeps 0-d shapes and works for bfloat16.
        produced = dict(zip(self._bound, io.get_outputs())) if self._bound else {}
        results = []
        for i, (ptr, nbytes, dt, dims) in enumerate(outputs):
            if (ptr and all(d >= 0 for d in dims)) or i in copies:
                results.append(None)
                continue
            if i in planned:
                results.append(planned[i])
                continue
            value = produced[i]
            shape = tuple(int(d) for d in value.shape())
            size = math.prod(shape) * numpy_dtype(dt).itemsize
            if ptr:
                if size > nbytes:
                    raise ValueError(f"output of shape {shape} needs {size} bytes, the buffer holds {nbytes}")
                dst = ptr
            else:
                dst = alloc(size)
            if size:
                ctypes.memmove(dst, value.data_ptr(), size)
            self.outputs_copied += 1
            self.largest_copied = max(self.largest_copied, size)
            results.append((dst, size, shape))
        if copies:
            self._copy_outputs(inputs, outputs, results, alloc)
        if self._learning and learned is None:
            if len(self._learned) >= _LEARNED_KEPT:
                self._learned.clear()
            self._learned[in_key] = tuple(r[2] if r is not None else tuple(o[3]) for r, o in zip(results, outputs))
        return results

    def _predicted(self, in_key: tuple, outputs: Sequence[TensorArg]) -> tuple | None:
        """The output shapes at input shapes ``in_key`` by shape inference (the provider's, shared by the graphs of
        the model: a batch split over two streams runs both halves at the same shapes), kept as learned; None where
        a dim is not known from the input shapes."""
        inferred = self._provider.predicted_shapes(self._model, self.digest, self.in_names, in_key)
        if inferred is None or len(inferred) != len(outputs):
            return None
        shapes = tuple(
            tuple(int(d) for d in o[3]) if (o[0] and all(d >= 0 for d in o[3])) else inferred[i]
            for i, o in enumerate(outputs)
        )
        if any(sh is None for i, sh in enumerate(shapes) if i not in self._copies):
            return None
        if len(self._learned) >= _LEARNED_KEPT:
            self._learned.clear()
        self._learned[in_key] = shapes
        return shapes

    def _copy_outputs(
        self, inputs: Sequence[TensorArg], outputs: Sequence[TensorArg], results: list, alloc: Callable[[int], int]
    ) -> list:
        """Writes the outputs ONNX Runtime did not (``self._copies``) from their source: an input, or the output
        listed first under the same name. Fills ``results`` as run() returns them; returns the (dst, src, nbytes)
        copies made, which a replay of an in-place run repeats."""
        moves = []
        for i, (kind, j) in self._copies.items():
            if kind == "in":
                src, _, dt, shape = inputs[j]
            else:
                done = results[j]
                src, _, dt, shape = (done[0], 0, outputs[j][2], done[2]) if done is not None else outputs[j]
            shape = tuple(int(d) for d in shape)
            size = math.prod(shape) * numpy_dtype(dt).itemsize
            ptr, nbytes, _, dims = outputs[i]
            if ptr and all(d >= 0 for d in dims):
                if tuple(dims) != shape or size > nbytes:
                    raise ValueError(
                        f"output '{self.out_names[i]}' is a copy of a tensor of shape {shape}; its "
                        f"buffer is for shape {tuple(dims)} ({nbytes} bytes)"
                    )
                dst = ptr
                results[i] = None
            else:
                dst = ptr if ptr and size <= nbytes else (alloc(size) if size else 0)
                results[i] = (dst, size, shape)
            if size and src and dst != src:
                ctypes.memmove(dst, src, size)
                moves.append((dst, src, size))
        return moves

    def save(self) -> bytes:
        """What GE's compile cache keeps of this graph (gertHostGraphProvider.save): ONNX Runtime's optimized model
        (graph optimization is most of a host NPU compile) with the I/O names, dims and dim overrides."""
        if self.model_dir:  # ONNX Runtime would write the external weights into the entry: a second copy, maybe > 2 GB
            raise ValueError("a model with external data is not kept in GE's compile cache")
        model = self.model if self.optimized else _optimized_model(_read(self._model), self._overrides())
        head = json.dumps(
            {
                "format": _CACHE_FORMAT,
                "in_names": self.in_names,
                "in_dims": self.in_dims,
                "out_names": self.out_names,
                "overrides": self._overrides(),
            }
        ).encode()
        return len(head).to_bytes(4, "little") + head + model

    def take_replay(self) -> tuple | None:
        """How to repeat the run this thread just made, if it wrote every output in place: (callable, args, keep),
        kept by the host NPU's replay cache (cbindings/_provider.pxi) for runs with the same tensors; else None."""
        last = getattr(self._tls, "last_run", None)
        self._tls.last_run = None
        return last


def _optimized_model(model: ModelBytes, overrides: dict) -> bytes:
    """ONNX Runtime's optimized model of ``model`` with free-dimension ``overrides`` (what GE's compile cache keeps of
    a host NPU graph: graph optimization is most of its compile)."""
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".onnx", prefix="gert-opt-")
    os.close(fd)
    try:
        so = _session_options(1, overrides)
        so.optimized_model_filepath = path
        _ort_session(model, sess_options=so, providers=["CPUExecutionProvider"])
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)


def _replay(sess, io) -> tuple:
    """(callable, args, keep) that repeats ``sess.run_with_iobinding(io)``. ONNX Runtime's Python method checks
    WebGPU graph capture at every call (two more calls into ONNX Runtime's module, about 1 us); a CPU session never
    captures, so the replay calls what that method calls: the session's run_with_iobinding on the native binding.
    The public method where this ONNX Runtime has no such attributes.

    The run options passed are a default ``RunOptions`` of the binding's own, not None: ONNX Runtime runs a binding
    without options with default ones (the same run), but pybind11 matches None against the options' type only after
    a failed lookup of a foreign type on NoneType (an AttributeError built and dropped per call: about 0.7 us of a
    2.3 us replay of a one-node graph, benchmarks/bench_graph_call.py)."""
    native_sess = getattr(sess, "_sess", None)
    native_io = getattr(io, "_iobinding", None)
    run = getattr(native_sess, "run_with_iobinding", None)
    if run is None or native_io is None or getattr(io, "_session", None) is not native_sess:
        return sess.run_with_iobinding, (io,), io
    import onnxruntime as ort

    return run, (native_io, ort.RunOptions()), io


def _output_copies(in_names: Sequence[str], out_names: Sequence[str]) -> dict:
    """Output index -> ("in", input index) for a graph input listed as an output, ("out", index of its first
    listing) for an output listed again: the outputs OrtExecutable copies instead of binding."""
    copies: dict = {}
    first: dict = {}
    for i, name in enumerate(out_names):
        if name in in_names:
            copies[i] = ("in", list(in_names).index(name))
        elif name in first:
            copies[i] = ("out", first[name])
        else:
            first[name] = i
    return copies


def _copying_replay(replay: tuple | None, moves: list, io) -> tuple:
    """A replay (callable, args, keep) that runs ``replay`` (None: nothing to run) and then makes the output copies
    ``moves`` ((dst, src, nbytes), the same addresses: a replay is of the same tensors)."""
    moves = tuple(moves)
    memmove = ctypes.memmove
    if replay is None:

        def run_copies() -> None:
            for dst, src, n in moves:
                memmove(dst, src, n)

        return run_copies, (), io
    call, args, keep = replay

    def run_and_copy() -> None:
        call(*args)
        for dst, src, n in moves:
            memmove(dst, src, n)

    return run_and_copy, (), keep


def _ort_status_error(
    sess, in_names: Sequence[str], inputs: Sequence[TensorArg], out_names: Sequence[str]
) -> BaseException | None:
    """ONNX Runtime's own exception for a run that failed through IOBinding, or None. run_with_iobinding reports
    every failure as RuntimeError("Error in execution: ..."), without the status (INVALID_ARGUMENT, FAIL, ...) that
    ONNX Runtime's run() raises as its exception class; the failed run is made again with run() to learn it, so
    that gert.InferenceSession can raise what ONNX Runtime raises. A failure path only."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    feed = {}
    for name, (ptr, _nbytes, dt, dims) in zip(in_names, inputs):
        if dt == DT_BF16:
            return None  # numpy cannot hold it; the run's own error stands
        dtype = numpy_dtype(dt)
        shape = tuple(int(d) for d in dims)
        count = math.prod(shape)
        if ptr == 0 or count == 0:
            feed[name] = np.zeros(shape, dtype)
        else:
            raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
            feed[name] = np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)
    try:
        sess.run(list(out_names), feed)
    except Exception as e:  # noqa: BLE001 - the exception is the answer
        return e if type(e).__module__ == state.__name__ else None
    return None


class OrtGraphProvider:
    """Compiles graphs for the host NPU: validates the model with ONNX Runtime and infers output shapes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meta: dict[bytes, list] = {}  # model digest -> input shapes as ONNX Runtime reports them
        self._parsed: OrderedDict[bytes, object] = OrderedDict()  # model digest -> ModelProto (shape inference)
        self._shared: weakref.WeakValueDictionary[tuple, object] = weakref.WeakValueDictionary()
        # (model digest, inputs, outputs) -> the compile result: a graph compiled for one stream (GE Session) at
        # the same shapes is not validated and probed again for the next (auto compiles each hot size per stream)
        self._probed: dict = {}
        self._digests: dict = {}  # id(model bytes) -> (the bytes, their digest)
        self._sizes: dict = {}  # model digest -> its size in bytes (what sessions() reports)
        self._no_arena: set = set()  # digests of models whose sessions take no arena (without_arena)
        self._dirs: dict = {}  # digest -> the model file's directory, for models parsed from a file (external data)
        self._predictions: OrderedDict[tuple, list | None] = OrderedDict()  # predicted_shapes's

    def digest(self, model: ModelBytes, model_dir: str = "") -> bytes:
        """The model's digest (the key of its sessions). A model parsed from a file in ``model_dir`` has a digest
        of its own there (the same bytes elsewhere resolve other external data)."""
        digest = self.content_digest(model)
        with self._lock:
            return _with_dir(digest, model_dir, self._dirs)

    def content_digest(self, model: ModelBytes) -> bytes:
        """blake2b (16 bytes) of the model's bytes, computed once per bytes object: the host NPU hands the provider
        the same object for every compile of a GE graph's model that holds its bytes (parsed from memory)."""
        with self._lock:
            known = self._digests.get(id(model))
            if known is not None and known[0] is model:
                return known[1]
        digest = hashlib.blake2b(model, digest_size=16).digest()
        with self._lock:
            if len(self._digests) >= _PARSED_KEPT:
                self._digests.clear()
            self._digests[id(model)] = (model, digest)  # holds the object, so its id stays its own
        return digest

    def input_shapes(self, model: ModelSource, digest: bytes) -> list:
        shapes = self._meta.get(digest)
        if shapes is None and digest in self._dirs:  # external weights: read the file's shapes, not a session's
            shapes = _declared_input_shapes(self._parsed_model(model, digest))
            with self._lock:
                self._meta[digest] = shapes
        if shapes is None:
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.log_severity_level = 3
            probe = _ort_session(_read(model), sess_options=so, providers=["CPUExecutionProvider"])
            shapes = [list(m.shape) for m in probe.get_inputs()]
            with self._lock:
                self._meta[digest] = shapes
        return shapes

    def shared_session(
        self,
        model: ModelSource,
        digest: bytes,
        threads: int,
        overrides: dict,
        optimized: bool = False,
        spin: bool = False,
        planned: bool = False,
    ):
        """The session for (model, threads, overrides, spin, planned), created on first use; it lives while a graph
        uses it. ``optimized``: the model is ONNX Runtime's optimized one (from GE's compile cache), not optimized
        again. ``planned``: its runs' intermediates are planned as one block per input shape (ONNX Runtime's memory
        pattern), for static graphs (OrtExecutable.planned). Shared by every GE Session (stream): a size compiled for
        each stream costs one ONNX Runtime session, and the streams' runs of it read one copy of its weights. A
        spinning session stops spinning when a run ends."""
        key = (digest, threads, tuple(sorted(overrides.items())), spin, planned)
        with self._lock:
            sess = self._shared.get(key)
            if sess is None:
                so = _session_options(threads, overrides, digest not in self._no_arena, planned)
                if digest in self._dirs:  # ONNX Runtime resolves (and checks) the external data there
                    so.add_session_config_entry(_EXTERNAL_FOLDER, self._dirs[digest])
                if optimized:
                    import onnxruntime as ort

                    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                if spin:
                    so.add_session_config_entry("session.force_spinning_stop", "1")
                else:
                    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
                sess = _ort_session(_read(model), sess_options=so, providers=["CPUExecutionProvider"])
                self._shared[key] = sess
                self._sizes[digest] = len(model)
        return sess

    def live_session(self, digest: bytes, overrides: dict, planned: bool) -> tuple | None:
        """((threads, spin), session) of a live session of the model ``digest`` with ``overrides`` and ``planned``, or
        None: what validates a graph of the model at compile as well as a new session (its inputs and outputs are
        the same at any thread count), and what the graph's runs at that thread count then take."""
        want = tuple(sorted(overrides.items()))
        with self._lock:
            for key, sess in list(self._shared.items()):
                if key[0] == digest and key[2] == want and key[4] == planned:
                    return (key[1], key[3]), sess
        return None

    def predicted_shapes(
        self, model: ModelSource, digest: bytes, in_names: Sequence[str], in_key: tuple
    ) -> list | None:
        """Per graph output its shape at input shapes ``in_key`` (``in_names``' dims) by GE's shape inference
        (gert/core/shape_infer.py; None for an output it cannot tell), or None where inference fails; remembered
        per model (the last _LEARNED_KEPT input shapes)."""
        key = (digest, tuple(in_names), in_key)
        with self._lock:
            if key in self._predictions:
                self._predictions.move_to_end(key)
                return self._predictions[key]
        try:
            shapes = list(_infer(self._parsed_model(model, digest), dict(zip(in_names, in_key))).output_shapes)
        except Exception:  # noqa: BLE001 - not inferable at these sizes: ONNX Runtime allocates the outputs
            shapes = None
        with self._lock:
            self._predictions[key] = shapes
            while len(self._predictions) > _LEARNED_KEPT:
                self._predictions.popitem(last=False)
        return shapes

    def without_arena(self, model: bytes, model_dir: str = "") -> None:
        """The sessions of ``model`` (made from now on) take their intermediates from the heap, not from an arena:
        what an application asks ONNX Runtime with SessionOptions.enable_cpu_mem_arena = False."""
        digest = hashlib.blake2b(model, digest_size=16).digest()  # not self.digest: that keeps the bytes object
        with self._lock:
            self._no_arena.add(_with_dir(digest, model_dir, {}))

    def sessions(self) -> list:
        """The live ONNX Runtime sessions: (model digest, model bytes, compute threads, overrides, spinning) per
        session (benchmarks/bench_memory.py: each holds its own optimized copy of the model's weights)."""
        with self._lock:
            return [(k[0], self._sizes.get(k[0], 0), k[1], dict(k[2]), k[3]) for k in list(self._shared.keys())]

    def memory_patterns(self, digest: bytes) -> list:
        """Whether each live ONNX Runtime session of the model ``digest`` plans its runs' intermediates (its
        enable_mem_pattern, as ONNX Runtime reports it; OrtExecutable.planned decides it)."""
        with self._lock:
            live: list = [sess for key, sess in list(self._shared.items()) if key[0] == digest]
        return [sess.get_session_options().enable_mem_pattern for sess in live]

    def parsed_models(self) -> list:
        """(model digest, bytes) of the ModelProtos kept for shape inference (benchmarks/bench_memory.py): skeletons,
        a few KB per model, not the model's size."""
        with self._lock:
            return [(digest, proto.ByteSize()) for digest, proto in self._parsed.items()]

    def _parsed_model(self, model: ModelSource, digest: bytes):
        """The graph shape inference runs on, parsed once per model (the last few are kept): read from the wire
        without onnx (gert/core/wire_graph.py), else the model's skeleton ModelProto (gert/core/skeleton.py); neither
        holds a copy of its weights."""
        with self._lock:
            proto = self._parsed.get(digest)
            if proto is not None:
                self._parsed.move_to_end(digest)
                return proto
        from gert.core import wire_graph

        try:
            proto = wire_graph.parse(_read(model))
        except wire_graph.Unsupported:
            from gert.core.skeleton import skeleton  # onnx: for a model the wire reader leaves to it

            proto = skeleton(_read(model))
        with self._lock:
            self._parsed[digest] = proto
            while len(self._parsed) > _PARSED_KEPT:
                self._parsed.popitem(last=False)
        return proto

    def _external_dir(self, model: ModelBytes) -> str:
        """The directory the graph's model file was parsed from, when the model keeps data in external files
        there; else "" (the model is the same wherever it was read)."""
        model_dir = _compiled_model_dir()
        if not model_dir:
            return ""
        from gert.core.wire_graph import WireModel

        parsed = self._parsed_model(model, self.digest(model))
        if isinstance(parsed, WireModel):
            return model_dir if parsed.has_external() else ""
        from gert.core.external_data import has_external  # onnx

        return model_dir if has_external(parsed) else ""

    def compile(self, model: ModelBytes, inputs: Sequence[tuple], outputs: Sequence[tuple], group: int = 0):
        """inputs/outputs: (name, ge_dtype, dims) with -1 for dynamic dims; group: the GE Session.
        Returns (executable, [(dtype, dims)], unknown_shape). Output dtypes are ONNX Runtime's; shapes come from
        shape inference over the input shapes (never from a run), -1 where a dim is not known from them and (-2,)
        where not even the rank is; ``unknown_shape``: some tensor's shape depends on input values."""
        if not precision.current().keeps_dtypes:  # the compile's GE precision mode, emulated: a rewrite of its own
            model = precision.for_compile(bytes(model))
        exe = OrtExecutable(
            model,
            [i[0] for i in inputs],
            [i[2] for i in inputs],
            [o[0] for o in outputs],
            self,
            group,
            model_dir=self._external_dir(model),
        )
        probe_key = (
            exe.digest,
            tuple((i[0], i[1], tuple(i[2])) for i in inputs),
            tuple((o[0], o[1], tuple(o[2])) for o in outputs),
        )
        known = self._probed.get(probe_key)
        if known is not None:  # the same graph at the same shapes, compiled for another stream: validated already
            return exe, list(known[0]), known[1]
        sess = exe.validation_session()  # a live session of the model, else the one of a stream without core limits
        ort_in = [m.name for m in sess.get_inputs()]
        if ort_in != exe.in_names:
            raise ValueError(f"ONNX Runtime sees inputs {ort_in}, the parser saw {exe.in_names}")
        ort_out = {m.name: m for m in sess.get_outputs()}
        dtypes = [_ort_dtype(ort_out[o[0]]) if o[0] in ort_out else o[1] for o in outputs]
        result = [(dt, tuple(o[2])) for dt, o in zip(dtypes, outputs)]
        unknown = True
        if all(d >= 0 for i in inputs for d in i[2]):
            inferred = _infer(self._parsed_model(model, exe.digest), {i[0]: tuple(i[2]) for i in inputs})
            result = [
                (dt, _UNKNOWN_RANK if dims is None else tuple(d if type(d) is int else -1 for d in dims))
                for dt, dims in zip(dtypes, inferred.output_dims)
            ]
            unknown = not inferred.all_known
        with self._lock:
            if len(self._probed) >= _PROBED_LIMIT:
                self._probed.clear()
            self._probed[probe_key] = (tuple(result), unknown)
        return exe, result, unknown

    def load(self, data: bytes, group: int = 0) -> OrtExecutable:
        """An executable from OrtExecutable.save's bytes (gertHostGraphProvider.load: a GE compile cache hit), with
        no validation, shape inference or graph optimization; ValueError for bytes it cannot read."""
        try:
            n = int.from_bytes(data[:4], "little")
            head = json.loads(data[4 : 4 + n])
            if head.get("format") != _CACHE_FORMAT:
                raise ValueError(f"format {head.get('format')!r}, expected {_CACHE_FORMAT!r}")
            model = data[4 + n :]
            in_dims = [tuple(int(d) for d in dims) for dims in head["in_dims"]]
            exe = OrtExecutable(
                model,
                head["in_names"],
                in_dims,
                head["out_names"],
                self,
                group,
                {str(k): int(v) for k, v in head["overrides"].items()},
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a cached ONNX Runtime executable: {e}") from None
        return exe


def _device_threads() -> int:
    """The host NPU device's cube cores (GERT_HOST_CUBE_CORES, else the host's CPUs): the compute threads of a graph
    on a stream without core limits."""
    try:
        return max(1, int(os.environ.get("GERT_HOST_CUBE_CORES", "") or os.cpu_count() or 1))
    except ValueError:
        return os.cpu_count() or 1


def _infer(proto, shapes: dict):
    """GE's compile-time shape inference of ``proto`` at input ``shapes`` (gert/core/shape_infer.py: imported by
    the first compile; it imports onnx only for what gert's own rules leave to it)."""
    from gert.core import shape_infer

    return shape_infer.infer(proto, shapes)


def _compile_threads() -> int:
    """The compute threads of a run alone of the graph being compiled: its GE session's cube cores (ge.aicoreNum
    "cube|vector": gert's streams with cube_cores; LoadGraph's thread count when set), else _device_threads() (a
    stream without core limits)."""
    from gert import hostnpu

    try:
        cube = (hostnpu.compile_option(_AICORE_OPTION) or "").split("|")[0].strip()
    except Exception:  # noqa: BLE001 - not compiling, or a host NPU build without compile options
        cube = ""
    return int(cube) if cube.isdigit() and int(cube) > 0 else _device_threads()


def _shared_arena() -> bool:
    """Register ONNX Runtime's environment-wide CPU arena once per process; False if this ONNX Runtime cannot."""
    global _env_arena
    if _env_arena is None:
        with _ENV_ARENA_LOCK:
            if _env_arena is None:
                import onnxruntime as ort

                info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
                try:  # registered already (by the application): no error, and sessions that opt in use that one
                    ort.create_and_register_allocator(info, None)
                    _env_arena = True
                except Exception:  # noqa: BLE001 - an ONNX Runtime without it: sessions keep arenas of their own
                    _env_arena = False
    return bool(_env_arena)


def _session_options(threads: int, overrides: dict, arena: bool = True, pattern: bool = False):
    import onnxruntime as ort

    so = ort.SessionOptions()
    if _ARENA == "none" or (not arena and _ARENA == "app"):  # no arena: intermediates from the heap
        so.enable_cpu_mem_arena = False
    elif _shared_arena():
        so.add_session_config_entry("session.use_env_allocators", "1")
        so.enable_mem_pattern = _MEM_PATTERN or pattern  # (OrtExecutable.planned)
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    for name, value in overrides.items():
        so.add_free_dimension_override_by_name(name, value)
    return so


_CACHE_FORMAT = "gert-ort-1"
_EXTERNAL_FOLDER = "session.model_external_initializers_file_folder_path"  # ONNX Runtime's key (a model from bytes)
_AICORE_OPTION = "ge.aicoreNum"  # GE's option of a session's core numbers, "cube|vector"
_MODEL_DIR_OPTION = "gert.host.model_dir"  # gertHostCompileOption's key: the compiled graph's model directory


def _compiled_model_dir() -> str:
    """The directory of the model file the graph being compiled was parsed from ("" for a model from memory)."""
    from gert import hostnpu

    try:
        return hostnpu.compile_option(_MODEL_DIR_OPTION) or ""
    except Exception:  # noqa: BLE001 - a host NPU build without it: no directory
        return ""


def _with_dir(digest: bytes, model_dir: str, dirs: dict) -> bytes:
    """``digest`` for the model parsed from a file in ``model_dir`` (remembered in ``dirs``), or as it is."""
    if not model_dir:
        return digest
    out = hashlib.blake2b(digest + b"\0" + os.fsencode(model_dir), digest_size=16).digest()
    dirs[out] = model_dir
    return out


def _declared_input_shapes(proto) -> list:
    """The graph inputs' shapes as ONNX Runtime reports them (int, dim name or None per axis), from the file
    (``proto``: a gert.core.wire_graph.WireModel or an onnx.ModelProto)."""
    from gert.core.wire_graph import WireValue

    inits = {t.name for t in proto.graph.initializer}
    out = []
    for v in proto.graph.input:
        if v.name in inits:
            continue
        if isinstance(v, WireValue):
            out.append(list(v.dims or ()))
            continue
        dims = v.type.tensor_type.shape.dim if v.type.HasField("tensor_type") else []
        out.append([d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims])
    return out


_UNKNOWN_RANK = (-2,)  # GE's UNKNOWN_DIM_NUM
_PARSED_KEPT = 4


def _ort_dtype(meta) -> int:
    """The ge::DataType of an ONNX Runtime NodeArg ("tensor(float)")."""
    t = meta.type
    if not t.startswith("tensor(") or not t.endswith(")"):
        raise ValueError(f"output '{meta.name}' is a {t}, not a tensor")
    return ge_dtype(onnx_to_numpy(ONNX_ELEM_BY_NAME.get(t[len("tensor(") : -1], 0)))
