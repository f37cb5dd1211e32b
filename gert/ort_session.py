"""gert.InferenceSession: ONNX Runtime's Python session API over gert.Model, so ONNX Runtime applications run on gert.

    sess = gert.InferenceSession("det.onnx", providers=["CANNExecutionProvider"])
    boxes, = sess.run(None, {"x": image})

What applications touch follows ``onnxruntime.InferenceSession``: ``run`` (outputs as a list, in ``output_names``
order), ``run_async``, ``get_inputs`` / ``get_outputs`` / ``get_overridable_initializers`` (NodeArgs with ONNX
Runtime's shapes and type strings), ``get_modelmeta`` (with the model's ``custom_metadata_map``), ``get_providers``,
``get_provider_options``, ``get_session_options``; the input checks raise ONNX Runtime's own exception classes
with its messages (a gert subclass of each, so ``except GertError`` works too). ``run_options``, ``io_binding`` /
``run_with_iobinding``, ``run_with_ort_values``, ``set_providers`` and ``end_profiling``: gert/ort_io.py.
Computation is gert.Model's: the model compiles through GE (the host NPU off an NPU), on gert's streams, core locks
and shape policies.

Options: SessionOptions that map onto gert are honoured (``intra_op_num_threads`` -> the stream's cube cores,
``add_free_dimension_override_by_name`` -> a fixed dim: other sizes are refused as ONNX Runtime refuses them; it
is seen on ``gert.SessionOptions``, which ``patch_onnxruntime`` puts in place of onnxruntime's); the others are
accepted, and those set to something other than ONNX Runtime's default are named once in a warning. gert's own
options (streams, gears, shape policies, ...) come as keyword arguments or as the provider options of
``CANNExecutionProvider`` / ``GertExecutionProvider`` (``device_id`` too). Unless told otherwise the batch axis
uses the ``auto`` policy (any batch size runs unpadded, as in ONNX Runtime; hot sizes get static graphs), and the
session compiles at creation (``Model.warmup``), as ONNX Runtime does, not on the first run.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from gert import ort_fallback, ort_lora, ort_partition
from gert.errors import GertError
from gert.ort_api import SessionExtras
from gert.ort_feed import FeedCheck, InvalidArgument
from gert.ort_io import (
    Profiler,
    ScalarFeedShapes,
    SessionRunVariants,
    check_run_options,
    from_ortvalues,
    ort_class,
    ort_feed,
)
from gert.ort_lora import active_parameters
from gert.ort_model import session_model, write_optimized_model
from gert.ort_providers import CANN_PROVIDER, CPU_PROVIDER, GERT_PROVIDER, check_providers, warn_once as _warn_once

_OURS = (CANN_PROVIDER, GERT_PROVIDER)
# CANN EP options that mean nothing to gert's executor (it manages memory and graphs itself)
_CANN_EP_IGNORED = {
    "npu_mem_limit",
    "arena_extend_strategy",
    "enable_cann_graph",
    "dump_graphs",
    "dump_om_model",
    "op_select_impl_mode",
    "optypelist_for_implmode",
    "enable_cann_subgraph",
}
_LOAD_INT_KEYS = {"streams", "cube_cores", "vector_cores", "max_batch", "max_exact_graphs"}
# SessionOptions attributes gert accepts and does not apply: warned about once each when not ONNX Runtime's default
_IGNORED_SESSION_OPTIONS = (
    "inter_op_num_threads",
    "graph_optimization_level",
    "execution_mode",
    "log_severity_level",
    "log_verbosity_level",
    "enable_profiling",
    "enable_mem_pattern",
    "enable_mem_reuse",
    "use_deterministic_compute",
    "execution_order",
    "logid",
    "profile_file_prefix",
)
_ORT_PREFIX = re.compile(r"^\[(ONNXRuntimeError|gert)\] : (\d+ : )?[A-Z_]+ : ")
_NO_VERSION = 2**63 - 1  # what ONNX Runtime reports as the version of a model that sets none


def _ort():
    import onnxruntime

    return onnxruntime


# ---- metadata --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeArg:
    """An input or output as ONNX Runtime describes it: shape dims are ints, symbolic names, or None."""

    name: str
    type: str
    shape: list

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


@dataclass(frozen=True)
class ModelMetadata:
    """onnxruntime.ModelMetadata's fields, read from the model file."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict = field(default_factory=dict)


def _type_string(type_proto) -> str:
    """ONNX Runtime's type string: 'tensor(float)', 'seq(tensor(int64))', 'map(string,tensor(float))', ..."""
    from onnx import TensorProto

    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({TensorProto.DataType.Name(type_proto.tensor_type.elem_type).lower()})"
    if kind == "sparse_tensor_type":
        return f"sparse_tensor({TensorProto.DataType.Name(type_proto.sparse_tensor_type.elem_type).lower()})"
    if kind == "sequence_type":
        return f"seq({_type_string(type_proto.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({_type_string(type_proto.optional_type.elem_type)})"
    if kind == "map_type":
        key = TensorProto.DataType.Name(type_proto.map_type.key_type).lower()
        return f"map({key},{_type_string(type_proto.map_type.value_type)})"
    return "unknown"


def _shape(type_proto, overrides: Mapping[str, int], denotations: Mapping[str, int] | None = None) -> list | None:
    """Dims as ONNX Runtime reports them (None for an unnamed unknown dim); None when the rank is unknown. A free
    dim is fixed by an override of its name, or of its denotation ("DATA_BATCH")."""
    kind = type_proto.WhichOneof("value")
    if kind != "tensor_type" or not type_proto.tensor_type.HasField("shape"):
        return None
    out: list = []
    for d in type_proto.tensor_type.shape.dim:
        if denotations and not d.HasField("dim_value") and d.denotation in denotations:
            out.append(denotations[d.denotation])
        elif d.HasField("dim_value"):
            out.append(int(d.dim_value) if d.dim_value >= 0 else None)  # exporters write -1 for "unknown"
        elif d.HasField("dim_param") and d.dim_param:
            out.append(overrides.get(d.dim_param, d.dim_param))
        else:
            out.append(None)
    return out


@dataclass
class _ModelInfo:
    inputs: list
    outputs: list
    overridable: list
    meta: ModelMetadata
    nodes: list = field(default_factory=list)  # the graph's nodes (NodeProtos without their attributes)


def _read_model(data: bytes, overrides: Mapping[str, int], denotations: Mapping[str, int] | None = None) -> _ModelInfo:
    """Inputs, outputs, overridable initializers and metadata, as ONNX Runtime reports them; output shapes the file
    leaves out come from ONNX shape inference, as ONNX Runtime infers them at load."""
    import onnx

    model = onnx.load_model_from_string(data)
    g = model.graph
    initializers = {t.name for t in g.initializer}
    missing = {o.name for o in g.output if _shape(o.type, {}) is None and o.type.WhichOneof("value") == "tensor_type"}
    inferred: dict = {}
    if missing:  # the shapes gert.Model infers for them (an unknown dim is None, as ONNX Runtime reports it)
        from gert.core import shape_infer as _shape_infer

        try:
            done = _shape_infer.infer(
                model, {v.name: _shape(v.type, {}) for v in g.input if v.name not in initializers}
            )
            inferred = {o.name: dims for o, dims in zip(g.output, done.output_dims) if dims is not None}
        except Exception:  # noqa: BLE001 - inference is best effort here; ONNX Runtime then reports no shape either
            inferred = {}

    inputs = [
        NodeArg(v.name, _type_string(v.type), _shape(v.type, overrides, denotations) or [])
        for v in g.input
        if v.name not in initializers
    ]
    overridable = [
        NodeArg(v.name, _type_string(v.type), _shape(v.type, overrides, denotations) or [])
        for v in g.input
        if v.name in initializers
    ]
    outputs = []
    for v in g.output:
        if v.name in inferred:
            shape = [overrides.get(d, d) if isinstance(d, str) else d for d in inferred[v.name]]
        else:
            shape = _shape(v.type, overrides, denotations) or []
        outputs.append(NodeArg(v.name, _type_string(v.type), shape))
    meta = ModelMetadata(
        model.producer_name,
        g.name,
        model.domain,
        model.doc_string,
        g.doc_string,
        int(model.model_version) if model.HasField("model_version") else _NO_VERSION,
        {p.key: p.value for p in model.metadata_props},
    )
    nodes = [NodeProtoRef(n.name, n.op_type, n.domain) for n in g.node]
    return _ModelInfo(inputs, outputs, overridable, meta, nodes)


@dataclass(frozen=True)
class NodeProtoRef:
    """A node of the model's graph, named in the CPU fallback's warning and the graph assignment."""

    name: str
    op_type: str
    domain: str


# ---- options ---------------------------------------------------------------------------------------------------


def SessionOptions():  # noqa: N802 - a class in ONNX Runtime's API; built lazily so importing gert imports no ORT
    """onnxruntime.SessionOptions that remembers its free-dimension overrides, so gert can honour them."""
    return session_options_class()()


def RunOptions():  # noqa: N802 - a class in ONNX Runtime's API
    """onnxruntime.RunOptions that remembers its active LoRA adapters, so gert can honour them (gert.ort_lora)."""
    return ort_lora.run_options_class()()


def LoraAdapter():  # noqa: N802 - a class in ONNX Runtime's API
    """onnxruntime.LoraAdapter that remembers its parameters, so gert can honour them (gert.ort_lora)."""
    return ort_lora.lora_adapter_class()()


_SO_CLASS = None


def session_options_class():
    global _SO_CLASS
    if _SO_CLASS is None:
        base = _ort().SessionOptions

        class GertSessionOptions(base):
            __doc__ = SessionOptions.__doc__

            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self.gert_free_dimension_overrides: dict = {}
                self.gert_denotation_overrides: dict = {}
                self.gert_initializers: dict = {}  # add_initializer: name -> array
                self.gert_external_initializers: dict = {}  # add_external_initializers: name -> array
                self.gert_external_files: dict = {}  # add_external_initializers_from_files_in_memory

            def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
                super().add_free_dimension_override_by_name(name, value)
                self.gert_free_dimension_overrides[str(name)] = int(value)

            def add_free_dimension_override_by_denotation(self, denotation: str, value: int) -> None:
                super().add_free_dimension_override_by_denotation(denotation, value)
                self.gert_denotation_overrides[str(denotation)] = int(value)

            def add_initializer(self, name: str, value) -> None:
                super().add_initializer(name, value)
                self.gert_initializers[str(name)] = np.array(value.numpy())

            def add_external_initializers(self, names, values) -> None:
                super().add_external_initializers(names, values)
                for n, v in zip(names, values):
                    self.gert_external_initializers[str(n)] = np.array(v.numpy())

            def add_external_initializers_from_files_in_memory(self, names, buffers, lengths) -> None:
                super().add_external_initializers_from_files_in_memory(names, buffers, lengths)
                for n, b, k in zip(names, buffers, lengths):
                    self.gert_external_files[str(n)] = bytes(memoryview(b).cast("B")[: int(k)])

        GertSessionOptions.__name__ = GertSessionOptions.__qualname__ = "SessionOptions"
        _SO_CLASS = GertSessionOptions
    return _SO_CLASS


def _session_load_options(so, device_cube_cores: Callable[[], int]) -> dict:
    """gert.load arguments from SessionOptions; names once the set options gert does not apply."""
    out: dict = {}
    if so is None:
        return out
    threads = int(getattr(so, "intra_op_num_threads", 0) or 0)
    if threads > 0:
        out["cube_cores"] = min(threads, device_cube_cores())
    default = _ort().SessionOptions()
    differ = []
    for name in _IGNORED_SESSION_OPTIONS:
        try:
            if getattr(so, name) != getattr(default, name):
                differ.append(name)
        except AttributeError:
            continue
    for name in differ:
        _warn_once(
            f"so.{name}",
            f"gert.InferenceSession: SessionOptions.{name} is accepted and not applied "
            "(gert's executor and GE decide it)",
        )
    return out


def _provider_load_options(providers, provider_options) -> tuple:
    """(the providers as ONNX Runtime would report them, gert.load arguments from our providers' options)."""
    if providers is None:
        providers = [CANN_PROVIDER]
    names, opts = [], []
    for i, p in enumerate(providers):
        if isinstance(p, (tuple, list)):
            name, o = p[0], dict(p[1] or {})
        else:
            name, o = p, {}
        if provider_options is not None and i < len(provider_options) and provider_options[i]:
            o.update(provider_options[i])
        names.append(str(name))
        opts.append(o)
    load: dict = {}
    reported = {}
    for name, o in zip(names, opts):
        if name not in _OURS:
            continue
        shown = {}
        for k, v in o.items():
            shown[k] = str(v)
            if k == "device_id":
                load["devices"] = (int(v),)
            elif k == "precision_mode":
                load.setdefault("options", {})["ge.exec.precision_mode"] = str(v)
            elif k in _CANN_EP_IGNORED:
                _warn_once(f"ep.{k}", f"gert.InferenceSession: {name} option {k!r} is accepted and not applied")
            elif k in _LOAD_INT_KEYS:
                load[k] = int(v)
            else:
                load[k] = v
        reported[name] = shown
    # gert computes everything on the NPU (or the host NPU); ONNX Runtime lists CPU last as its fallback
    shown_names = [n for n in (CANN_PROVIDER, GERT_PROVIDER) if n in names] or [CANN_PROVIDER]
    reported = {n: reported.get(n, {}) for n in shown_names}
    reported[CPU_PROVIDER] = {}
    return reported, load


def _cube_cores(device: int) -> int:
    """The device's cube cores. aclInit first: the first session of a process asks before any device is open."""
    from gert import _cann

    _cann.device_count()
    return _cann.get_device_info(device, _cann.DEV_ATTR_CUBE_CORE_NUM)


_LOAD_CONFIG = "ORT_LOAD_CONFIG_FROM_MODEL"
_COPIED_OPTIONS = (
    "intra_op_num_threads",
    "inter_op_num_threads",
    "graph_optimization_level",
    "execution_mode",
    "log_severity_level",
    "log_verbosity_level",
    "enable_profiling",
    "enable_mem_pattern",
    "enable_mem_reuse",
    "enable_cpu_mem_arena",
    "use_deterministic_compute",
    "optimized_model_filepath",
    "execution_order",
    "logid",
    "profile_file_prefix",
)


def _options_from_model(so, meta: ModelMetadata):
    """With ORT_LOAD_CONFIG_FROM_MODEL=1, the session options the model's "ort_config" metadata sets
    ({"session_options": {field: value}}), over a copy of ``so`` (as ONNX Runtime leaves the caller's own as it
    is); else ``so``."""
    import json
    import os

    config = meta.custom_metadata_map.get("ort_config")
    if os.environ.get(_LOAD_CONFIG) != "1" or not config:
        return so
    try:
        fields = json.loads(config).get("session_options", {})
    except (ValueError, AttributeError) as e:
        raise ort_class("InvalidArgument")(
            f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : the model's ort_config "
            f"metadata is not JSON with a session_options object: {e}"
        ) from None
    out = SessionOptions()
    if so is not None:
        for name in _COPIED_OPTIONS:
            setattr(out, name, getattr(so, name))
        for attr in (
            "gert_free_dimension_overrides",
            "gert_denotation_overrides",
            "gert_initializers",
            "gert_external_initializers",
            "gert_external_files",
        ):
            getattr(out, attr).update(getattr(so, attr, None) or {})
    for name, value in fields.items():
        if name in _COPIED_OPTIONS:
            current = getattr(out, name)
            setattr(
                out, name, type(current)(int(value)) if not isinstance(current, (str, bool)) else type(current)(value)
            )
        else:
            out.add_session_config_entry(str(name), str(value))
    return out


def _names_batch(load: dict) -> bool:
    return "batch" in (load.get("shape_policy") or {}) or "batch" in (load.get("gears") or {})


# ---- the session -----------------------------------------------------------------------------------------------


class InferenceSession(SessionRunVariants, SessionExtras):
    """onnxruntime.InferenceSession's Python API over a gert.Model (see the module doc; the run variants, IOBinding
    and run_options: gert.ort_io; the rest of the 1.32 API: gert.ort_api). A model GE's parser refuses runs on ONNX
    Runtime's CPU provider when the providers allow it (gert.ort_fallback)."""

    def __init__(
        self,
        path_or_bytes: str | bytes | os.PathLike,
        sess_options=None,
        providers: Sequence | None = None,
        provider_options: Sequence[dict] | None = None,
        **load_options: Any,
    ):
        self._cpu = None  # ONNX Runtime's CPU session, when the model runs there (gert.ort_fallback)
        self._edges_session: ort_partition.EdgeSession | None = None  # core on gert, edges on CPU
        self._model = None
        self._adapters: ort_lora.AdapterModels | None = None  # models of LoRA adapter sets (gert.ort_lora)
        # What set_providers loads again, as ONNX Runtime keeps it: the bytes given (or written with the session
        # options' initializers), or only the path: a model file loads by path, so its external data resolves next
        # to it, and the session holds no copy of its weights (issue 28)
        source = session_model(path_or_bytes, sess_options)
        self._model_path = source.path
        self._model_bytes: bytes | None = source.data if source.path is None else None
        data = source.data
        self._overrides = dict(getattr(sess_options, "gert_free_dimension_overrides", {}) or {})
        self._denotations = dict(getattr(sess_options, "gert_denotation_overrides", {}) or {})
        try:
            self._info = _read_model(data, self._overrides, self._denotations)
        except Exception as e:  # not a model ONNX can read: ONNX Runtime's error for it
            raise ort_fallback.load_error(e, source.source, sess_options) from e
        self._sess_options = _options_from_model(sess_options, self._info.meta)
        self._extra_load = dict(load_options)
        if self._info.overridable:
            _warn_once(
                "overridable",
                "gert.InferenceSession: initializers listed as graph inputs are constants in "
                "the compiled graph; feeding them is refused",
            )
        check_providers(providers, constructor=True)
        self._providers, self._load_options = self._load_arguments(providers, provider_options)
        self._model = self._load_or_fall_back(providers)
        if self._cpu is None:  # ONNX Runtime's CPU session writes its own
            write_optimized_model(self._sess_options, self._model_data)
        self._profiler = Profiler(sess_options)
        self._input_info = {t.name: t for t in self._model.inputs} if self._model is not None else {}
        self._input_args = {a.name: a for a in self._info.inputs}
        self._checks = FeedCheck(self._input_info, self._input_args, {a.name for a in self._info.overridable})
        self._output_names = [a.name for a in self._info.outputs]
        self._outputs_twice = len(set(self._output_names)) != len(self._output_names)  # a tensor listed twice
        self._scalar_inputs = frozenset(n for n, t in self._input_info.items() if len(t.shape) == 0)  # the graph's 0-d
        self._scalar_shapes = ScalarFeedShapes(self._model_data)  # outputs of one-element feeds to 0-d inputs

    def _load_arguments(self, providers, provider_options) -> tuple:
        """(the providers as ONNX Runtime reports them, gert.load arguments) from providers and session options."""
        reported, load = _provider_load_options(providers, provider_options)
        device = (load.get("devices") or (0,))[0]
        load.update(_session_load_options(self._sess_options, lambda: _cube_cores(device)))
        load.update(self._extra_load)
        if self._has_batch() and not _names_batch(load):
            # ONNX Runtime runs any batch size as it comes: no padding rows; hot sizes get static graphs
            # (gert.core.tiers)
            load["shape_policy"] = dict(load.get("shape_policy") or {}, batch="auto")
        return reported, load

    def _load_or_fall_back(self, providers):
        """The gert.Model; None when GE's parser refuses the model and ONNX Runtime's CPU provider runs it instead
        (``self._cpu``). Load errors are ONNX Runtime's classes (gert.ort_fallback)."""
        try:
            return self._load_model()
        except GertError as e:
            if not ort_fallback.ge_refused(e):
                raise ort_fallback.load_error(e, self._source(), self._sess_options) from e
            if not ort_fallback.cpu_allowed(providers):
                raise ort_fallback.no_cpu_error(e, self._info.nodes) from e
            failed = e
        edges = self._edges(failed)
        if edges is not None:
            self._edges_session = edges
            self._providers = {**{n: o for n, o in self._providers.items() if n in _OURS}, CPU_PROVIDER: {}}
            return None
        try:
            self._cpu = ort_fallback.cpu_session(self._source(), self._sess_options)
        except Exception as ort_error:  # ONNX Runtime refuses it too: its error
            raise ort_fallback.load_error(failed, self._source(), self._sess_options) from ort_error
        ort_fallback.warn_fallback(failed, self._info.meta.graph_name, self._info.nodes)
        self._providers = {ort_fallback.CPU_PROVIDER: {}}
        return None

    def _edges(self, refused: BaseException) -> ort_partition.EdgeSession | None:
        """The core on gert and the refused nodes at the edges on the CPU, or None (gert.ort_partition)."""
        ours = [(n, o) for n, o in self._providers.items() if n in _OURS] or [GERT_PROVIDER]
        return ort_partition.edge_session(
            self._model_data(),
            self._load_options.get("cann_ops"),
            self._info.meta.graph_name,
            ours[0][0],
            lambda data: InferenceSession(data, self._sess_options, providers=ours, **self._extra_load),
            lambda data: ort_fallback.cpu_session(data, self._sess_options),
        )

    def _source(self) -> str | bytes:
        """What the model loads from: its path, or its bytes."""
        return self._model_path if self._model_bytes is None else self._model_bytes

    def _load_model(self, data: bytes | None = None, source: str | bytes | None = None):
        """A gert.Model of this session's model (by path, or from its bytes; ``source``: other bytes) with this
        session's load options, compiled."""
        import gert
        from gert import hostnpu
        from gert.core import external_data

        if getattr(self._sess_options, "enable_cpu_mem_arena", True) is False:
            model_dir = external_data.model_dir(self._model_path) if self._model_bytes is None else ""
            hostnpu.without_arena(data or self._model_data(), model_dir)  # no arena for its sessions (issue 28)
        model = gert.load(source if source is not None else self._source(), **self._load_options)
        try:
            model.warmup()  # compile now, as ONNX Runtime does at session creation, not on the first run
        except BaseException:
            model.close()
            raise
        return model

    def _model_data(self) -> bytes:
        """The model's bytes: those given, or the file read again."""
        if self._model_bytes is not None:
            return self._model_bytes
        with open(self._model_path, "rb") as f:
            return f.read()

    def _adapted(self, run_options, input_feed: Mapping[str, Any]) -> tuple:
        """(the gert.Model to run, the feed) under the run's active LoRA adapters (gert.ort_lora): the model with
        the adapters' initializers, loaded once per adapter set; their other parameters join the feed."""
        params = active_parameters(run_options)
        if not params:
            return self._model, input_feed
        replace, fed = ort_lora.split(params, {a.name for a in self._info.overridable}, set(self._input_args))
        if fed and isinstance(input_feed, Mapping):
            input_feed = {**fed, **input_feed}
        if not replace:
            return self._model, input_feed
        if self._adapters is None:
            self._adapters = ort_lora.AdapterModels(self._load_adapted)
        return self._adapters.get(replace), input_feed

    def _load_adapted(self, replace: Mapping[str, np.ndarray]):
        from gert.core import external_data

        model_dir = external_data.model_dir(self._model_path) if self._model_bytes is None else None
        data = ort_lora.model_with(self._model_data(), replace, model_dir)
        return self._load_model(data, source=data)

    def _has_batch(self) -> bool:
        """gert's rule for a batch axis: the first dim of every input is symbolic (after the overrides)."""
        inputs = self._info.inputs
        return bool(inputs) and all(a.shape and not isinstance(a.shape[0], int) for a in inputs)

    # ---- what applications read ------------------------------------------------------------------------------
    def get_inputs(self) -> list:
        return list(self._info.inputs)

    def get_outputs(self) -> list:
        return list(self._info.outputs)

    def get_overridable_initializers(self) -> list:
        return list(self._info.overridable)

    def get_modelmeta(self) -> ModelMetadata:
        return self._info.meta

    def get_providers(self) -> list:
        return list(self._providers)

    def get_provider_options(self) -> dict:
        return {k: dict(v) for k, v in self._providers.items()}

    def get_session_options(self):
        if self._sess_options is None:
            self._sess_options = SessionOptions()
        return self._sess_options

    @property
    def model(self):
        """The gert.Model underneath (stats(), warmup(), ...); None when ONNX Runtime's CPU provider runs the model."""
        return self._model

    def _graph_nodes(self) -> list:
        return list(self._info.nodes)

    # ---- running ---------------------------------------------------------------------------------------------
    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options=None) -> list:
        """Run once; the outputs named (all for None or []) as a list of numpy arrays, in that order."""
        if self._cpu is not None:
            return self._cpu.run(output_names, input_feed, run_options)
        if self._edges_session is not None:
            return self._edges_session.run(output_names, from_ortvalues(input_feed), run_options)
        names = _named_outputs(output_names, self._output_names)
        # a dict of arrays whose signature ran (and validated) before: the compiled lane, as Model.run takes it
        result = self._model.run_compiled(input_feed) if run_options is None and not self._profiler.enabled else None
        if result is None:
            result = self._run_checked(input_feed, run_options)
        return _listed(result, names) if self._outputs_twice or output_names else [result[n] for n in names]

    def _run_checked(self, input_feed: Mapping[str, Any], run_options) -> dict:
        """run() of a feed the compiled lane did not take: ONNX Runtime's feed rules and errors, then the model."""
        check_run_options(run_options)
        model, input_feed = (
            self._adapted(run_options, input_feed) if run_options is not None else (self._model, input_feed)
        )
        input_feed = from_ortvalues(input_feed)
        fed = ort_feed(input_feed, self._scalar_inputs)
        feed = self._checks.feed(fed, self._model.engine.validate)
        try:
            if self._profiler.enabled:
                t0 = time.monotonic_ns()
                result = model.run(feed)
                self._profiler.record("model_run", t0, time.monotonic_ns())
            else:
                result = model.run(feed)
        except GertError as e:
            told = self._checks.run_error(e, feed)
            if told is None:
                raise
            raise told from e
        if fed is not input_feed:  # a one-element array fed to a 0-d input: ONNX Runtime's output shapes
            result = self._scalar_shapes.apply(input_feed, result)
        return result

    def run_async(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        callback: Callable[[list | None, Any, str], None],
        user_data: Any = None,
        run_options=None,
    ) -> None:
        """Run in the background; ``callback(outputs, user_data, err)`` runs when done: the outputs with ``err``
        empty, or ``[]`` with the error's message, bad input included (as ONNX Runtime calls it). The callback
        holds the session: it lives until the callback ran, as ONNX Runtime finishes a run of a dropped session."""
        if self._cpu is not None:
            return self._cpu.run_async(output_names, input_feed, callback, user_data, run_options)
        if self._edges_session is not None:
            return self._edges_session.run_async(
                output_names, from_ortvalues(input_feed), callback, user_data, run_options
            )
        try:
            names = _named_outputs(output_names, self._output_names)
            check_run_options(run_options)
            model, input_feed = self._adapted(run_options, from_ortvalues(input_feed))
            fed = ort_feed(input_feed, self._scalar_inputs)
            feed = self._checks.feed(fed, self._model.engine.validate)
            fut = model.submit(feed)
        except GertError as e:
            callback([], user_data, _ORT_PREFIX.sub("", str(e)))
            return

        def done(f) -> None:
            try:
                result = f.result()
                if fed is not input_feed:
                    result = self._scalar_shapes.apply(input_feed, result)
            except BaseException as e:  # noqa: BLE001 - handed to the callback, as ONNX Runtime does
                told = self._checks.run_error(e, feed) or e
                callback([], user_data, _ORT_PREFIX.sub("", str(told)) or type(e).__name__)
            else:
                callback(_listed(result, names), user_data, "")

        fut.add_done_callback(done)

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the model's streams and device memory (ONNX Runtime frees them when the session is collected)."""
        if self._model is not None:
            self._model.close()
        if self._adapters is not None:
            self._adapters.close()
        self._cpu = None
        if self._edges_session is not None:
            self._edges_session.close()
            self._edges_session = None

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        for held in (
            getattr(self, "_model", None),
            getattr(self, "_adapters", None),
            getattr(self, "_edges_session", None),
        ):
            if held is not None:
                try:
                    held.close()
                except Exception:  # noqa: BLE001 - interpreter shutdown
                    pass


def _named_outputs(output_names: Sequence[str] | None, known: Sequence[str]) -> list:
    """The outputs a run returns: ``output_names`` (all ``known`` for None or []), refused as ONNX Runtime refuses an
    unknown one."""
    if not output_names:
        return list(known)
    for n in output_names:
        if n not in known:
            raise InvalidArgument(f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Invalid output name:{n}")
    return list(output_names)


def _listed(result: Mapping[str, np.ndarray], names: Sequence[str]) -> list:
    """The outputs ``names`` in order; an output named twice is a copy of its own each time, as ONNX Runtime
    returns two arrays for it."""
    out = [result[n] for n in names]
    if len(set(names)) != len(names):
        seen: set = set()
        for i, n in enumerate(names):
            if n in seen:
                out[i] = out[i].copy()
            seen.add(n)
    return out
