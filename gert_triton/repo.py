"""`gert repo init MODEL.onnx REPO [--name NAME] [--param KEY=VALUE]... [--instances N] [--state IN=OUT]...
[--batch-dim DIM]`: a model repository entry that serves the model with gert (a stateful model with Triton's
sequence batcher)."""

from __future__ import annotations

import os
import shutil
from typing import Optional

from gert.errors import GertError
from gert_triton.config import parse_batch_dim, parse_state, state_parameter
from gert_triton.model_config import DEFAULT_MAX_BATCH, config_io, describe, onnx_io
from gert_triton.pbtxt import block_dict, instance_group, parameters as parameter_entries, write_config

MODEL_PY = "from gert_triton import TritonPythonModel  # noqa: F401  (config.pbtxt parameters drive the rest)\n"


def config_pbtxt(
    name: str,
    io: dict,
    max_batch_size: Optional[int] = None,
    parameters: Optional[dict] = None,
    instances: int = 1,
    sequence: Optional[dict] = None,
) -> str:
    """``sequence``: a stateful model's {"state": {in: out}, "batch_dim": ..., "strategy": "oldest"|"direct",
    "idle_us": int}: only the step inputs and non-state outputs, and a sequence_batching block instead of
    dynamic_batching (Triton takes one of the two). The inputs and outputs come from gert_triton.model_config, as
    auto-complete's and the load-time check's do, with the state and batch_dim the parameters give."""
    parameters = parameters or {}
    state = (
        dict(sequence["state"]) if sequence else (parse_state(parameters["state"]) if parameters.get("state") else {})
    )
    batch_dim = sequence.get("batch_dim") if sequence else None
    if batch_dim is None and parameters.get("batch_dim"):
        batch_dim = parse_batch_dim(parameters["batch_dim"])
    spec = describe(io, state, batch_dim)
    mbs = (max_batch_size if max_batch_size is not None else DEFAULT_MAX_BATCH) if spec.batchable else 0
    if sequence and mbs < 1:
        raise GertError(f"a stateful model batches its sequences: max_batch_size must be >= 1, got {mbs}")
    inputs, outputs = config_io(spec, mbs)
    config = {
        "name": check_model_name(name),
        "backend": "python",
        "max_batch_size": mbs,
        "input": inputs,
        "output": outputs,
    }
    if sequence:
        from gert_triton.sequences import sequence_block

        config.update(
            block_dict(sequence_block(sequence.get("strategy", "oldest"), sequence.get("idle_us", 5_000_000), mbs))
        )
    elif mbs > 0:
        config["dynamic_batching"] = {"max_queue_delay_microseconds": 2000}
    config["instance_group"] = instance_group(instances)
    if parameters:
        config["parameters"] = parameter_entries(parameters)
    return write_config(config)  # escaped, parsed back and compared (gert_triton/pbtxt.py)


def check_model_name(name: str) -> str:
    """``name`` if it can be a model's directory and config name: not empty, no '/', no leading '.', no control
    character (a newline in a directory name only hides it); else GertError naming the character."""
    if not name or "/" in name or name.startswith("."):
        raise GertError(f"model name {name!r} is not a valid directory name")
    bad = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if bad is not None:
        raise GertError(
            f"model name {name!r} contains the control character {bad!r} (U+{ord(bad):04X}); choose another with --name"
        )
    return name


def init_repo(
    model_path: str,
    repo: str,
    name: Optional[str] = None,
    max_batch_size: Optional[int] = None,
    parameters: Optional[dict] = None,
    overwrite: bool = False,
    instances: int = 1,
    sequence: Optional[dict] = None,
    pre: Optional[str] = None,
    post: Optional[str] = None,
) -> str:
    """Write REPO/NAME/config.pbtxt, REPO/NAME/1/model.onnx and the one-line REPO/NAME/1/model.py; with ``pre`` /
    ``post`` ("module:function" or "file.py:function") also REPO/NAME_pre, REPO/NAME_post and the ensemble
    REPO/NAME_ensemble around it (gert_triton.ensemble)."""
    if not os.path.isfile(model_path):
        raise GertError(f"{model_path!r} is not a file")
    if int(instances) < 1:
        raise GertError(f"instances must be >= 1, got {instances}")
    name = check_model_name(name or os.path.splitext(os.path.basename(model_path))[0])
    io = onnx_io(model_path)
    if sequence:  # the state and batch axis go to the parameters the model loads with
        parameters = {**(parameters or {}), "state": state_parameter(sequence["state"])}
        if sequence.get("batch_dim") is not None:
            bd = sequence["batch_dim"]
            parameters["batch_dim"] = bd if isinstance(bd, str) else ",".join(bd)
    config = config_pbtxt(name, io, max_batch_size, parameters, instances, sequence)  # fails before writing
    target = os.path.join(repo, name)
    if os.path.exists(target) and not overwrite:
        raise GertError(f"{target} exists; choose another --name or remove it")
    ensemble = None
    if pre or post:
        ensemble = _ensemble(name, io, max_batch_size, parameters, sequence, pre, post)
        taken = [n for n in ensemble.configs if os.path.exists(os.path.join(repo, n))]
        if taken and not overwrite:
            raise GertError(
                f"{', '.join(os.path.join(repo, n) for n in taken)} exist(s); choose another --name or remove them"
            )
    os.makedirs(os.path.join(target, "1"), exist_ok=True)
    shutil.copyfile(model_path, os.path.join(target, "1", "model.onnx"))
    with open(os.path.join(target, "1", "model.py"), "w") as f:
        f.write(MODEL_PY)
    with open(os.path.join(target, "config.pbtxt"), "w") as f:
        f.write(config)
    if ensemble is not None:
        from gert_triton import ensemble as ens

        ens.write(repo, ensemble, overwrite=True)
    return target


def _ensemble(
    name: str,
    io: dict,
    max_batch_size: Optional[int],
    parameters: Optional[dict],
    sequence: Optional[dict],
    pre: Optional[str],
    post: Optional[str],
):
    """The ensemble entries around model ``name`` (its config entries as config_pbtxt writes them)."""
    from gert_triton import ensemble as ens

    if sequence:
        raise GertError(
            "--pre / --post: an ensemble around a stateful model is not supported (the sequence "
            "controls would have to pass through every step)"
        )
    spec = describe(io, None, parse_batch_dim(parameters["batch_dim"]) if (parameters or {}).get("batch_dim") else None)
    mbs = (max_batch_size if max_batch_size is not None else DEFAULT_MAX_BATCH) if spec.batchable else 0
    inputs, outputs = config_io(spec, mbs)
    return ens.plan(
        name, mbs, inputs, outputs, ens.load_step(pre) if pre else None, ens.load_step(post) if post else None
    )
