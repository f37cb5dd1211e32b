"""A model's load-time analysis, in this process or in a child process that exits when it is done.

At load gert reads what a model takes and gives (gert/core/onnx_io.py), proves which output rows are independent
(gert/core/row_proof.py) and places each output's batch axis (gert/core/shapes.py): ONNX's parser and shape
inference, whose memory stays with the process that imported them (~15 MB: ``onnx``, protobuf's descriptors, ONNX's
operator schemas; issue 41). A serving process (a Triton stub) needs only the result: with ``load_analysis="process"``
(gert_triton's default) the analysis runs in a fresh interpreter, the model's bytes handed over on its stdin and the
result (plain data: the I/O, the ShapePlan) read back from its stdout, and the serving process never imports
``onnx`` (its compiles infer shapes without it: gert/core/shape_infer.py). Same code, same result, same errors: the
child raises what the load would raise here, and it is raised here.

A child that cannot start or import gert (an interpreter without gert on its path) leaves the analysis to this
process, with a warning: what the load computes does not depend on where.
"""

from __future__ import annotations

import os
import pickle
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from gert.core.shapes import ShapePlan, plan_shapes

PLACES = ("inline", "process")


@dataclass(frozen=True)
class Described:
    """A model's I/O as gert.core.onnx_io.read gives it, without the parsed model: ``io`` (read_onnx_io's form),
    the value-dependent outputs, whether some data is in external files."""

    io: dict
    value_dependent: list
    external: bool


@dataclass(frozen=True)
class Analysis:
    described: Described
    plan: ShapePlan


@dataclass(frozen=True)
class PlanArgs:
    """plan_shapes' settings (LoadConfig's fields of the same names)."""

    gears: Optional[Mapping[str, Any]] = None
    shape_policy: Optional[Mapping[str, str]] = None
    pad_value: Any = 0
    max_batch: Optional[int] = None
    output_dims: Optional[Mapping[str, Mapping[int, str]]] = None
    batch_dim: Any = None
    state: Optional[Mapping[str, str]] = None
    rows_independent: Any = None


def describe(data: bytes, model_dir: Optional[str] = None, place: str = "inline") -> Described:
    """The model's I/O (gert.core.onnx_io.read), read where ``place`` says."""
    return _where(place, ("describe", data, model_dir, None))


def read_io(data: bytes, place: str = "inline") -> dict:
    """The model's I/O alone (``describe(data).io``): as the file declares it (gert._cann.read_onnx_io, no onnx)
    where it declares every output's shape and element type, which shape inference would not change
    (gert.core.valuedep.complete_outputs); else described where ``place`` says."""
    from gert import _cann

    io = _cann.read_onnx_io(data)  # a file that is no ONNX model fails here, as in onnx_io.read
    if all(dims is not None and elem for _, elem, dims in io["outputs"]):
        return io
    return describe(data, None, place).io


def analyse(data: bytes, model_dir: Optional[str], args: PlanArgs, place: str = "inline") -> Analysis:
    """The model's I/O and shape plan, computed where ``place`` says."""
    return _where(place, ("analyse", data, model_dir, args))


def _where(place: str, job: tuple):
    if place not in PLACES:
        raise ValueError(f"load_analysis: expected one of {PLACES}, got {place!r}")
    if place == "process":
        done = _in_child(job)
        if done is not None:
            value, warned = done
            for category, message in warned:  # the child's warnings, pointing where the load's own point
                warnings.warn(message, category, stacklevel=4)
            return value
    return _run(job)


def _run(job: tuple):
    """The analysis itself (in this process)."""
    from gert.core import onnx_io  # onnx: imported by the first load, not by `import gert`

    kind, data, model_dir, args = job
    read = onnx_io.read(data, model_dir)
    described = Described(read.io, read.value_dependent, read.external)
    if kind == "describe":
        return described
    plan = plan_shapes(
        read.io,
        args.gears,
        args.shape_policy,
        args.pad_value,
        args.max_batch,
        args.output_dims,
        args.batch_dim,
        args.state,
        model=read.proto,
        value_dependent=read.value_dependent,
        rows_independent=args.rows_independent,
    )
    return Analysis(described, plan)


def _in_child(job: tuple):
    """``job`` run by a fresh interpreter (this one's executable and import path): (its result, the warnings it
    raised), the load's error raised, or None where the child could not run it."""
    import subprocess

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in sys.path if p and os.path.isdir(p))
    # the working directory is not put on the child's path (-P); it runs in the folder gert is imported from. The
    # child imports this module by its name, so that what it pickles names gert.core.load_analysis's classes
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    kind, data, model_dir, args = job
    try:
        child = subprocess.Popen(
            [sys.executable, "-P", "-c", "from gert.core.load_analysis import main; raise SystemExit(main())"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=here,
        )
    except OSError as e:
        return _not_run(f"{sys.executable} did not start: {e}")
    assert child.stdin is not None
    try:  # the job, then the model's bytes as they are (no copy of them here); the child reads all before it writes
        child.stdin.write(pickle.dumps((kind, len(data), model_dir, args), protocol=pickle.HIGHEST_PROTOCOL))
        child.stdin.write(memoryview(data))
        child.stdin.close()
    except BrokenPipeError:
        pass  # the child exited early: its status and stderr say why
    child.stdin = None  # closed: communicate() only reads
    out, err = child.communicate()
    if child.returncode != 0 or not out:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-3:]
        return _not_run(f"exit status {child.returncode}: {' | '.join(tail)}")
    status, value, warned = pickle.loads(out)  # noqa: S301 - our own child's answer to our own job
    if status == "error":
        raise value
    return value, warned


def _not_run(why: str) -> None:
    warnings.warn(f"gert: the load analysis ran in this process: its child process failed ({why})", stacklevel=4)
    return None


def _ours(cls: type) -> bool:
    """A class of gert's or Python's own, which the parent unpickles without importing another package."""
    return cls.__module__.split(".")[0] in ("gert", "builtins", "warnings")


def main() -> int:
    """The child: a pickled job on stdin; (status, result or exception, [(warning category, message)]) pickled on
    stdout. Exceptions and warning categories of other packages than gert's and Python's go back as GertError and
    UserWarning naming their type: unpickling them would import their package (onnx) into the parent."""
    from gert.errors import GertError

    stdin = sys.stdin.buffer
    kind, size, model_dir, args = pickle.load(stdin)  # noqa: S301 - from the parent that started this process
    data = stdin.read(size)
    if len(data) != size:
        raise SystemExit(f"load analysis: {len(data)} of the model's {size} bytes arrived")
    job = (kind, data, model_dir, args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            answer: tuple = ("ok", _run(job))
        except Exception as e:  # noqa: BLE001 - every error of the load goes back to be raised there
            answer = ("error", e if _ours(type(e)) else GertError(f"{type(e).__name__}: {e}"))
    warned = [
        (w.category, str(w.message)) if _ours(w.category) else (UserWarning, f"{w.category.__name__}: {w.message}")
        for w in caught
    ]
    try:
        out = pickle.dumps((*answer, warned), protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(out)  # noqa: S301 - an exception whose class does not rebuild from its args fails here
    except Exception:  # noqa: BLE001 - a GertError with the message
        out = pickle.dumps(("error", GertError(str(answer[1])), warned))
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
    return 0
