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
from gert_triton.pbtxt import instance_group, parameters, write_config
from gert_triton.steps import declared, resolve

STEP_MODEL_PY = "from gert_triton.steps import TritonPythonModel  # noqa: F401  (parameter 'function' names the step)\n"


@dataclass(frozen=True)
class StepSource:
    """A step as --pre / --post name it: "module:function" (importable where the server runs) or
    "path/file.py:function" (the file is copied into the step's version dir, which the stub imports from)."""

    spec: str  # what config parameter 'function' says: "module:function"
    fn: Callable
    file: Optional[str]  # the file to copy, for the path form


# module names a step file may not have in a step model's version dir: the step model's own model.py, and the module
# only the stub has (gert_triton.steps imports the step as "module:function" there)
RESERVED_MODULES = ("model", "triton_python_backend_utils", "c_python_backend_utils")


def step_module_name(path: str) -> str:
    """The module name the step file ``path`` is copied and imported under (its own file name, without .py), or
    GertError when the stub could not import it by that name: not an identifier, the step model's own ``model``,
    or the name of a module the server's Python finds first (json.py, numpy.py: the stub would import that one)."""
    module = os.path.splitext(os.path.basename(path))[0]
    if not module.isidentifier():
        raise GertError(
            f"step file {path}: its module name {module!r} is not a Python identifier; rename the file "
            "(e.g. my_steps.py)"
        )
    if module in RESERVED_MODULES:
        raise GertError(
            f"step file {path}: it would be copied as {module}.py into the step model's version dir, "
            f"where {module!r} is the step model's own module; rename the file (e.g. {module}_steps.py)"
        )
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    origin = getattr(found, "origin", None)
    if found is not None and not (
        origin and os.path.isfile(origin) and os.path.realpath(origin) == os.path.realpath(path)
    ):
        raise GertError(
            f"step file {path}: its module name {module!r} is also the module "
            f"{origin or module!r} the server's Python imports first; rename the file "
            f"(e.g. {module}_steps.py)"
        )
    return module


def load_step(text: str) -> StepSource:
    """Import the step ``text`` names (before anything is written: a bad name fails here)."""
    target, sep, attr = str(text).rpartition(":")
    if not sep or not target or not attr:
        raise GertError(f"step {text!r} is not 'module:function' or 'file.py:function'")
    if not target.endswith(".py"):
        return StepSource(text, resolve(text), None)
    if not os.path.isfile(target):
        raise GertError(f"step {text!r}: {target} is not a file")
    module = step_module_name(target)
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


def _step_config(entry: str, mbs: int, inputs: list, outputs: list, src: StepSource, role: str) -> str:
    """The config.pbtxt of a step model (gert_triton.steps serves it; parameter 'function' names the step)."""
    return write_config(
        {
            "name": entry,
            "backend": "python",
            "max_batch_size": mbs,
            "input": inputs,
            "output": outputs,
            "instance_group": instance_group(1),
            "parameters": parameters({"function": src.spec, "role": role}),
        }
    )


@dataclass(frozen=True)
class Ensemble:
    """The three config texts and what the step models run."""

    configs: dict  # entry name -> config.pbtxt text
    steps: dict  # entry name -> StepSource


def plan(
    name: str, mbs: int, model_inputs: list, model_outputs: list, pre: Optional[StepSource], post: Optional[StepSource]
) -> Ensemble:
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
            raise GertError(
                f"pre step {pre.spec!r} declares no inputs: decorate it with "
                "gert_triton.steps.step(inputs={name: (dtype, dims)})"
            )
        extra = _entries(t for t in declared(pre.fn, "outputs") if t.name not in model_in)
        clash = sorted(({e["name"] for e in extra} & model_out) | ({e["name"] for e in client_inputs} & model_in))
        if clash:
            raise GertError(f"pre step {pre.spec!r}: tensor names {clash} are the model's own; rename them")
        configs[f"{name}_pre"] = _step_config(f"{name}_pre", mbs, client_inputs, model_inputs + extra, pre, "pre")
        steps[f"{name}_pre"] = pre
    client_outputs = model_outputs
    if post is not None:
        client_outputs = _entries(declared(post.fn, "outputs"))
        if not client_outputs:
            raise GertError(
                f"post step {post.spec!r} declares no outputs: decorate it with "
                "gert_triton.steps.step(outputs={name: (dtype, dims)})"
            )
        configs[f"{name}_post"] = _step_config(f"{name}_post", mbs, model_outputs + extra, client_outputs, post, "post")
        steps[f"{name}_post"] = post

    def step_entry(model: str, inputs, outputs) -> dict:
        return {
            "model_name": model,
            "model_version": -1,
            "input_map": {n: n for n in inputs},
            "output_map": {n: n for n in outputs},
        }

    chain = []
    if pre is not None:
        chain.append(
            step_entry(f"{name}_pre", [e["name"] for e in client_inputs], [e["name"] for e in model_inputs + extra])
        )
    chain.append(step_entry(name, [e["name"] for e in model_inputs], [e["name"] for e in model_outputs]))
    if post is not None:
        chain.append(
            step_entry(f"{name}_post", [e["name"] for e in model_outputs + extra], [e["name"] for e in client_outputs])
        )
    configs[f"{name}_ensemble"] = write_config(
        {
            "name": f"{name}_ensemble",
            "platform": "ensemble",
            "max_batch_size": mbs,
            "input": client_inputs,
            "output": client_outputs,
            "ensemble_scheduling": {"step": chain},
        }
    )
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
            if src.file:  # under its own module name (step_module_name): never over the model.py just written
                shutil.copyfile(src.file, os.path.join(version, step_module_name(src.file) + ".py"))
    return targets
