"""The Triton Python-backend model: ``from gert_triton import TritonPythonModel`` is a complete model.py.

Everything else comes from config.pbtxt ``parameters`` (see gert_triton.config) and the ONNX file beside it.
execute(): validate each request alone (a bad one gets its own INVALID_ARG error), group the good ones by
non-batch shape, concatenate each group on the batch axis, run it through gert.Model, split, and answer every
request with the outputs it asked for.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

import gert
from gert import _cann
from gert.errors import GertError
from gert.recovery import error_class
from gert_triton.config import ConfigError, cache_path, find_onnx_file, parse_parameters, stream_layout
from gert_triton.layout import Layout
from gert_triton.metrics import (ACTIVE_SEQUENCES, BACKGROUND_COMPILES, GEAR_HITS, GRAPH_REQUESTS, PADDING_RATIO,
                                 REQUEST_PATH_COMPILES, STREAM_BUSY, Publisher)

_NUMPY_TO_TRITON = {
    np.dtype(np.bool_): "TYPE_BOOL", np.dtype(np.uint8): "TYPE_UINT8", np.dtype(np.uint16): "TYPE_UINT16",
    np.dtype(np.uint32): "TYPE_UINT32", np.dtype(np.uint64): "TYPE_UINT64", np.dtype(np.int8): "TYPE_INT8",
    np.dtype(np.int16): "TYPE_INT16", np.dtype(np.int32): "TYPE_INT32", np.dtype(np.int64): "TYPE_INT64",
    np.dtype(np.float16): "TYPE_FP16", np.dtype(np.float32): "TYPE_FP32", np.dtype(np.float64): "TYPE_FP64",
}
DEFAULT_MAX_BATCH = 8
# gert.recovery.error_class -> TritonError code: clients and load balancers retry UNAVAILABLE, never INVALID_ARG
_TRITON_CODES = {"invalid": "INVALID_ARG", "internal": "INTERNAL", "unavailable": "UNAVAILABLE"}


def triton_dtype(dtype) -> str:
    try:
        return _NUMPY_TO_TRITON[np.dtype(dtype)]
    except KeyError:
        raise GertError(f"dtype {np.dtype(dtype)} has no Triton config type") from None


def _pb_utils():
    import triton_python_backend_utils as pb_utils  # exists only inside Triton's Python stub (or a test fake)

    return pb_utils


def _device_cores(devices) -> tuple:
    """(cube, vector) core counts of the device with the fewest; (1, 1) if none exists (gert.load says which)."""
    have = [d for d in devices if 0 <= d < _cann.device_count()]
    if not have:
        return 1, 1
    return (min(_cann.get_device_info(d, _cann.DEV_ATTR_CUBE_CORE_NUM) for d in have),
            min(_cann.get_device_info(d, _cann.DEV_ATTR_VECTOR_CORE_NUM) for d in have))


def _log_info(message: str) -> None:
    """To Triton's log through pb_utils.Logger (absent in old stubs and some fakes: then nowhere)."""
    try:
        _pb_utils().Logger.log_info(message)
    except (ImportError, AttributeError):
        pass


def onnx_io(path: str) -> dict:
    """The model's I/O, read by gert's one ONNX I/O reader (gert/core/onnx_io.py): outputs with no shape in the file
    get the one shape inference finds."""
    from gert.core import onnx_io as reader

    with open(path, "rb") as f:
        return reader.read(f.read()).io


def io_config(io: dict) -> tuple:
    """(batchable, inputs, outputs) in Triton config form, as onnxruntime_backend's autocomplete builds them:
    batchable when the first dim of every input and output is symbolic; dims then exclude it."""
    from gert.dtypes import onnx_to_numpy

    tensors = io["inputs"] + io["outputs"]
    batchable = all(dims and not isinstance(dims[0], int) for _, _, dims in tensors)

    def conv(entries):
        out = []
        for name, elem, dims in entries:
            if dims is None:
                raise GertError(f"ONNX tensor '{name}' has no shape; gert_triton needs its rank")
            d = [x if isinstance(x, int) else -1 for x in dims]
            out.append({"name": name, "data_type": triton_dtype(onnx_to_numpy(elem)),
                        "dims": d[1:] if batchable else d})
        return out

    return batchable, conv(io["inputs"]), conv(io["outputs"])


def _version_dirs(model_dir: str) -> list:
    return sorted((d for d in os.listdir(model_dir) if d.isdigit()), key=int, reverse=True)


class TritonPythonModel:
    """Serve an ONNX model on gert. Subclasses may override preprocess() and postprocess()."""

    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        pb_utils = _pb_utils()
        cfg = auto_complete_model_config.as_dict()
        params = parse_parameters(cfg.get("parameters", {}))
        model_dir = pb_utils.get_model_dir()
        if os.path.basename(os.path.normpath(model_dir)).isdigit():  # some stubs report the version dir
            model_dir = os.path.dirname(os.path.normpath(model_dir))
        versions = _version_dirs(model_dir) or ["1"]
        path = find_onnx_file(model_dir, versions[0], params.onnx_file)
        batchable, inputs, outputs = io_config(onnx_io(path))
        if params.state or params.batch_dim is not None:  # step inputs / non-state outputs, Triton's batch axis first
            from gert_triton.sequences import sequence_io

            batchable = True
            inputs, outputs = sequence_io(onnx_io(path), params.state, params.batch_dim)
        have_in = {i["name"] for i in cfg.get("input", [])}
        have_out = {o["name"] for o in cfg.get("output", [])}
        if batchable and cfg.get("max_batch_size", 0) == 0 and not cfg.get("input"):
            top = params.max_batch or max(params.gears.get("batch", [DEFAULT_MAX_BATCH]))
            auto_complete_model_config.set_max_batch_size(top)
        batching = batchable and (auto_complete_model_config.as_dict().get("max_batch_size", 0) > 0)
        for i in inputs:
            if i["name"] not in have_in:
                auto_complete_model_config.add_input(i if batching or not batchable else
                                                     {**i, "dims": [-1] + i["dims"]})
        for o in outputs:
            if o["name"] not in have_out:
                auto_complete_model_config.add_output(o if batching or not batchable else
                                                      {**o, "dims": [-1] + o["dims"]})
        if batching:
            cfg = auto_complete_model_config.as_dict()
            if "sequence_batching" not in cfg and "ensemble_scheduling" not in cfg:  # as set_dynamic_batching checks
                auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def initialize(self, args: dict) -> None:
        self.config = json.loads(args["model_config"])
        self.name = args.get("model_name", self.config.get("name", "model"))
        params = parse_parameters(self.config.get("parameters", {}))
        path = find_onnx_file(args["model_repository"], args.get("model_version", "1"), params.onnx_file)
        self.max_batch_size = int(self.config.get("max_batch_size", 0))
        gears = {k: list(v) for k, v in params.gears.items()}
        max_batch = params.max_batch
        if self.max_batch_size > 0:
            top = max(gears.get("batch", [])) if "batch" in gears else None
            if top is not None and top > self.max_batch_size:
                raise ConfigError(f"parameter 'gears': batch gear {top} is above max_batch_size "
                                  f"{self.max_batch_size}")
            if max_batch is None and "batch" not in gears:
                max_batch = self.max_batch_size
        device = int(args.get("model_instance_device_id", "0") or 0)
        devices = params.device_ids or (device,)
        batching = self.max_batch_size > 0 and (io_config(onnx_io(path))[0] or params.batch_dim is not None)
        self.layout = stream_layout(params, batching, lambda: _device_cores(devices))
        cache = cache_path(params, args["model_repository"])  # else gert.load takes GERT_CACHE_DIR, if set
        cache_kwargs = {"cache_dir": cache} if cache else {}
        self.model = gert.load(path, devices=devices, streams=self.layout.streams,
                               cube_cores=self.layout.cube_cores, vector_cores=self.layout.vector_cores,
                               gears=gears or None, shape_policy=params.shape_policy or None,
                               pad_value=params.pad_value, max_batch=max_batch, options=params.options,
                               **params.load_kwargs(), **cache_kwargs,
                               split_batch=params.split_batch if params.split_batch is not None
                               else self.layout.streams * len(devices) > 1,
                               request_timeout_s=params.request_timeout_ms / 1000 if params.request_timeout_ms else None)
        self.triton_layout = Layout(self.model.plan, self.max_batch_size > 0)
        self.stateful = None
        try:
            if params.state:
                from gert_triton.sequences import SequenceServer

                self.stateful = SequenceServer(self.model, self.config, self.name, self.triton_layout,
                                               on_change=self._update_metrics)
            self._check_config_io()
            compiled = self.model.warmup(self._config_fixed_sizes()) if params.warmup else 0
        except BaseException:  # the load fails: release the streams, sessions and device memory it took
            if self.stateful is not None:
                self.stateful.close()
            self.model.close()
            self.model = None
            raise
        _log_info(f"gert_triton '{self.name}': {self.layout.streams} stream(s) per device on {list(devices)}, "
                  f"cube_cores={self.layout.cube_cores or 'all'}, vector_cores={self.layout.vector_cores or 'all'}"
                  + (" (default layout; set streams / cube_cores to choose)" if self.layout.auto else "")
                  + f"; {compiled} graph(s) compiled at load"
                  + (f" ({self.model.stats()['cache_hits']} from the compile cache "
                     f"{self.model.compile_cache.directory})" if self.model.compile_cache else ""))
        self.batching = self.max_batch_size > 0 and self.model.plan.has_batch
        # The dynamic and sequence batchers drop requests cancelled in their queue before execute (Triton >= 23.10);
        # asking again costs one IPC round trip per request (~50 us each, ~8% of a batch-8 PP-OCR cls execute).
        # Without them requests wait in the instance's queue unchecked: ask in execute().
        self.check_cancelled = not ("dynamic_batching" in self.config or "sequence_batching" in self.config)
        self.sequences = "sequence_batching" in self.config
        self._init_metrics(params.metrics_interval_ms)

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

    def _check_config_io(self) -> None:
        """Config inputs / outputs that contradict the ONNX model fail the load (auto_complete_config keeps what
        the config gives), instead of every request failing later: the same dtype, and the same rank (the batch
        axis added when max_batch_size > 0). Skipped for the side a subclass's preprocess / postprocess converts."""
        state = set(self.model.state)  # a state input stays on the device
        names = [t.name for t in self.model.inputs if t.name not in state]  # a state stays on the device
        cfg_names = [i["name"] for i in self.config.get("input", [])]
        if sorted(cfg_names) != sorted(names):
            raise ConfigError(f"config inputs {cfg_names} do not match the ONNX model's inputs {names}")
        batch_axis = 1 if self.max_batch_size > 0 else 0
        sides = []
        if type(self).preprocess is TritonPythonModel.preprocess:
            sides.append(("input", self.model.inputs))
        if type(self).postprocess is TritonPythonModel.postprocess:
            sides.append(("output", self.model.outputs))
        for kind, tensors in sides:
            onnx = {t.name: t for t in tensors}
            for entry in self.config.get(kind, []):
                t = onnx.get(entry.get("name"))
                if t is None:
                    continue
                try:
                    want = triton_dtype(t.dtype)
                except GertError:
                    want = None
                have = entry.get("data_type")
                if want and have not in (None, "", "TYPE_INVALID", want):
                    raise ConfigError(f"config {kind} '{t.name}' has data_type {have}, but the ONNX model's "
                                      f"{kind} is {want}")
                dims = list((entry.get("reshape") or {}).get("shape") or entry.get("dims") or [])  # what we get
                carries = self.triton_layout.inputs.get(t.name, 0) if kind == "input" else \
                    self.triton_layout.outputs.get(t.name, 0)
                if dims and len(dims) + (batch_axis if carries is not None else 0) != len(t.shape):
                    raise ConfigError(f"config {kind} '{t.name}' has dims {dims}"
                                      + (" (plus the batch axis, max_batch_size > 0)" if batch_axis else "")
                                      + f", but the ONNX model's {kind} has shape {list(t.shape)}")

    def finalize(self) -> None:
        if getattr(self, "stateful", None) is not None:
            self.stateful.close()
            self.stateful = None
        if getattr(self, "metrics", None) is not None:  # publishes what is left, from the model's statistics
            self.metrics.close()
            self.metrics = None
        model = getattr(self, "model", None)
        if model is not None:
            model.close()

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
        ready = []  # (index, inputs, requested output names)
        check_cancelled = self.check_cancelled
        for i, request in enumerate(requests):
            if check_cancelled:
                try:
                    if request.is_cancelled():
                        responses[i] = pb_utils.InferenceResponse(
                            error=pb_utils.TritonError("the request was cancelled", pb_utils.TritonError.CANCELLED))
                        continue
                except AttributeError:  # a stub without cancellation
                    pass
            try:
                if not self.sequences:
                    _check_no_sequence(request, self.name)
                inputs = {}  # a missing one is named by the model's validator (gert/core/validate.py)
                for t in self.model.inputs:
                    tensor = pb_utils.get_input_tensor_by_name(request, t.name)
                    if tensor is not None:
                        inputs[t.name] = self.triton_layout.to_model(t.name, tensor.as_numpy())
                inputs = self.preprocess(inputs)
                self.model.validate(inputs)
                ready.append((i, inputs, request.requested_output_names()))
            except Exception as e:  # this request alone is bad
                responses[i] = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(str(e), pb_utils.TritonError.INVALID_ARG))
        # grouped by batch key, merged, run and split by the model's Engine (gert/core/engine.py)
        results = self.model.engine.run_many([inputs for _, inputs, _ in ready], return_exceptions=True) \
            if ready else []
        for (i, _, wanted), out in zip(ready, results):
            if isinstance(out, BaseException):
                # bad input INVALID_ARG; device / runtime failure INTERNAL; retry later UNAVAILABLE
                if isinstance(out, GertError):
                    code = getattr(pb_utils.TritonError, _TRITON_CODES[error_class(out)])
                    responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(out), code))
                else:
                    responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(
                        f"{type(out).__name__}: {out}", pb_utils.TritonError.INTERNAL))
                continue
            try:
                out = self.postprocess(out)
                tensors = [pb_utils.Tensor(name, np.require(self.triton_layout.to_triton(name, arr),
                                                            requirements="C"))
                           for name, arr in out.items() if not wanted or name in wanted]
                responses[i] = pb_utils.InferenceResponse(output_tensors=tensors)
            except Exception as e:
                responses[i] = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"{type(e).__name__}: {e}", pb_utils.TritonError.INTERNAL))
        self._update_metrics()
        return responses

    # ---- metrics ---------------------------------------------------------------------------------------------
    def _init_metrics(self, interval_ms: int) -> None:
        self._last_stats = None
        self._padding_sent: dict = {}  # gear -> the padding ratio last published
        try:
            self.metrics: Optional[Publisher] = Publisher(_pb_utils(), self.name, self._metric_changes,
                                                          interval=interval_ms / 1000)
        except (ImportError, AttributeError):  # a stub without custom metrics
            self.metrics = None

    def _update_metrics(self) -> None:
        """Once per batch: tell the publisher there is something new (its thread collects and publishes it)."""
        if getattr(self, "metrics", None) is not None:
            self.metrics.notify()

    def _metric_changes(self) -> list:
        """What gert.Model counted since the last call, as metric changes (called by the publisher's thread)."""
        stats = self.model.stats()
        last = self._last_stats or {"gears": {}, "streams": []}
        changes = []
        for gear, g in stats["gears"].items():
            prev = last["gears"].get(gear, {"hits": 0})
            if g["hits"] > prev["hits"]:  # only gears that ran since
                changes.append((GEAR_HITS, {"gear": gear}, "increment", g["hits"] - prev["hits"]))
                if self._padding_sent.get(gear) != g["padding_ratio"]:  # a gauge: only when it changes
                    changes.append((PADDING_RATIO, {"gear": gear}, "set", g["padding_ratio"]))
                    self._padding_sent[gear] = g["padding_ratio"]
        prev = {(s["device"], s["stream"]): s for s in last["streams"]}
        for s in stats["streams"]:
            where = {"stream": str(s["stream"]), "device": str(s["device"])}
            before = prev.get((s["device"], s["stream"]), {})
            delta = s["busy_seconds"] - before.get("busy_seconds", 0.0)
            if delta > 0:
                changes.append((STREAM_BUSY, where, "increment", delta))
            for family, field, labels in ((GRAPH_REQUESTS, "static_hits", {"graph": "static"}),
                                          (GRAPH_REQUESTS, "dynamic_hits", {"graph": "dynamic"}),
                                          (BACKGROUND_COMPILES, "background_compiles", {}),
                                          (REQUEST_PATH_COMPILES, "request_path_compiles", {})):
                n = s[field] - before.get(field, 0)
                if n > 0:
                    changes.append((family, {**where, **labels}, "increment", n))
        if self.stateful is not None and self.stateful.active != getattr(self, "_active_sent", None):
            self._active_sent = self.stateful.active
            changes.append((ACTIVE_SEQUENCES, {}, "set", self._active_sent))
        self._last_stats = stats
        return changes


def _check_no_sequence(request, model: str) -> None:
    """A model without sequence batching keeps no state: a sequence id or start/end flag means the client expects
    state that is not there, so the request is refused (Triton itself passes them through)."""
    cid = getattr(request, "correlation_id", lambda: 0)()
    flags = getattr(request, "flags", lambda: 0)()
    if cid not in (0, "", None) or flags & _SEQUENCE_FLAGS:
        raise GertError(f"model '{model}' has no sequence batching, but the request carries "
                        f"sequence_id={cid!r}, sequence_start={bool(flags & 1)}, sequence_end={bool(flags & 2)}; "
                        f"send it without them")


_SEQUENCE_FLAGS = 3  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START | TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
