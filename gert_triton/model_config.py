"""The Triton config of an ONNX model, decided once: `gert repo init`, auto_complete_config and the load-time config
check all go through ``describe`` and ``config_io``, so a config gert writes always loads.

``describe`` reads which tensors a client sees (a stateful model's state stays on the device) and, for each, its
Triton type, its dims and the model axis that Triton's batch axis maps onto (gert_triton.layout moves it there).
``config_io`` turns that into config entries for a ``max_batch_size``, the way onnxruntime_backend's auto-complete
does: with batching the batch axis leaves ``dims``; a tensor left with no dims is ``dims: [1]`` with
``reshape: { shape: [] }``. ``check_config`` compares a config's entries with the same entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from gert.dtypes import is_bfloat16
from gert.errors import GertError
from gert_triton.config import ConfigError

DEFAULT_MAX_BATCH = 8

_NUMPY_TO_TRITON = {
    np.dtype(np.bool_): "TYPE_BOOL",
    np.dtype(np.uint8): "TYPE_UINT8",
    np.dtype(np.uint16): "TYPE_UINT16",
    np.dtype(np.uint32): "TYPE_UINT32",
    np.dtype(np.uint64): "TYPE_UINT64",
    np.dtype(np.int8): "TYPE_INT8",
    np.dtype(np.int16): "TYPE_INT16",
    np.dtype(np.int32): "TYPE_INT32",
    np.dtype(np.int64): "TYPE_INT64",
    np.dtype(np.float16): "TYPE_FP16",
    np.dtype(np.float32): "TYPE_FP32",
    np.dtype(np.float64): "TYPE_FP64",
}


def triton_dtype(dtype) -> str:
    """The config data_type of a numpy dtype ("TYPE_FP32"); bfloat16 (ml_dtypes') is TYPE_BF16."""
    if is_bfloat16(np.dtype(dtype)):
        return "TYPE_BF16"
    try:
        return _NUMPY_TO_TRITON[np.dtype(dtype)]
    except KeyError:
        raise GertError(f"dtype {np.dtype(dtype)} has no Triton config type") from None


def onnx_io(path: str, place: str = "inline") -> dict:
    """The model's I/O, read by gert's one ONNX I/O reader (gert/core/onnx_io.py): outputs with no shape in the file
    get the one shape inference finds. ``place``: where it is read (gert/core/load_analysis.py)."""
    from gert.core import load_analysis

    with open(path, "rb") as f:
        return load_analysis.read_io(f.read(), place)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor a client sends or receives."""

    name: str
    data_type: str  # "TYPE_FP32"
    dims: tuple  # the model's dims, -1 where dynamic
    batch_axis: Optional[int]  # the model axis Triton's batch axis maps onto; None: the tensor has none


@dataclass(frozen=True)
class ModelSpec:
    """What a Triton config of the model must say: the client-visible inputs and outputs, and whether the model
    can take Triton's batch axis (``max_batch_size > 0``)."""

    inputs: tuple
    outputs: tuple
    batchable: bool


def describe(io: dict, state: Optional[dict] = None, batch_dim=None) -> ModelSpec:
    """The model as a Triton config sees it. Without ``state`` and ``batch_dim`` the batch axis is axis 0, and the
    model is batchable when the first dim of every input and output is dynamic (onnxruntime_backend's rule). With
    them, gert's shape plan says which axis of each tensor carries the batch (none: a 0-d sample rate), and the state
    inputs and outputs are left out (they stay on the device)."""
    from gert.dtypes import onnx_to_numpy

    tensors = io["inputs"] + io["outputs"]
    for name, _, dims in tensors:
        if dims is None:
            raise GertError(f"ONNX tensor '{name}' has no shape; gert_triton needs its rank")
    if state or batch_dim is not None:
        from gert.sequence import pair_states
        from gert.core.shapes import plan_shapes

        plan = plan_shapes(io, batch_dim=batch_dim, state=state or {})
        pairs = pair_states(plan, state or {})
        if plan.batch is None or any(p.axis is None for p in pairs):
            what = f"the state {state}" if state else f"batch_dim {batch_dim!r}"
            raise ConfigError(
                f"{what} gives the model no batch axis: name it with batch_dim (e.g. 'N', or "
                "'x:1,h:1') so that requests (sequences) can share a batch"
            )
        hidden = {p.input.name for p in pairs} | {p.output.name for p in pairs}
        batchable = True

        def axis(name, output):
            return plan.batch_axis(name, output=output)
    else:
        hidden = set()
        batchable = all(dims and not isinstance(dims[0], int) for _, _, dims in tensors)

        def axis(name, output):
            return 0 if batchable else None

    def spec(entries, output):
        return tuple(
            TensorSpec(
                name,
                triton_dtype(onnx_to_numpy(elem)),
                tuple(d if isinstance(d, int) else -1 for d in dims),
                axis(name, output),
            )
            for name, elem, dims in entries
            if name not in hidden
        )

    return ModelSpec(spec(io["inputs"], False), spec(io["outputs"], True), batchable)


def config_entry(t: TensorSpec, batching: bool) -> dict:
    """The config entry of ``t`` (name, data_type, dims and, for a tensor left without dims, reshape)."""
    if not batching:
        return {"name": t.name, "data_type": t.data_type, "dims": list(t.dims)}
    kept = [d for a, d in enumerate(t.dims) if a != t.batch_axis]
    entry = {"name": t.name, "data_type": t.data_type, "dims": kept or [1]}
    if not kept:  # Triton needs dims; [1] reshaped to the model's [] (onnxruntime_backend writes the same)
        entry["reshape"] = {"shape": []}
    return entry


def config_io(spec: ModelSpec, max_batch_size: int) -> tuple:
    """(inputs, outputs) config entries for ``max_batch_size``."""
    batching = spec.batchable and max_batch_size > 0
    return ([config_entry(t, batching) for t in spec.inputs], [config_entry(t, batching) for t in spec.outputs])


def _model_dims(entry: dict) -> list:
    """What the entry says the model gets, batch axis left out: the reshape when there is one (an empty one too)."""
    reshape = entry.get("reshape")
    if isinstance(reshape, dict):  # {"shape": []} in Triton's JSON; {} where a converter drops the empty list
        return list(reshape.get("shape") or [])
    return list(entry.get("dims") or [])


def squeezed_inputs(config: dict, spec: ModelSpec) -> frozenset:
    """Inputs whose config entry is ``dims: [1]`` without the ``reshape: { shape: [] }`` config_io writes: what
    auto-complete leaves (pb_utils.ModelConfig.add_input takes no reshape). gert_triton.layout drops that axis."""
    mbs = int(config.get("max_batch_size", 0) or 0)
    want = {w["name"]: w for w in config_io(spec, mbs)[0]}
    return frozenset(
        e["name"]
        for e in config.get("input", [])
        if e.get("name") in want
        and "reshape" in want[e["name"]]
        and "reshape" not in e
        and list(e.get("dims") or []) == [1]
    )


def check_config(config: dict, spec: ModelSpec, inputs: bool = True, outputs: bool = True) -> None:
    """Refuse (ConfigError) a config whose inputs or outputs contradict the model: other input names, a data_type,
    a rank or a fixed dim that differs from ``config_io``'s entry for the config's max_batch_size. ``inputs`` /
    ``outputs`` False skip a side (a subclass's preprocess / postprocess converts it). A config may leave outputs
    out (they are not served) but not name one the model lacks."""
    mbs = int(config.get("max_batch_size", 0) or 0)
    if mbs > 0 and not spec.batchable:
        raise ConfigError(
            f"max_batch_size is {mbs}, but the model has no batch axis (the first dim of some input or "
            "output is fixed); set max_batch_size: 0, or name the batch axis with parameter batch_dim"
        )
    want_in, want_out = config_io(spec, mbs)
    names = [t["name"] for t in want_in]
    cfg_names = [i.get("name") for i in config.get("input", [])]
    if sorted(cfg_names) != sorted(names):
        raise ConfigError(f"config inputs {cfg_names} do not match the ONNX model's inputs {names}")
    sides = (("input", want_in, inputs), ("output", want_out, outputs))
    for kind, wanted, check in sides:
        if not check:  # a subclass's preprocess / postprocess converts this side (it may add outputs, too)
            continue
        by_name = {w["name"]: w for w in wanted}
        for entry in config.get(kind, []):
            want = by_name.get(entry.get("name"))
            if want is None:  # onnxruntime_backend refuses a config output its model lacks, too
                raise ConfigError(
                    f"config {kind} '{entry.get('name')}' is not an {kind} of the ONNX model; its "
                    f"{kind}s are {list(by_name)}"
                )
            have = entry.get("data_type")
            if have not in (None, "", "TYPE_INVALID", want["data_type"]):
                raise ConfigError(
                    f"config {kind} '{want['name']}' has data_type {have}, but the ONNX model's {kind} "
                    f"is {want['data_type']}"
                )
            if not entry.get("dims"):
                continue
            got, exp = _model_dims(entry), _model_dims(want)
            if got == [1] and exp == [] and "reshape" not in entry:
                continue  # auto-complete's [1] without reshape: the layout drops the axis (squeezed_inputs)
            if len(got) != len(exp) or any(g >= 0 and e >= 0 and g != e for g, e in zip(got, exp)):
                shown = f"dims {list(entry['dims'])}" + (f" reshaped to {got}" if "reshape" in entry else "")
                raise ConfigError(
                    f"config {kind} '{want['name']}' has {shown}"
                    + (" (plus the batch axis, max_batch_size > 0)" if mbs > 0 else "")
                    + f", but the ONNX model's {kind} takes "
                    + (
                        f"dims {want['dims']}" + (f" reshaped to {exp}" if "reshape" in want else "")
                        if mbs > 0
                        else f"shape {exp}"
                    )
                )


def auto_complete(config, spec: ModelSpec, max_batch: Optional[int]) -> None:
    """Fill ``config`` (a pb_utils.ModelConfig) as onnxruntime_backend's auto-complete does: max_batch_size when the
    model is batchable and the config sets none (``max_batch``, else DEFAULT_MAX_BATCH), the outputs only when the
    config lists none (a config that lists some outputs serves only those), and dynamic batching when batching and
    no scheduler is set. Inputs the config leaves out are added (onnxruntime_backend adds them only to a config
    that lists none; the model needs every input, so a partial list could only fail the load)."""
    cfg = config.as_dict()
    if spec.batchable and not cfg.get("max_batch_size") and not cfg.get("input"):
        config.set_max_batch_size(max_batch or DEFAULT_MAX_BATCH)
    mbs = int(config.as_dict().get("max_batch_size", 0) or 0)
    inputs, outputs = config_io(spec, mbs)
    have_in = {i.get("name") for i in cfg.get("input", [])}
    for i in inputs:  # every input the config leaves out (the model needs them all)
        if i["name"] not in have_in:
            config.add_input({k: v for k, v in i.items() if k != "reshape"})  # add_input takes no reshape
    if not cfg.get("output"):
        for o in outputs:
            config.add_output({k: v for k, v in o.items() if k != "reshape"})
    cfg = config.as_dict()
    if (
        spec.batchable
        and mbs > 0
        and not any(k in cfg for k in ("sequence_batching", "ensemble_scheduling", "dynamic_batching"))
    ):
        config.set_dynamic_batching()


def io_config(io: dict) -> tuple:
    """(batchable, inputs, outputs): the entries of ``describe(io)`` with batching when it is batchable."""
    spec = describe(io)
    inputs, outputs = config_io(spec, 1 if spec.batchable else 0)
    return spec.batchable, inputs, outputs


def sequence_io(io: dict, state: dict, batch_dim) -> tuple:
    """(inputs, outputs) with batching of a model whose batch axis ``batch_dim`` names (with a ``state``: its step
    inputs and non-state outputs)."""
    return config_io(describe(io, state, batch_dim), 1)


def only_output(config: dict) -> Optional[frozenset]:
    """The outputs every request asks for when the config declares one: Triton checks the requested names against
    the config and fills in all of them when a client names none, so asking each request is not needed."""
    names = [o.get("name") for o in config.get("output", []) or []]
    return frozenset(names) if len(names) == 1 else None
