"""The one input validator: every front door's inputs are checked here, with one error style.

An error names the input, what was expected and what was given: ``input 'x': expected dtype float32, got
float64 (the model takes float32 of shape ('batch', 4), the input is float64 of shape (3, 4))``. It is an InputError, whose fields let a front door that speaks another
API's language (gert.InferenceSession: ONNX Runtime's exception classes and messages) translate it.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np

from gert.errors import GertError
from gert.core.rows import Rows
from gert.core.shapes import ShapePlan
from gert.core.tensor import DeviceTensor

_KEPT = 1024  # remembered input signatures (cleared when full)
_LAID_OUT = (np.ndarray, Rows, DeviceTensor)  # taken as they are (Rows and device tensors: laid out by the executor)


class InputError(GertError):
    """Inputs a model refuses. ``kind``: "type" (not a dict), "names" (missing / unexpected), "dtype", "rank",
    "dims" (a fixed axis), "dim" (a dynamic dim whose size differs between inputs); ``input``: the input's name;
    "empty" (a dynamic dim other than the batch of size 0; a 0-row request gert cannot answer without a run:
    gert/core/empty_rows.py); ``expected`` / ``actual``: dtype and shape (or the names, for "names")."""

    def __init__(
        self,
        message: str,
        kind: str,
        input: Optional[str] = None,
        expected=None,
        actual=None,
        missing: Sequence[str] = (),
        unexpected: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.kind, self.input, self.expected, self.actual = kind, input, expected, actual
        self.missing, self.unexpected = list(missing), list(unexpected)


class Validator:
    """Checks requests against a ShapePlan: the inputs ``names`` (default: all of the model's), their dtypes, ranks
    and fixed dims, and that each dynamic dim has one size across them. Returns the arrays (C-contiguous numpy
    arrays, or Rows / DeviceTensors as given) and the size of each dynamic dim. Signatures that passed are
    remembered: checking them again is a dict lookup (the per call cost of Model.run)."""

    def __init__(self, plan: ShapePlan, names: Optional[Sequence[str]] = None, takes: str = "the model takes"):
        self.plan = plan
        self.specs = [t for t in plan.inputs if names is None or t.name in names]
        self.names = [t.name for t in self.specs]
        self.takes = takes
        self._axes = [[(axis, plan.input_axes.get((t.name, axis))) for axis in range(len(t.shape))] for t in self.specs]
        self._passed: dict = {}  # ((shape, dtype) per input) -> dim sizes

    def check(self, inputs: Mapping[str, object]) -> tuple:
        """(arrays by input name, {dim: size}); InputError naming the input, the expected and the actual value."""
        names = self.names
        if type(inputs) is dict and len(inputs) == len(names):  # a signature that passed: one loop, no generators
            key = []
            for n in names:
                a = inputs.get(n)
                if type(a) not in _LAID_OUT:
                    break
                key.append((a.shape, a.dtype))
            else:
                sizes = self._passed.get(tuple(key))
                if sizes is not None:
                    arrays = {}
                    for n in names:
                        a = inputs[n]
                        arrays[n] = (
                            a if type(a) is not np.ndarray or a.flags.c_contiguous else np.require(a, requirements="C")
                        )
                    return arrays, dict(sizes)
        arrays, sizes = self._check(inputs)
        if all(type(a) in _LAID_OUT for a in arrays.values()):
            if len(self._passed) >= _KEPT:
                self._passed.clear()
            self._passed[tuple((arrays[n].shape, arrays[n].dtype) for n in names)] = dict(sizes)
        return arrays, sizes

    def _check(self, inputs: Mapping[str, object]) -> tuple:
        if not (type(inputs) is dict or isinstance(inputs, Mapping)):
            raise InputError(
                f"inputs must be a dict of input name -> array, got {type(inputs).__name__}",
                "type",
                actual=type(inputs).__name__,
            )
        missing = [n for n in self.names if n not in inputs]
        extra = [n for n in inputs if n not in self.names]
        if missing or extra:
            raise InputError(
                f"inputs: missing {missing}, unexpected {extra}; {self.takes} {self.names}",
                "names",
                expected=list(self.names),
                actual=list(inputs),
                missing=missing,
                unexpected=extra,
            )
        arrays, sizes, where = {}, {}, {}
        for t, axes in zip(self.specs, self._axes):
            a = inputs[t.name]
            if not isinstance(a, _LAID_OUT):
                a = np.asarray(a)
            if (
                a.dtype != t.dtype
                or a.ndim != len(t.shape)
                or any(dim is None and a.shape[axis] != t.shape[axis] for axis, dim in axes)
            ):
                if a.dtype != t.dtype:
                    kind, want, got = "dtype", f"dtype {t.dtype}", f"{a.dtype}"
                elif a.ndim != len(t.shape):
                    kind, want, got = "rank", f"rank {len(t.shape)}", f"rank {a.ndim}"
                else:
                    axis = next(x for x, dim in axes if dim is None and a.shape[x] != t.shape[x])
                    kind, want, got = "dims", f"axis {axis} of size {t.shape[axis]}", f"{a.shape[axis]}"
                raise InputError(
                    f"input '{t.name}': expected {want}, got {got} (the model takes {t.dtype} of shape "
                    f"{t.shape}, the input is {a.dtype} of shape {tuple(a.shape)})",
                    kind,
                    t.name,
                    (t.dtype, t.shape),
                    (a.dtype, tuple(a.shape)),
                )
            for axis, dim in axes:
                if dim is None:
                    continue
                if dim in sizes and sizes[dim] != a.shape[axis]:
                    raise InputError(
                        f"dim '{dim}' is {sizes[dim]} in {where[dim]} but {a.shape[axis]} in input "
                        f"'{t.name}' axis {axis}",
                        "dim",
                        t.name,
                        sizes[dim],
                        a.shape[axis],
                    )
                sizes[dim] = a.shape[axis]
                where.setdefault(dim, f"input '{t.name}'")
            # np.require keeps 0-d arrays 0-d; Rows and device tensors are laid out by the executor
            arrays[t.name] = a if isinstance(a, (Rows, DeviceTensor)) else np.require(a, requirements="C")
        if 0 in sizes.values():
            self._check_empty(arrays, sizes)
        return arrays, sizes

    def _check_empty(self, arrays: dict, sizes: dict) -> None:
        """A dim other than the batch of size 0 passes only when gert can answer without a run (every output
        empty, its shape known: gert/core/empty_rows.py): no graph runs on an empty tensor, where a kernel may fail
        or abort the process. 0 rows of the batch are the Engine's (a padded batch runs at a gear; else the
        executor answers or refuses them)."""
        for dim, size in sizes.items():
            if size == 0 and dim != "batch":
                _, why = empty_shapes(self.plan, sizes)
                if why:
                    raise empty_error(self.plan, dim, arrays, why)


def empty_shapes(plan: ShapePlan, sizes: Mapping[str, int]) -> tuple:
    """({output: shape}, "") when every output holds no element at these sizes (an axis carries a dim of size 0)
    and its shape is known from the plan's output axes and the model's fixed dims: gert's answer without a run;
    else (None, why not, naming the first output that needs a run)."""
    shapes = {}
    for o in plan.outputs:
        if o.name in plan.value_dependent:
            return None, f"output '{o.name}' has a shape that follows the input values"
        dims = [plan.output_axes.get((o.name, a)) for a in range(len(o.shape))]
        if not any(d is not None and sizes.get(d) == 0 for d in dims):
            return None, f"output '{o.name}' carries none of the dims of size 0"
        shape = []
        for axis, (dim, fixed) in enumerate(zip(dims, o.shape)):
            if dim is not None and dim in sizes:
                shape.append(int(sizes[dim]))
            elif type(fixed) is int and fixed >= 0:
                shape.append(fixed)
            else:
                return None, f"output '{o.name}' has an axis {axis} whose size is not known without a run"
        shapes[o.name] = tuple(shape)
    return shapes, ""


def empty_error(plan: ShapePlan, dim: str, arrays: Mapping[str, object], why: str) -> InputError:
    """The InputError for a request whose dim ``dim`` has size 0 and that gert cannot answer without a run: names
    the first input that carries the dim, its axis, and ``why``."""
    name, axis = next(
        ((n, a) for (n, a), d in plan.input_axes.items() if d == dim and n in arrays), (next(iter(arrays), "?"), 0)
    )
    arr = arrays.get(name)
    spec = next((t for t in plan.inputs if t.name == name), None)
    shape = tuple(arr.shape) if arr is not None else ()
    dtype = getattr(arr, "dtype", None)
    return InputError(
        f"input '{name}': expected dim '{dim}' (axis {axis}) of size >= 1, got 0: {why}, so the "
        f"answer needs a run, and gert runs no graph on an empty tensor (a kernel may fail or abort the "
        f"process on one) (the model takes {spec.dtype if spec else '?'} of shape "
        f"{spec.shape if spec else '?'}, the input is {dtype} of shape {shape})",
        "empty",
        name,
        (spec.dtype, spec.shape) if spec else None,
        (dtype, shape),
    )
