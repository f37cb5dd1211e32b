"""The Triton Python-backend model: ``from gert_triton import TritonPythonModel`` is a complete model.py.

Everything else comes from config.pbtxt ``parameters`` (see gert_triton.config) and the ONNX file beside it.
execute(): validate each request alone (a bad one gets its own INVALID_ARG error), group the good ones by
non-batch shape, concatenate each group on the batch axis, run it through gert.Model, split, and answer every
request with the outputs it asked for.
"""

from __future__ import annotations

import json
import time
from typing import Optional

import gert
from gert import _cann
from gert.errors import GertError
from gert_triton.cancellation import AskPolicy, Cancellation, Cancelled, cancelled_response
from gert_triton.config import (
    ConfigError,
    cache_path,
    find_onnx_file,
    instance_count,
    parse_parameters,
    served_version,
    stream_layout,
    trace_file_path,
)
from gert_triton.error_codes import error_response
from gert_triton.gears import GearSplitter
from gert_triton.layout import Layout
from gert_triton.metrics import Publisher, StatsChanges
from gert_triton.stub_malloc import fix_mmap_threshold, limit_arenas
from gert_triton.model_config import (
    DEFAULT_MAX_BATCH,
    auto_complete,
    check_config,
    describe,
    io_config,  # noqa: F401
    onnx_io,
    only_output,
    squeezed_inputs,
)
from gert_triton.tensors import as_array, to_tensor
from gert_triton.tracing import AdapterTrace, trace_path


def _pb_utils():
    import triton_python_backend_utils as pb_utils  # exists only inside Triton's Python stub (or a test fake)

    return pb_utils


def _device_cores(devices) -> tuple:
    """(cube, vector) core counts of the device with the fewest; (1, 1) if none exists (gert.load says which)."""
    have = [d for d in devices if 0 <= d < _cann.device_count()]
    if not have:
        return 1, 1
    return (
        min(_cann.get_device_info(d, _cann.DEV_ATTR_CUBE_CORE_NUM) for d in have),
        min(_cann.get_device_info(d, _cann.DEV_ATTR_VECTOR_CORE_NUM) for d in have),
    )


def _log_info(message: str) -> None:
    """To Triton's log through pb_utils.Logger (absent in old stubs and some fakes: then nowhere)."""
    try:
        _pb_utils().Logger.log_info(message)
    except (ImportError, AttributeError):
        pass


class TritonPythonModel:
    """Serve an ONNX model on gert. Subclasses may override preprocess() and postprocess()."""

    trace = None  # gert_triton.tracing.AdapterTrace while tracing (parameter trace_file, GERT_TRACE)
    close_timeout_s = 8.0  # finalize: running requests' bound (Triton's exit timeout covers every stub's unload)

    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        """Fill what config.pbtxt leaves out from the ONNX file of the version Triton serves (gert_triton.model_config
        decides the entries, as `gert repo init` and the load-time check do)."""
        pb_utils = _pb_utils()
        cfg = auto_complete_model_config.as_dict()
        params = parse_parameters(cfg.get("parameters", {}))
        model_dir, version = served_version(pb_utils.get_model_dir(), cfg.get("version_policy"))
        path = find_onnx_file(model_dir, version, params.onnx_file)
        spec = describe(onnx_io(path, params.load_analysis), params.get("state"), params.get("batch_dim"))
        top = params.get("max_batch") or max(params.get("gears", {}).get("batch", [DEFAULT_MAX_BATCH]))
        auto_complete(auto_complete_model_config, spec, top)
        return auto_complete_model_config

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def initialize(self, args: dict) -> None:
        limit_arenas()  # before the load starts the threads that allocate
        fix_mmap_threshold()  # before the load frees the model's bytes (gert_triton/stub_malloc.py)
        self.config = json.loads(args["model_config"])
        self.name = args.get("model_name", self.config.get("name", "model"))
        params = parse_parameters(self.config.get("parameters", {}))
        path = find_onnx_file(args["model_repository"], args.get("model_version", "1"), params.onnx_file)
        self.max_batch_size = int(self.config.get("max_batch_size", 0))
        gears = {k: list(v) for k, v in params.get("gears", {}).items()}
        max_batch = params.get("max_batch")
        if self.max_batch_size > 0:
            top = max(gears.get("batch", [])) if "batch" in gears else None
            if top is not None and top > self.max_batch_size:
                raise ConfigError(f"parameter 'gears': batch gear {top} is above max_batch_size {self.max_batch_size}")
            if max_batch is None and "batch" not in gears:
                max_batch = self.max_batch_size
        spec = describe(onnx_io(path, params.load_analysis), params.get("state"), params.get("batch_dim"))
        check_config(
            self.config,
            spec,
            inputs=type(self).preprocess is TritonPythonModel.preprocess,
            outputs=type(self).postprocess is TritonPythonModel.postprocess,
        )
        device = int(args.get("model_instance_device_id", "0") or 0)
        devices = params.get("devices") or (device,)
        batching = self.max_batch_size > 0 and spec.batchable
        self.layout = stream_layout(
            params, batching, lambda: _device_cores(devices), instances=instance_count(self.config)
        )
        cache = cache_path(params, args["model_repository"])  # else gert.load takes GERT_CACHE_DIR, if set
        trace_file = trace_file_path(params, args["model_repository"])  # checked before the load compiles
        cache_kwargs: dict = {"cache_dir": cache} if cache else {}
        split_batch = params.get("split_batch", self.layout.streams * len(devices) > 1)
        self.model = gert.load(
            path,
            config=params.load_config(  # the config's options, and what gert_triton decides over them
                devices=tuple(devices),
                streams=self.layout.streams,
                cube_cores=self.layout.cube_cores,
                vector_cores=self.layout.vector_cores,
                gears=gears or None,
                max_batch=max_batch,
                split_batch=split_batch,
                load_analysis=params.load_analysis,
                **cache_kwargs,
            ),
        )
        self.triton_layout = Layout(self.model.plan, self.max_batch_size > 0, squeezed_inputs(self.config, spec))
        self.stateful = None
        self.ask_policy = AskPolicy(params.check_cancelled)  # whether execute() asks is_cancelled(), as measured
        try:
            # a merged batch of a size that is not a batch gear runs as gear-sized pieces (gert_triton.gears); never
            # for a model whose batch may not be split (batcher.enabled: each request then runs alone, as it is)
            self._gears = (
                GearSplitter.for_plan(self.model.plan)
                if self.max_batch_size > 0 and self.model.engine.batcher.enabled
                else GearSplitter()
            )
            self._gears.check(self.max_batch_size)
            if params.get("state"):
                from gert_triton.sequences import SequenceServer

                self.stateful = SequenceServer(
                    self.model,
                    self.config,
                    self.name,
                    self.triton_layout,
                    on_change=self._update_metrics,
                    check_cancelled=params.check_cancelled != "false",
                )
            compiled = self.model.warmup(self._config_fixed_sizes()) if params.warmup else 0
        except BaseException:  # the load fails: release the streams, sessions and device memory it took
            if self.stateful is not None:
                self.stateful.close()
            self.model.close()
            self.model = None
            raise
        _log_info(
            f"gert_triton '{self.name}': {self.layout.streams} stream(s) per device on {list(devices)}, "
            f"cube_cores={self.layout.cube_cores or 'all'}, vector_cores={self.layout.vector_cores or 'all'}"
            + (" (default layout; set streams / cube_cores to choose)" if self.layout.auto else "")
            + f"; {compiled} graph(s) compiled at load"
            + (
                f" ({self.model.stats()['cache_hits']} from the compile cache {self.model.compile_cache.directory})"
                if self.model.compile_cache
                else ""
            )
        )
        self.batching = self.max_batch_size > 0 and self.model.plan.has_batch
        self.sequences = "sequence_batching" in self.config
        self._wanted = only_output(self.config)  # a config of one output: every request asks for it
        self._init_metrics(
            params.metrics_interval_ms, args.get("model_version", ""), args.get("model_instance_name", "")
        )
        path = trace_path(trace_file, args["model_repository"], self.name, args.get("model_instance_name", ""))
        self.trace = AdapterTrace(path, self.name) if path else None  # gert_triton/tracing.py

    def _config_fixed_sizes(self) -> dict:
        """Sizes of the model's symbolic dims that config.pbtxt fixes (Triton rejects requests with other sizes),
        so that warmup can compile them too. Skipped when a subclass's preprocess may change the shapes."""
        if type(self).preprocess is not TritonPythonModel.preprocess:
            return {}
        axes = self.model.plan.input_axes
        sizes: dict = {}
        for entry in self.config.get("input", []):
            if (entry.get("reshape") or {}).get("shape"):
                continue
            for i, d in enumerate(entry.get("dims") or []):
                dim = axes.get((entry.get("name"), self.triton_layout.model_axis(entry.get("name"), i)))
                if dim is not None and int(d) >= 0:
                    sizes.setdefault(dim, set()).add(int(d))
        return {k: sorted(v) for k, v in sizes.items()}

    def finalize(self) -> None:
        """Release the trace, sequences, metrics thread, streams and device memory, in a bounded time whatever
        fails on the way: Triton unloads every model within its exit timeout, and a stop that overruns it exits 1
        (and can abort tritonserver on its way out: the notes of issue 43). Requests still running get
        ``close_timeout_s``, then their streams are aborted (gert.Model.close)."""
        started = time.perf_counter()
        try:
            if getattr(self, "trace", None) is not None:
                trace, self.trace = self.trace, None
                _log_info(f"gert_triton '{self.name}': trace written to {trace.close()}")
            if getattr(self, "stateful", None) is not None:
                stateful, self.stateful = self.stateful, None
                stateful.close()
            if getattr(self, "metrics", None) is not None:  # publishes what is left, from the model's statistics
                metrics, self.metrics = self.metrics, None
                metrics.close(timeout=self.close_timeout_s / 4)
        finally:
            model = getattr(self, "model", None)
            if model is not None:
                model.close(timeout=self.close_timeout_s)
                _log_info(
                    f"gert_triton '{getattr(self, 'name', '?')}': finalized in {time.perf_counter() - started:.2f} s"
                )

    # ---- hooks for subclasses --------------------------------------------------------------------------------
    def preprocess(self, inputs: dict) -> dict:
        """Per request, before batching: dict of input name -> array. Default: unchanged."""
        return inputs

    def postprocess(self, outputs: dict) -> dict:
        """Per request, after splitting: dict of output name -> array. Default: unchanged."""
        return outputs

    # ---- execute ---------------------------------------------------------------------------------------------
    def execute(self, requests: list) -> list:
        pb_utils = _pb_utils()
        if self.stateful is not None:  # one device-resident gert.Sequence per correlation id
            responses = self.stateful.execute(requests, pb_utils)
            self._update_metrics()
            return responses
        responses: list = [None] * len(requests)
        started = time.perf_counter() if self.trace is not None else None
        ready = []  # (index, inputs, requested output names)
        # a cancelled request is never run, whichever batcher handed it over: each is asked once, right before its
        # batch runs (gert_triton/cancellation.py)
        cancel = Cancellation(requests, policy=self.ask_policy)
        for i, request in enumerate(requests):
            try:
                if not self.sequences:
                    _check_no_sequence(request, self.name)
                inputs = {}  # a missing one is named by the model's validator (gert/core/validate.py)
                for t in self.model.inputs:
                    tensor = pb_utils.get_input_tensor_by_name(request, t.name)
                    if tensor is not None:
                        inputs[t.name] = self.triton_layout.to_model(t.name, as_array(tensor))
                inputs = self.preprocess(inputs)
                # validated here, once: (arrays, sizes) run as they are (gert.core.engine.Engine.run_checked)
                ready.append((i, self.model.engine.check(inputs), self._wanted or request.requested_output_names()))
            except Exception as e:  # this request alone is bad
                responses[i] = error_response(pb_utils, e, checking=True)
        # grouped by the model's batch key (gert/core/batching.py), each group one batch through the model's Engine;
        # a merged size that is no gear of a non-pad batch policy runs as gear-sized pieces (gert_triton/gears.py); a
        # device fault of a group is retried request by request, so only a request that fails alone fails
        if self.trace is not None:  # batch formation: which requests ride together (the Engine groups them alike)
            batcher = self.model.engine.batcher
            for group in batcher.group(ready, lambda item: batcher.key(item[1][0])):
                self.trace.batch([requests[i] for i, _, _ in group], [x for _, (x, _), _ in group], batcher.rows)
        index = {id(checked): i for i, checked, _ in ready}  # run_groups hands each request's own pair to run_group
        engine = self.model.engine
        results = engine.run_groups(
            [checked for _, checked, _ in ready],
            lambda batch: cancel.run_live(
                batch, lambda live: self._gears.run_batch(engine, live), lambda checked: index.get(id(checked))
            ),
            return_exceptions=True,
        )
        for (i, _, wanted), out in zip(ready, results):
            if isinstance(out, Cancelled):  # cancelled before its batch ran
                responses[i] = cancelled_response(pb_utils)
                continue
            if isinstance(out, BaseException):  # gert_triton.error_codes says which code
                responses[i] = error_response(pb_utils, out)
                continue
            try:
                out = self.postprocess(out)
                tensors = [
                    to_tensor(pb_utils, name, self.triton_layout.to_triton(name, arr))
                    for name, arr in out.items()
                    if not wanted or name in wanted
                ]
                responses[i] = pb_utils.InferenceResponse(output_tensors=tensors)
            except Exception as e:  # noqa: BLE001
                responses[i] = error_response(pb_utils, e)
        if self.trace is not None:
            self.trace.execute_done(started, requests)
        self._update_metrics()
        return responses

    # ---- metrics ---------------------------------------------------------------------------------------------
    def _init_metrics(self, interval_ms: int, version: str = "", instance: str = "") -> None:
        declared = {name: frozenset(str(g) for g in dim.gears) for name, dim in self.model.plan.dims.items()}
        self._stats_changes = StatsChanges(declared)  # bounded gear labels: declared gears, else "dynamic"
        try:
            self.metrics: Optional[Publisher] = Publisher(
                _pb_utils(),
                self.name,
                self._metric_changes,
                interval=interval_ms / 1000,
                version=version,
                instance=instance,
            )
        except (ImportError, AttributeError):  # a stub without custom metrics
            self.metrics = None

    def _update_metrics(self) -> None:
        """Once per batch: tell the publisher there is something new (its thread collects and publishes it)."""
        if getattr(self, "metrics", None) is not None:
            self.metrics.notify()

    def _metric_changes(self) -> list:
        """What gert.Model counted since the last call, as metric changes (called by the publisher's thread)."""
        asks = self.ask_policy
        return self._stats_changes(
            self.model.stats(),
            self.stateful.active if self.stateful is not None else None,
            {"asked": asks.asked, "skipped": asks.skipped},
        )


def _check_no_sequence(request, model: str) -> None:
    """A model without sequence batching keeps no state: a sequence id or start/end flag means the client expects
    state that is not there, so the request is refused (Triton itself passes them through)."""
    cid = getattr(request, "correlation_id", lambda: 0)()
    flags = getattr(request, "flags", lambda: 0)()
    if cid not in (0, "", None) or flags & _SEQUENCE_FLAGS:
        raise GertError(
            f"model '{model}' has no sequence batching, but the request carries "
            f"sequence_id={cid!r}, sequence_start={bool(flags & 1)}, sequence_end={bool(flags & 2)}; "
            f"send it without them"
        )


_SEQUENCE_FLAGS = 3  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START | TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
