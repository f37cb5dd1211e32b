"""gert.Model: an ONNX model on N streams per device, arrays in, arrays out.

model = gert.load("rec.onnx", streams=2, gears={"batch": [1, 4, 8]})
out = model.run({"x": x})               # dict of output name -> numpy array
fut = model.submit({"x": x})            # concurrent.futures.Future
out = await model.run_async({"x": x})
"""

from __future__ import annotations

import concurrent.futures
import os
import warnings
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

import numpy as np

from gert import _cann
from gert.core.engine import Engine, EngineConfig, write_out
from gert._cann import Graph, ge_initialize
from gert.core.compile_cache import CACHE_DIR_OPTION, CompileCache
from gert.core.futures import FutureRunner
from gert.core.pool import PoolConfig, StreamPool
from gert.core.stream_layout import default_streams
from gert.core.resolve import key_label
from gert.core.row_check import check_rows
from gert.core.load_config import LoadConfig
from gert.cpu_model import CpuModel
from gert.errors import GertError, ModelClosed, refused_by_ge_parser
from gert.preview import cann_ops as preview_ops, precision as preview_precision
from gert import sequence as _sequence
from gert.sequence import Sequences
from gert.core import load_analysis
from gert.core.shapes import ShapePlan, warmup_keys

if TYPE_CHECKING:
    from gert.tools.display import Stats

ModelSource = Union[str, bytes, os.PathLike]


def load_config(config: Optional[LoadConfig], options: Mapping[str, Any]) -> LoadConfig:
    """The LoadConfig of gert.load(model, config=..., **options): the keywords over ``config`` (or the defaults)."""
    if config is None:
        return LoadConfig.from_kwargs(**options)
    if not isinstance(config, LoadConfig):
        raise GertError(f"config must be a gert.LoadConfig, got {type(config).__name__}")
    return config.replace(**options) if options else config


def _pool_config(cfg: LoadConfig, devices: tuple) -> PoolConfig:
    """The stream pool's part of the load config (gert/core/pool.py); streams not named: the default layout for the
    devices' cube cores (gert/core/stream_layout.py)."""
    streams = cfg.streams
    if streams is None:
        streams = default_streams(min(_cann.get_device_info(d, _cann.DEV_ATTR_CUBE_CORE_NUM) for d in devices))
    return PoolConfig(
        devices,
        streams,
        cfg.cube_cores,
        cfg.vector_cores,
        cfg.max_exact_graphs,
        cfg.request_timeout_s,
        cfg.hot_after,
        cfg.hot_window,
        cfg.compile_share,
        cfg.host_memory,
    )


def _split_options(options: Optional[Mapping[str, str]]) -> tuple:
    """GE options (checked by LoadConfig) by level: "global.K" -> GEInitialize, "graph.K" -> AddGraph, anything
    else -> Session."""
    glob, sess, graph = {}, {}, {}
    for k, v in (options or {}).items():
        if k.startswith("global."):
            glob[k[len("global.") :]] = str(v)
        elif k.startswith("graph."):
            graph[k[len("graph.") :]] = str(v)
        elif k.startswith("session."):
            sess[k[len("session.") :]] = str(v)
        else:
            sess[k] = str(v)
    return glob, sess, graph


def _check_cores(device: int, value: Optional[int], attr: int, what: str) -> None:
    if value is None:
        return
    have = _cann.get_device_info(device, attr)
    if value > have:
        raise GertError(f"{what}={value} is out of range: device {device} has {have} {what.split('_')[0]} cores")


def _check_devices(devices: tuple, cube_cores: Optional[int], vector_cores: Optional[int]) -> None:
    """GertError unless the devices exist on this backend and have the cores asked for (LoadConfig checked the
    values themselves: what needs the device is checked here)."""
    n = _cann.device_count()
    for d in devices:
        if d >= n:
            raise GertError(f"device {d} does not exist; this backend has {n} device(s)")
    for d in devices:
        _check_cores(d, cube_cores, _cann.DEV_ATTR_CUBE_CORE_NUM, "cube_cores")
        _check_cores(d, vector_cores, _cann.DEV_ATTR_VECTOR_CORE_NUM, "vector_cores")


def _plan_args(cfg: LoadConfig) -> load_analysis.PlanArgs:
    """The load options the shape plan is computed from."""
    return load_analysis.PlanArgs(
        cfg.gears,
        cfg.shape_policy,
        cfg.pad_value,
        cfg.max_batch,
        cfg.output_dims,
        cfg.batch_dim,
        cfg.state,
        cfg.rows_independent,
    )


def _read_model(model: ModelSource) -> tuple:
    """(the ONNX model's bytes, the model file's directory or None): ``model`` is a path or the bytes themselves. The
    directory is where its external data resolves (gert/core/external_data.py)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), None
    with open(model, "rb") as f:
        return f.read(), os.path.dirname(os.path.realpath(os.fspath(model)))  # = external_data.model_dir


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
            warnings.warn(
                "gert.load: the model keeps its weights in external data files; GE's compile cache is not "
                "used for it (cache_dir ignored)",
                UserWarning,
                stacklevel=4,
            )
        return None
    return CompileCache.open(cache_dir, data, glob, cache_mode, trust_foreign)


def _display():
    """gert/tools/display.py (how a Model shows), imported when a Model is shown: tools are not on the runtime's
    import path."""
    from gert.tools import display

    return display


class Model:
    """A loaded model. Any number of Python threads may call run() / submit() at once."""

    def __init__(self, model: ModelSource, *, config: Optional[LoadConfig] = None, **options: Any):
        """Load ``model`` (a path or the ONNX bytes) with ``config`` and / or the options as keyword arguments: each
        a field of gert.LoadConfig (gert/core/load_config.py: devices, streams, cube_cores, vector_cores, gears,
        shape_policy, pad_value, max_batch, options, output_dims, max_exact_graphs, split_batch, request_timeout_s,
        hot_after, hot_window, compile_share, state, batch_dim, sequence_wait_s, cache_dir, cache_mode,
        trust_foreign_entries, cann_ops, precision_mode, keep_fp32, dynamic_batching, host_memory,
        rows_independent; fallback is gert.load's), which checks them; keywords override ``config``'s fields."""
        cfg = load_config(config, options)
        self.load_config = cfg  # the options this model was loaded with
        data, model_dir = _read_model(model)  # model_dir: where external data resolves (None for bytes)
        devices = cfg.devices
        _check_devices(devices, cfg.cube_cores, cfg.vector_cores)
        self.cann_report, self._graph = _parse(data, cfg.cann_ops, model if model_dir else None)  # GE's refusals first
        # the model's I/O (gert/core/onnx_io.py) and its shape plan, here or in a child process (load_analysis)
        analysis = load_analysis.analyse(data, model_dir, _plan_args(cfg), cfg.load_analysis)
        described = analysis.described
        self.value_dependent = described.value_dependent
        self.plan: ShapePlan = analysis.plan
        # stateful models: state input -> output pairs, and the device-resident sequences (gert/sequence.py)
        self._sequences = Sequences(self, cfg.state, cfg.sequence_wait_s, devices) if cfg.state else None
        glob, sess, graph_opts = _split_options(cfg.options)
        # GE's precision mode (emulated by the host NPU's provider: gert/preview/precision.py)
        self.precision, graph_opts = preview_precision.model_settings(
            cfg.precision_mode, cfg.keep_fp32, sess, graph_opts
        )
        ge_initialize(glob)
        # GE's compile cache (gert/core/compile_cache.py): cache_dir, else GERT_CACHE_DIR; cache_mode, else GERT_CACHE_MODE
        self.compile_cache = _open_cache(
            cfg.cache_dir, data, glob, cfg.cache_mode, cfg.trust_foreign_entries, described.external
        )
        if self.compile_cache is not None:
            sess = {**sess, CACHE_DIR_OPTION: self.compile_cache.directory}
        # the streams (gert/core/pool.py) and the request pipeline over them (gert/core/engine.py)
        self.pool = StreamPool(self.plan, self._graph, _pool_config(cfg, devices), sess, graph_opts, self.compile_cache)
        self.engine = Engine(self.plan, self.pool, EngineConfig(cfg.split_batch, cfg.batching))
        self._hot = self.engine.hot  # the compiled hot path (gert/core/_hotpath.pyx), tried first by run()
        self._direct = self.engine.direct  # (not with split_batch: a batch is spread over idle streams first)
        # submit()'s threads: with dynamic batching, enough for a full batch to queue behind every stream
        n = self.pool.count
        self._futures = FutureRunner(max(4, 2 * n, self.engine.batch_limit + n), "gert-model")

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
        return self.pool.count

    @property
    def closed(self) -> bool:
        return self.pool.closed

    # ---- running ----------------------------------------------------------------------------------------------
    def __call__(self, **inputs) -> dict:
        return self.run(inputs)

    def run_compiled(self, inputs: object) -> Optional[dict]:
        """Outputs by the compiled lane alone if this signature ran (validated) before, else None, nothing run."""
        return self._hot.run(inputs) if self._direct and type(inputs) is dict else None

    def run(
        self,
        inputs: Union[Mapping[str, np.ndarray], Sequence[Mapping[str, np.ndarray]]],
        out=None,
        *,
        timeout: Optional[float] = None,
    ):
        """Run one request (a dict of input name -> array) and return a dict of output name -> array.

        A list of requests (of any non-batch shapes) is grouped by shape, batched, run, and returned as a list in
        the caller's order. ``out``: a dict of output name -> array (or HostBuffer view) to write the results into.
        ``timeout``: seconds on the device (default: the model's request_timeout_s), else RequestTimeout.
        """
        # the compiled path first (it refuses when closed); None: the checks and paths below (no ABC checks before
        # it: ~0.3 us a call)
        if out is None and timeout is None and self._direct:
            kind = type(inputs)
            result = self._hot.run(inputs) if kind is dict else self._hot.run_list(inputs) if kind is list else None
            if result is not None:  # (run_list: a merged batch it knows)
                return result
        self.pool.check_open()
        if type(inputs) is dict or isinstance(inputs, Mapping):
            if out is None:  # the Engine (the compiled path takes dicts only, above)
                return self.engine.run(inputs, None, timeout)
            names = {o.name for o in self.plan.outputs}
            for name in out:
                if name not in names:
                    raise GertError(
                        f"out names '{name}', which is not a model output; outputs: "
                        f"{[o.name for o in self.plan.outputs]}"
                    )
            return write_out(self.engine.run(inputs, out, timeout), out)
        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
            raise GertError(
                f"run: inputs must be a dict of input name -> array, or a list of such dicts; got "
                f"{type(inputs).__name__}"
            )
        if out is not None:
            raise GertError("run: out= is for a single request, not a list")
        return self.engine.run_many(list(inputs), timeout)  # (a list the compiled path knows returned above)

    def submit(self, inputs: Mapping[str, np.ndarray], *, timeout: Optional[float] = None) -> concurrent.futures.Future:
        """Run in the background; the Future resolves to the outputs dict (close() cancels the ones not started and
        wakes their waiters: gert/core/futures.py)."""
        self.pool.check_open()
        return self._futures.submit(self.run, inputs, timeout=timeout)

    async def run_async(self, inputs: Mapping[str, np.ndarray]) -> dict:
        import asyncio  # here, not at import: 3-4 MB in every Triton stub that never awaits

        return await asyncio.wrap_future(self.submit(inputs))

    def validate(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Raise GertError (naming the input, the expected and the actual value) if run(inputs) would reject it."""
        self.engine.check(inputs)

    def run_batch(self, requests: list, *, timeout: Optional[float] = None) -> list:
        """Requests sharing their non-batch shapes, as one batch on the batch axis, run once (the merged batch is
        validated, not each request again), and split back into one result per request. The requests are not
        concatenated on the host: each one's rows are copied straight into the device buffer (gert.core.rows.Rows)."""
        self.pool.check_open()
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
        self.pool.check_open()
        if self._sequences is None:
            raise GertError(
                "this model was loaded without state=...: give gert.load(..., state={'h': 'h_out'}) to run sequences"
            )
        return self._sequences

    def check_rows(self, rows: int = 3, seed: int = 0, sizes: Optional[Mapping[str, int]] = None) -> dict:
        """The row proof cross-checked (gert/core/row_check.py): ``rows`` random rows run together and each alone."""
        return check_rows(self.plan, self.run, rows, seed, sizes)

    # ---- lifecycle and stats -------------------------------------------------------------------------------------
    def warmup(self, sizes: Optional[Mapping[str, Sequence[int]]] = None, progress: bool = False) -> int:
        """Compile every declared gear combination on every stream; returns how many graphs were compiled. An exact
        or auto dim without gears takes the sizes ``sizes[dim]``; with neither, only the auto policy's dynamic-shape
        graph is compiled. ``progress=True`` shows a bar on stderr (tqdm when installed, else a line per graph)."""
        tiers = self.pool.tiers
        keys = warmup_keys(self.plan, sizes, tiers.fallback_key if tiers is not None else None)  # gert/core/shapes.py
        with self.pool.counted():  # close() waits for the graph being compiled, then warmup stops
            return _compile_all(self.pool.workers, keys, progress, lambda: self.pool.closed)

    def stats(self) -> Stats:
        """Per stream: effective core limits, requests, busy seconds, compiles, requests served by static / dynamic
        graphs, background and request-path compiles; per gear: hits and padding ratio; device memory; with the
        auto policy, ``tiers``: static shapes, pending compiles, evictions, rejections, failed compiles;
        ``split_batch``: merged batches run split over the streams or whole, as measured faster. A dict (a
        gert.tools.display.Stats, which also shows as tables in Jupyter and IPython)."""
        from gert.tools.stats import collect_stats  # a tool: imported when asked for

        self._hot.flush()  # the compiled hot path's runs, counted in C
        out = collect_stats(self.pool.workers, self.pool.recovery.stats, self.pool.tiers)
        out["hot_path"] = {
            "enabled": self._hot.enabled,
            "hits": self._hot.hits,
            "misses": self._hot.misses,
            "prepared": self._hot.size,
        }
        out["batching"] = dict(
            self.engine.batching_stats.snapshot(),
            enabled=bool(self.engine.batch_limit),
            max_batch=self.engine.batch_limit,
            queued=self.pool.queue.waiting(),
        )
        # split_batch: merged batches run split over the idle streams or whole (gert/core/split_choice.py)
        out["split_batch"] = dict(self.engine.splits.snapshot(), enabled=self.engine.split_batch)
        return out

    def close(self, timeout: float = 60.0) -> None:
        """Stop taking requests; queued submits are cancelled; running requests, steps and warmup complete (warmup
        stops after the graph it is compiling) within ``timeout`` seconds, after which their streams are aborted.
        Then every stream and sequence is released by its owner: here, or by the request still holding it when it
        lets go (a stream is never freed under a running request). Background compiles are not waited for."""
        self.pool.close(
            timeout,
            stop=(self._futures.close,),  # submits not started: cancelled, waiters woken
            drained=self._sequences.close if self._sequences is not None else None,
        )

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
            label = key_label(key)
            for w in workers:
                with w.lock:
                    if closed():
                        raise ModelClosed(f"the model was closed during warmup ({compiled} graphs compiled)")
                    if not w.has(key):
                        w.compile(key)
                        compiled += 1
                bar.step(f"stream {w.index}: {label}")
    return compiled


def load(model: ModelSource, *, config: Optional[LoadConfig] = None, **options: Any) -> Model:
    """Load an ONNX model (path or bytes) onto the device(s); the options are gert.LoadConfig's fields (see
    gert.Model), as keywords or as ``config``. ``fallback="cpu"``: a model GE's parser refuses runs on ONNX
    Runtime's CPU provider instead, warned (gert/cpu_model.py); never without being asked."""
    cfg = load_config(config, options)
    if cfg.fallback is None:
        return Model(model, config=cfg)
    try:
        return Model(model, config=cfg)
    except GertError as e:
        if not refused_by_ge_parser(e):
            raise
        return CpuModel(model, e, cfg.streams or 1)  # type: ignore[return-value]
