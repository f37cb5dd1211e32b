"""`gert repo init MODEL.onnx REPO --pre MOD:FN --post MOD:FN`: a Triton ensemble around a gert model.

Written beside REPO/NAME (the gert model):
  REPO/NAME_pre       a Python model running the pre step (gert_triton.steps): the client's inputs (the step's
                      declared inputs) -> the model's inputs and the step's declared extra outputs
  REPO/NAME_post      a Python model running the post step: the model's outputs and the pre step's extra outputs ->
                      the step's declared outputs
  REPO/NAME_ensemble  ``platform: "ensemble"``: pre -> NAME -> post in one request (Triton passes the tensors
                      between the steps inside the server), its inputs the pre step's, its outputs the post step's
Either step may be left out (then the ensemble starts at, or ends with, the model). Every entry has the model's
max_batch_size: a step then runs per row of a request (gert_triton.steps.run_rows).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Callable, Optional

from gert.errors import GertError
from gert_triton.pbtxt import instances_and_parameters, pbtxt_string, tensor_block
from gert_triton.steps import declared, resolve

STEP_MODEL_PY = ("from gert_triton.steps import TritonPythonModel  # noqa: F401  (parameter 'function' names the "
                 "step)\n")


@dataclass(frozen=True)
class StepSource:
    """A step as --pre / --post name it: "module:function" (importable where the server runs) or
    "path/file.py:function" (the file is copied into the step's version dir, which the stub imports from)."""

    spec: str          # what config parameter 'function' says: "module:function"
    fn: Callable
    file: Optional[str]  # the file to copy, for the path form


def load_step(text: str) -> StepSource:
    """Import the step ``text`` names (before anything is written: a bad name fails here)."""
    target, sep, attr = str(text).rpartition(":")
    if not sep or not target or not attr:
        raise GertError(f"step {text!r} is not 'module:function' or 'file.py:function'")
    if not target.endswith(".py"):
        return StepSource(text, resolve(text), None)
    if not os.path.isfile(target):
        raise GertError(f"step {text!r}: {target} is not a file")
    module = os.path.splitext(os.path.basename(target))[0]
    spec = importlib.util.spec_from_file_location(module, target)
    mod = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(os.path.abspath(target))
    sys.path.insert(0, folder)  # the file may import its neighbours, as it will from the version dir
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(folder)
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise GertError(f"step {text!r}: {target} has no function {attr!r}")
    return StepSource(f"{module}:{attr}", fn, os.path.abspath(target))


def _entries(tensors) -> list:
    return [{"name": t.name, "data_type": t.data_type, "dims": list(t.dims)} for t in tensors]


@dataclass(frozen=True)
class Ensemble:
    """The three config texts and what the step models run."""

    configs: dict   # entry name -> config.pbtxt text
    steps: dict     # entry name -> StepSource


def plan(name: str, mbs: int, model_inputs: list, model_outputs: list, pre: Optional[StepSource],
         post: Optional[StepSource]) -> Ensemble:
    """The pre / post / ensemble configs around model ``name`` whose config entries are ``model_inputs`` /
    ``model_outputs`` (gert_triton.model_config.config_io's, for ``mbs``)."""
    if pre is None and post is None:
        raise GertError("an ensemble needs a pre or a post step")
    model_in = {e["name"] for e in model_inputs}
    model_out = {e["name"] for e in model_outputs}
    configs, steps = {}, {}
    extra = []  # the pre step's outputs beyond the model's inputs: handed to the post step
    client_inputs = model_inputs
    if pre is not None:
        client_inputs = _entries(declared(pre.fn, "inputs"))
        if not client_inputs:
            raise GertError(f"pre step {pre.spec!r} declares no inputs: decorate it with "
                            "gert_triton.steps.step(inputs={name: (dtype, dims)})")
        extra = _entries(t for t in declared(pre.fn, "outputs") if t.name not in model_in)
        clash = sorted(({e["name"] for e in extra} & model_out) | ({e["name"] for e in client_inputs} & model_in))
        if clash:
            raise GertError(f"pre step {pre.spec!r}: tensor names {clash} are the model's own; rename them")
        text = (f'name: "{name}_pre"\nbackend: "python"\nmax_batch_size: {mbs}\n'
                + tensor_block("input", client_inputs) + tensor_block("output", model_inputs + extra))
        configs[f"{name}_pre"] = text + instances_and_parameters(1, {"function": pre.spec, "role": "pre"})
        steps[f"{name}_pre"] = pre
    client_outputs = model_outputs
    if post is not None:
        client_outputs = _entries(declared(post.fn, "outputs"))
        if not client_outputs:
            raise GertError(f"post step {post.spec!r} declares no outputs: decorate it with "
                            "gert_triton.steps.step(outputs={name: (dtype, dims)})")
        text = (f'name: "{name}_post"\nbackend: "python"\nmax_batch_size: {mbs}\n'
                + tensor_block("input", model_outputs + extra) + tensor_block("output", client_outputs))
        configs[f"{name}_post"] = text + instances_and_parameters(1, {"function": post.spec, "role": "post"})
        steps[f"{name}_post"] = post

    def map_block(kind: str, names) -> str:
        return "".join(f"      {kind} {{ key: {pbtxt_string(n)} value: {pbtxt_string(n)} }}\n" for n in names)

    def step_block(model: str, inputs, outputs) -> str:
        return (f"    {{\n      model_name: \"{model}\"\n      model_version: -1\n"
                + map_block("input_map", inputs) + map_block("output_map", outputs) + "    }")

    chain = []
    if pre is not None:
        chain.append(step_block(f"{name}_pre", [e["name"] for e in client_inputs],
                                [e["name"] for e in model_inputs + extra]))
    chain.append(step_block(name, [e["name"] for e in model_inputs], [e["name"] for e in model_outputs]))
    if post is not None:
        chain.append(step_block(f"{name}_post", [e["name"] for e in model_outputs + extra],
                                [e["name"] for e in client_outputs]))
    configs[f"{name}_ensemble"] = (f'name: "{name}_ensemble"\nplatform: "ensemble"\nmax_batch_size: {mbs}\n'
                                   + tensor_block("input", client_inputs) + tensor_block("output", client_outputs)
                                   + "ensemble_scheduling {\n  step [\n" + ",\n".join(chain) + "\n  ]\n}\n")
    return Ensemble(configs, steps)


def write(repo: str, ensemble: Ensemble, overwrite: bool = False) -> list:
    """Write every entry of ``ensemble`` under ``repo`` (refused when one exists, unless ``overwrite``)."""
    targets = [os.path.join(repo, n) for n in ensemble.configs]
    taken = [t for t in targets if os.path.exists(t)]
    if taken and not overwrite:
        raise GertError(f"{', '.join(taken)} exist(s); choose another --name or remove them")
    for entry, text in ensemble.configs.items():
        version = os.path.join(repo, entry, "1")
        os.makedirs(version, exist_ok=True)  # an ensemble needs its version dir too, empty
        with open(os.path.join(repo, entry, "config.pbtxt"), "w") as f:
            f.write(text)
        src = ensemble.steps.get(entry)
        if src is not None:
            with open(os.path.join(version, "model.py"), "w") as f:
                f.write(STEP_MODEL_PY)
            if src.file:
                shutil.copyfile(src.file, os.path.join(version, os.path.basename(src.file)))
    return targets
