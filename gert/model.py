"""gert.Model: an ONNX model on N streams per device, arrays in, arrays out.

    model = gert.load("rec.onnx", streams=2, gears={"batch": [1, 4, 8]})
    out = model.run({"x": x})               # dict of output name -> numpy array
    fut = model.submit({"x": x})            # concurrent.futures.Future
    out = await model.run_async({"x": x})
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
import time
import warnings
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Union

import numpy as np

from gert import _cann
from gert.core import external_data, onnx_io, trace as _trace
from gert.core._hotpath import HotPath
from gert.core.dynamic import BatchingConfig, Pending
from gert.core.engine import Engine, Streams, write_out
from gert._cann import Graph, ge_initialize
from gert.core.compile_cache import CACHE_DIR_OPTION, CompileCache
from gert.core.dispatch import StreamQueue
from gert.errors import GertError
from gert.core.executor import Request, Worker
from gert.core.futures import FutureRunner
from gert.core.recovery import Recovery
from gert.core.row_check import check_rows
from gert.preview import cann_ops as preview_ops, precision as preview_precision
from gert import sequence as _sequence
from gert.sequence import Sequences
from gert.core.shapes import ShapePlan, plan_shapes, warmup_keys
from gert.core.tiers import COMPILE_SHARE, HOT_AFTER, HOT_WINDOW, Tiers, check_settings

if TYPE_CHECKING:
    from gert.tools.display import Stats

ModelSource = Union[str, bytes, os.PathLike]


def _split_options(options: Optional[Mapping[str, str]]) -> tuple:
    """GE options by level: "global.K" -> GEInitialize, "graph.K" -> AddGraph, anything else -> Session."""
    glob, sess, graph = {}, {}, {}
    for k, v in (options or {}).items():
        if not isinstance(k, str):
            raise GertError(f"options: key {k!r} is not a str")
        if k.startswith("global."):
            glob[k[len("global."):]] = str(v)
        elif k.startswith("graph."):
            graph[k[len("graph."):]] = str(v)
        elif k.startswith("session."):
            sess[k[len("session."):]] = str(v)
        else:
            sess[k] = str(v)
    return glob, sess, graph


def _check_cores(device: int, value: Optional[int], attr: int, what: str) -> None:
    if value is None:
        return
    have = _cann.get_device_info(device, attr)
    if not 1 <= int(value) <= have:
        raise GertError(f"{what}={value} is out of range: device {device} has {have} {what.split('_')[0]} cores")


def _check_devices(devices: Sequence[int], streams: int, cube_cores: Optional[int],
                   vector_cores: Optional[int]) -> tuple:
    """The devices as a tuple of ints, once they, the stream count and the core locks are known to be possible."""
    if int(streams) < 1:
        raise GertError(f"streams must be >= 1, got {streams}")
    devices = tuple(int(d) for d in devices)
    if not devices:
        raise GertError("devices must name at least one device")
    n = _cann.device_count()
    for d in devices:
        if not 0 <= d < n:
            raise GertError(f"device {d} does not exist; this backend has {n} device(s)")
    for d in devices:
        _check_cores(d, cube_cores, _cann.DEV_ATTR_CUBE_CORE_NUM, "cube_cores")
        _check_cores(d, vector_cores, _cann.DEV_ATTR_VECTOR_CORE_NUM, "vector_cores")
    return devices


def _read_model(model: ModelSource) -> tuple:
    """(the ONNX model's bytes, the model file's directory or None): ``model`` is a path or the bytes themselves. The
    directory is where its external data resolves (gert/core/external_data.py)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), None
    with open(model, "rb") as f:
        return f.read(), external_data.model_dir(model)


def _parse(data: bytes, cann_ops: Optional[str], path: Optional[ModelSource] = None) -> tuple:
    """(what a real CANN's parser would refuse, warned about or refused by ``cann_ops``: gert/preview/cann_ops.py;
    GE's graph of the model, failing with GE's code where GE's parser refuses it). A model file is parsed by its
    ``path`` (aclgrphParseONNX), so that GE resolves its external data next to it."""
    report = preview_ops.enforce(data, cann_ops, stacklevel=5)  # the warning points at the caller of gert.load
    with preview_ops.checked():
        return report, Graph.from_onnx(os.fspath(path) if path is not None else data)


def _open_cache(cache_dir, data: bytes, glob: dict, cache_mode, trust_foreign: bool, external: bool):
    """GE's compile cache for the model (None when off). A model with external data keeps none: its key would be the
    model file's bytes, not the weights' (a changed data file would hit a stale entry), and the entry would hold a
    second copy of weights that may exceed 2 GB."""
    if external:
        if cache_dir is not None:
            warnings.warn("gert.load: the model keeps its weights in external data files; GE's compile cache is not "
                          "used for it (cache_dir ignored)", UserWarning, stacklevel=4)
        return None
    return CompileCache.open(cache_dir, data, glob, cache_mode, trust_foreign)


def _display():
    """gert/tools/display.py (how a Model shows), imported when a Model is shown: tools are not on the runtime's
    import path."""
    from gert.tools import display

    return display


def _open_workers(devices: Sequence[int], streams: int, graph, plan: ShapePlan, sess: dict, graph_opts: dict,
                  limits: tuple, cache) -> list:
    """``streams`` Workers (a stream with its Session and graphs) per device; ``limits``: (cube_cores, vector_cores,
    max_exact_graphs). All or none: the ones opened are closed when one fails."""
    workers: list = []
    try:
        for d in devices:
            for _ in range(streams):
                workers.append(Worker(len(workers), d, graph, plan, sess, graph_opts, *limits))
                workers[-1].cache = cache
    except BaseException:
        for w in workers:
            w.close()
        raise
    return workers


class Model:
    """A loaded model. Any number of Python threads may call run() / submit() at once."""

    def __init__(self, model: ModelSource, *, devices: Sequence[int] = (0,), streams: int = 1,
                 cube_cores: Optional[int] = None, vector_cores: Optional[int] = None,
                 gears: Optional[Mapping[str, Sequence[int]]] = None, shape_policy: Optional[Mapping[str, str]] = None,
                 pad_value: Union[float, Mapping[str, float]] = 0, max_batch: Optional[int] = None,
                 options: Optional[Mapping[str, str]] = None,
                 output_dims: Optional[Mapping[str, Mapping[int, str]]] = None, max_exact_graphs: int = 16,
                 split_batch: bool = False, request_timeout_s: Optional[float] = None,
                 hot_after: int = HOT_AFTER, hot_window: int = HOT_WINDOW, compile_share: float = COMPILE_SHARE,
                 state: Optional[Mapping[str, str]] = None, batch_dim: Union[str, Sequence[str], None] = None,
                 sequence_wait_s: float = 0.0, cache_dir: Optional[Union[str, os.PathLike]] = None,
                 cache_mode: Union[int, str, None] = None, trust_foreign_entries: bool = False,
                 cann_ops: Optional[str] = None, precision_mode: Optional[str] = None,
                 keep_fp32: Sequence[str] = (), dynamic_batching: Union[bool, Mapping] = True,
                 host_memory: Union[int, str, None] = None,
                 rows_independent: Union[bool, Sequence[str], None] = None):
        data, model_dir = _read_model(model)  # model_dir: where external data resolves (None for bytes)
        check_settings(hot_after, hot_window, max_exact_graphs, compile_share, host_memory)
        batching = BatchingConfig.parse(dynamic_batching)  # concurrent callers batched (gert/core/dynamic.py)
        devices = _check_devices(devices, streams, cube_cores, vector_cores)
        self.cann_report, self._graph = _parse(data, cann_ops, model if model_dir else None)  # GE's refusals first
        described = onnx_io.read(data, model_dir)  # the one ONNX I/O reader (gert/core/onnx_io.py)
        self.value_dependent = described.value_dependent
        self.plan: ShapePlan = plan_shapes(described.io, gears, shape_policy, pad_value, max_batch, output_dims,
                                           batch_dim, state, model=described.proto,
                                           value_dependent=described.value_dependent, rows_independent=rows_independent)
        # stateful models: state input -> output pairs, and the device-resident sequences (gert/sequence.py)
        self._sequences = Sequences(self, state, sequence_wait_s, devices) if state else None
        glob, sess, graph_opts = _split_options(options)
        # GE's precision mode (emulated by the host NPU's provider: gert/preview/precision.py)
        self.precision, graph_opts = preview_precision.model_settings(precision_mode, keep_fp32, sess, graph_opts)
        ge_initialize(glob)
        # GE's compile cache (gert/core/compile_cache.py): cache_dir, else GERT_CACHE_DIR; cache_mode, else GERT_CACHE_MODE
        self.compile_cache = _open_cache(cache_dir, data, glob, cache_mode, trust_foreign_entries, described.external)
        if self.compile_cache is not None:
            sess = {**sess, CACHE_DIR_OPTION: self.compile_cache.directory}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._closed = False
        self._in_flight = 0
        self._workers: list = _open_workers(devices, int(streams), self._graph, self.plan, sess, graph_opts,
                                            (cube_cores, vector_cores, max_exact_graphs), self.compile_cache)
        self._recovery = Recovery(lambda: self._workers, request_timeout_s)  # device faults: gert/core/recovery.py
        # policy auto: requests route through the tiers (dynamic graph now, static graphs once hot)
        self._tiers = (Tiers(self._workers, max_exact_graphs, hot_after, hot_window, compile_share, host_memory)
                       if self.plan.tiered else None)
        for w in self._workers:
            w.tiers = self._tiers
        self._queue: StreamQueue = StreamQueue(self._workers)
        # the request pipeline (gert/core/engine.py); the streams' lifecycle stays here (close, warmup)
        self.engine = Engine(self.plan, Streams(self._dispatch, self._queue.idle, lambda: len(self._workers),
                                                self._recovery.timeout_for, self._parts_pool, self._dispatch_batch),
                             split_batch, batching)
        # the compiled hot path (gert/core/_hotpath.pyx): a signature seen before runs in one call, without the above
        self._hot = _hot_path(self, request_timeout_s, split_batch, batching)
        # submit()'s threads: with dynamic batching, enough for a full batch to queue behind every stream
        self._futures = FutureRunner(max(4, 2 * len(self._workers), self.engine.batch_limit + len(self._workers)),
                                     "gert-model")

    # ---- metadata -------------------------------------------------------------------------------------------
    @property
    def inputs(self) -> list:
        """Inputs: name, dtype, shape (ints, or the dim's symbolic name)."""
        return list(self.plan.inputs)

    @property
    def outputs(self) -> list:
        return list(self.plan.outputs)

    @property
    def split_batch(self) -> bool:
        """One batch is spread over the streams that are idle (gert.load(split_batch=True))."""
        return self.engine.split_batch

    @property
    def num_streams(self) -> int:
        """Streams over all devices (0 once closed)."""
        return len(self._workers)

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- running ----------------------------------------------------------------------------------------------
    def __call__(self, **inputs) -> dict:
        return self.run(inputs)

    def run(self, inputs: Union[Mapping[str, np.ndarray], Sequence[Mapping[str, np.ndarray]]], out=None, *,
            timeout: Optional[float] = None):
        """Run one request (a dict of input name -> array) and return a dict of output name -> array.

        A list of requests (of any non-batch shapes) is grouped by shape, batched, run, and returned as a list in
        the caller's order. ``out``: a dict of output name -> array (or HostBuffer view) to write the results into.
        ``timeout``: seconds on the device (default: the model's request_timeout_s), else RequestTimeout.
        """
        if out is None and timeout is None:  # the compiled path first (it refuses when closed); None: the checks
            kind = type(inputs)                 # and paths below (no ABC checks before it: ~0.3 us a call)
            result = self._hot.run(inputs) if kind is dict else self._hot.run_list(inputs) if kind is list else None
            if result is not None:  # (run_list: a merged batch it knows)
                return result
        self._check_open()
        if (type(inputs) is dict or isinstance(inputs, Mapping)):
            if out is None:  # the Engine (the compiled path takes dicts only, above)
                return self.engine.run(inputs, None, timeout)
            names = {o.name for o in self.plan.outputs}
            for name in out:
                if name not in names:
                    raise GertError(f"out names '{name}', which is not a model output; outputs: "
                                    f"{[o.name for o in self.plan.outputs]}")
            return write_out(self.engine.run(inputs, out, timeout), out)
        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
            raise GertError(f"run: inputs must be a dict of input name -> array, or a list of such dicts; got "
                            f"{type(inputs).__name__}")
        if out is not None:
            raise GertError("run: out= is for a single request, not a list")
        return self.engine.run_many(list(inputs), timeout)  # (a list the compiled path knows returned above)

    def submit(self, inputs: Mapping[str, np.ndarray], *, timeout: Optional[float] = None) -> concurrent.futures.Future:
        """Run in the background; the Future resolves to the outputs dict (close() cancels the ones not started and
        wakes their waiters: gert/core/futures.py)."""
        self._check_open()
        return self._futures.submit(self.run, inputs, timeout=timeout)

    async def run_async(self, inputs: Mapping[str, np.ndarray]) -> dict:
        return await asyncio.wrap_future(self.submit(inputs))

    def validate(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Raise GertError (naming the input, the expected and the actual value) if run(inputs) would reject it."""
        self.engine.check(inputs)

    @contextlib.contextmanager
    def _counted(self):  # a batch or a warmup in flight: close() waits for it (_dispatch counts inline: hot path)
        with self._lock:
            self._check_open()
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                self._idle.notify_all()

    def _check_open(self) -> None:
        if self._closed:
            raise GertError("the model is closed")

    def _parts_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """Threads for the parts of split batches: apart from submit()'s pool, whose threads may be the ones
        waiting for the parts."""
        with self._lock:
            if getattr(self, "_parts", None) is None:
                self._parts = concurrent.futures.ThreadPoolExecutor(max_workers=len(self._workers),
                                                                    thread_name_prefix="gert-model-part")
            return self._parts

    def _dispatch(self, req: Request) -> dict:
        with self._lock:
            self._check_open()
            self._in_flight += 1
        try:
            usable = self._recovery.usable(self._workers)  # not the workers of a device under recovery
            if req.device is not None:  # the request's device tensors live there
                usable = [w for w in usable if w.device == req.device]
                if not usable:
                    raise GertError(f"device {req.device} has no usable stream (under recovery)")
            tr = _trace.active
            if tr is not None:
                t0 = time.perf_counter()
            w = self._queue.acquire(usable)  # the first stream to come free, in arrival order (gert/core/dispatch.py)
            if tr is not None:
                tr.span("queue", tr.thread_track(), t0, time.perf_counter(), args={"stream": w.index})
            try:
                with w.lock:
                    if self._closed:
                        raise GertError("the model was closed before this request started")
                    return self._recovery.run(w, req)
            finally:
                self._queue.release(w)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._idle.notify_all()

    def _dispatch_batch(self, pending: Pending, lead) -> dict:
        """Dynamic batching (gert/core/dynamic.py): ``pending`` queues with its batch key; the one that gets a stream
        runs ``lead(group, run)`` on it for the queued requests of its key (docs/architecture.md, dispatch)."""
        with self._counted():
            usable = self._recovery.usable(self._workers)
            if pending.device is not None:  # a sequence step: its state lives on that device
                usable = [w for w in usable if w.device == pending.device]
                if not usable:
                    raise GertError(f"device {pending.device} has no usable stream (under recovery)")
            tr = _trace.active
            if tr is not None:
                t0 = time.perf_counter()
            w, group = self._queue.acquire_batch(usable, pending, pending.key, pending.rows, pending.limit)
            if tr is not None:
                tr.span("queue", tr.thread_track(), t0, time.perf_counter(),
                        args={"stream": w.index} if w is not None else {"batched_by": "another request"})
            if w is None:
                return pending.result()  # another request's batch ran it
            try:
                if tr is not None:
                    t1 = time.perf_counter()
                until, enough = self.engine.gather_rule(group)  # max_queue_delay_ms / latency_slo_ms
                if until is not None:
                    self._queue.gather(w, group, pending.key, sum(p.rows for p in group), pending.limit, until,
                                       enough)
                if tr is not None:  # batch formation: which requests ride together, their rows
                    tr.span("batch", tr.stream_track(w), t1, time.perf_counter(),
                            args={"requests": len(group), "rows": [p.rows for p in group]})

                def run(req: Request) -> dict:
                    if self._closed:
                        raise GertError("the model was closed before this request started")
                    return self._recovery.run(w, req)

                with w.lock:
                    lead(group, run)
            except BaseException as e:  # noqa: BLE001 - each member's error (this request's too, raised below)
                for p in group:  # nobody the batch took is left waiting
                    if not p.done:
                        p.set_error(e)
            finally:
                self._queue.release(w)
            return pending.result()

    def run_batch(self, requests: list, *, timeout: Optional[float] = None) -> list:
        """Requests sharing their non-batch shapes, as one batch on the batch axis, run once (the merged batch is
        validated, not each request again), and split back into one result per request. The requests are not
        concatenated on the host: each one's rows are copied straight into the device buffer (gert.core.rows.Rows)."""
        self._check_open()
        return self.engine.run_batch(list(requests), timeout)

    def batch_key(self, inputs: Mapping[str, np.ndarray]) -> tuple:
        """Requests with equal keys can share one batch (run_batch): equal dtypes and non-batch shapes, equal values
        of the inputs without the batch axis."""
        return self.engine.batcher.key(inputs)

    # ---- stateful models (gert/sequence.py) ------------------------------------------------------------------------
    def sequence(self, initial_state: Optional[Mapping[str, np.ndarray]] = None) -> _sequence.Sequence:
        """A new sequence of a stateful model (loaded with ``state={...}``): its state lives in device memory between
        steps, zeros unless ``initial_state`` (state input name -> array) is given."""
        return self._stateful().create(initial_state)

    def step(self, items: Sequence, *, return_exceptions: bool = False) -> list:
        """One step of many sequences as one batch: ``[(seq, inputs), ...]`` -> their outputs, in order. States are
        gathered into the batch and scattered back on the device; one graph run per group of equal non-batch
        shapes (and equal values of inputs without the batch axis). A step is all-or-nothing per group: a group
        that fails leaves its sequences' states as they were. ``return_exceptions``: a failed item's result is its
        error (a bad item's too; the others still run) instead of raising the first one."""
        return self._stateful().step(list(items), return_exceptions)

    @property
    def step_inputs(self) -> list:
        """A stateful model's inputs that a step takes (its other inputs are the state, kept on the device)."""
        return list(self._stateful().step_inputs)

    @property
    def state(self) -> dict:
        """A stateful model's state input -> state output names ({} for a model loaded without state=)."""
        return {p.input.name: p.output.name for p in self._sequences.pairs} if self._sequences is not None else {}

    def _stateful(self) -> Sequences:
        self._check_open()
        if self._sequences is None:
            raise GertError("this model was loaded without state=...: give gert.load(..., state={'h': 'h_out'}) "
                            "to run sequences")
        return self._sequences

    def check_rows(self, rows: int = 3, seed: int = 0, sizes: Optional[Mapping[str, int]] = None) -> dict:
        """The row proof cross-checked (gert/core/row_check.py): ``rows`` random rows run together and each alone."""
        return check_rows(self.plan, self.run, rows, seed, sizes)

    # ---- lifecycle and stats -------------------------------------------------------------------------------------
    def warmup(self, sizes: Optional[Mapping[str, Sequence[int]]] = None, progress: bool = False) -> int:
        """Compile every declared gear combination on every stream; returns how many graphs were compiled. An exact
        or auto dim without gears takes the sizes ``sizes[dim]``; with neither, only the auto policy's dynamic-shape
        graph is compiled. ``progress=True`` shows a bar on stderr (tqdm when installed, else a line per graph)."""
        fallback = self._tiers.fallback_key if self._tiers is not None else None
        keys = warmup_keys(self.plan, sizes, fallback)  # gert/core/shapes.py
        with self._counted():  # close() waits for the graph being compiled, then warmup stops
            return _compile_all(self._workers, keys, progress, lambda: self._closed)

    def stats(self) -> Stats:
        """Per stream: effective core limits, requests, busy seconds, compiles, requests served by static / dynamic
        graphs, background and request-path compiles; per gear: hits and padding ratio; device memory; with the
        auto policy, ``tiers``: static shapes, pending compiles, evictions, rejections, failed compiles. A dict (a
        gert.tools.display.Stats, which also shows as tables in Jupyter and IPython)."""
        from gert.tools.stats import collect_stats  # a tool: imported when asked for

        self._hot.flush()  # the compiled hot path's runs, counted in C
        out = collect_stats(self._workers, self._recovery.stats, self._tiers)
        out["hot_path"] = {"enabled": self._hot.enabled, "hits": self._hot.hits, "misses": self._hot.misses,
                           "prepared": self._hot.size}
        out["batching"] = dict(self.engine.batching_stats.snapshot(), enabled=bool(self.engine.batch_limit),
                               max_batch=self.engine.batch_limit, queued=self._queue.waiting())
        return out

    def close(self, timeout: float = 60.0) -> None:
        """Stop taking requests; queued submits are cancelled; running requests, steps and warmup complete (warmup
        stops after the graph it is compiling) within ``timeout`` seconds, after which their streams are aborted.
        Then every stream and sequence is released by its owner: here, or by the request still holding it when it
        lets go (a stream is never freed under a running request). Background compiles are not waited for."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._hot.close()  # no request starts on the compiled path; those running are waited for below
        self._queue.close()  # requests waiting for a stream fail; running ones complete
        self._futures.close()  # submits not started: cancelled, their waiters woken
        if getattr(self, "_parts", None) is not None:
            self._parts.shutdown(wait=False, cancel_futures=True)
        if self._tiers is not None:
            self._tiers.close()  # a compile in flight finishes in its retired Session, which it then closes
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._in_flight or self._hot.in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
            stuck = self._in_flight > 0 or self._hot.in_flight > 0
            busy = self._queue.busy()
        self._recovery.close()  # from here a failed request is this close's doing, never a device failure
        if stuck:
            self._recovery.abort_streams(busy)  # a stuck stream must not keep close() past its timeout
        if self._sequences is not None:  # after the steps: a stuck step does not hold close() on its sequence
            self._sequences.close(max(0.0, deadline - time.monotonic()))
        for w in self._workers:
            w.lock.run_or_hand_over(lambda w=w: _close_worker(w), max(0.0, deadline - time.monotonic()))
        self._workers = []

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return _display().model_repr(self)

    def _repr_pretty_(self, p, cycle: bool) -> None:  # IPython
        _display().pretty_model(self, p, cycle)

    def _repr_html_(self) -> str:  # Jupyter
        return _display().model_html(self)


def _compile_all(workers: list, keys: list, progress: bool, closed) -> int:
    """Model.warmup's compiles: each key's graph on every stream that has none (``closed()`` stops it); how many."""
    from gert.tools.progress import Progress  # a tool: not on the runtime's import path

    compiled = 0
    with Progress(len(keys) * len(workers), "gert warmup", enabled=progress) as bar:
        for key in keys:
            label = ",".join(f"{n}={v}" for n, v in key) or "static"
            for w in workers:
                with w.lock:
                    if closed():
                        raise GertError(f"the model was closed during warmup ({compiled} graphs compiled)")
                    if not w.has(key):
                        w.compile(key)
                        compiled += 1
                bar.step(f"stream {w.index}: {label}")
    return compiled


def _hot_path(model: Model, request_timeout_s: Optional[float], split_batch: bool,
              batching: Optional[BatchingConfig]) -> HotPath:
    """The Model's compiled hot path, wired to its queue, recovery, close() and stats; off where every request needs
    the Python path: a model-wide timeout, split_batch, dynamic batching that waits for company (max_queue_delay_ms,
    latency_slo_ms), or GERT_HOT_PATH=0 in the environment."""
    engine = model.engine

    def failed(w: Worker, e: BaseException) -> None:
        model._recovery.failed(w, e)

    def idle() -> None:
        with model._lock:
            model._idle.notify_all()

    def count(prepared, runs: int, lone: int, seconds: float) -> None:
        prepared.worker.count_fast(prepared.label, runs, runs * prepared.real_elements,
                                   runs * prepared.padded_elements, seconds)
        if prepared.batched and lone:  # each a lone request the dynamic batcher would have run as its batch of one
            engine.batching_stats.record_alone(lone, prepared.label)

    hot = HotPath(engine.validator.names, model._queue, failed, idle, _trace, count)
    hot.batch_limit = engine.batch_limit
    batcher = engine.batcher  # run(list) merges on axis 0 where every input and output carries the batch there
    hot.lists = batcher.enabled and all(a == 0 for a in batcher.in_axes.values()) \
        and all(a == 0 for a in batcher.out_axes.values())
    waits = batching is not None and bool(batching.max_queue_delay_ms or batching.latency_slo_ms)
    hot.enabled = request_timeout_s is None and not split_batch and not (waits and engine.batch_limit) \
        and os.environ.get("GERT_HOT_PATH", "1") != "0"  # GERT_HOT_PATH=0: every request on the Python path
    model._recovery.listeners.append(lambda started: hot.suspend() if started else hot.resume())
    for w in model._workers:
        w.hot = hot
    return hot


def _close_worker(w: Worker) -> None:
    try:
        w.close()
    except GertError:
        pass  # a failed device's last error: the worker released its resources all the same


def load(model: ModelSource, **kwargs) -> Model:
    """Load an ONNX model (path or bytes) onto the device(s); see gert.Model for the keyword arguments."""
    return Model(model, **kwargs)
