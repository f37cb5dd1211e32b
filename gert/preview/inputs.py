"""Inputs for a model's graph inputs, and a plain ONNX Runtime run: what `gert check --fix` and the precision
comparison feed a model. The user's arrays and shapes first; else the model's own example shapes (ONNX metadata
``gert.example_shapes``), else its declared dims (a dynamic dim: ``dim``), with random values. Real inputs give real
answers; an input gert had to invent is recorded (``Invented``) so that a model that refuses it can be named."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gert.errors import GertError

# metadata_props key a model may carry its example input shapes in: JSON {"input name": [d0, d1, ...]}
EXAMPLE_SHAPES_KEY = "gert.example_shapes"


class FeedError(GertError):
    """An input given for a model does not fit it: ``input`` names it, ``expected`` / ``actual`` the values."""

    def __init__(self, message: str, input: str | None = None, expected=None, actual=None) -> None:
        super().__init__(message)
        self.input, self.expected, self.actual = input, expected, actual


@dataclass(frozen=True)
class Invented:
    """An input gert made up: its dtype, its dims as declared (an int, or the dynamic dim's name or None), the shape
    it got, and where that shape came from ("declared": a dynamic dim taken as ``dim``, "example": the model's
    metadata, "static": every dim fixed, "shape": the user's shape)."""

    name: str
    dtype: np.dtype
    declared: tuple
    shape: tuple
    origin: str

    @property
    def guessed_dims(self) -> bool:
        """Some dim's size was a guess (a dynamic dim, or the rank, neither the user nor the model's metadata
        gave)."""
        return self.origin == "declared"

    def declared_text(self) -> str:
        if self.declared is None:
            return "(rank not declared)"
        return "[" + ", ".join(str(d) if isinstance(d, int) else (d or "?") for d in self.declared) + "]"

    def _dims(self, sep: str) -> str:
        if self.declared is None:
            return sep.join(("<d0>", "<d1>", "..."))
        return sep.join(str(d) if isinstance(d, int) else f"<{d or 'N'}>" for d in self.declared)

    def cli_hint(self) -> str:
        """How to give it on gert's command line."""
        given = f"--input {self.name}=FILE.npy ({self.dtype} {self.declared_text()})"
        if self.guessed_dims:
            return f"{given} or --shape {self.name}={self._dims('x')}"
        return f"{given}: its random values do not work"

    def python_hint(self) -> str:
        """How to give it in Python (gert.cann_check(..., fix=..., inputs=..., shapes=...))."""
        given = f"inputs={{'{self.name}': <{self.dtype} array {self.declared_text()}>}}"
        if self.guessed_dims:
            return f"{given} or shapes={{'{self.name}': ({self._dims(', ')})}}"
        return f"{given}: its random values do not work"

    def describe(self) -> str:
        what = {
            "declared": "dynamic dims taken as",
            "example": "the model's example shape",
            "static": "its declared shape",
            "shape": "the shape given",
        }[self.origin]
        return f"input '{self.name}' ({self.dtype} {self.declared_text()}; random values, {what} {self.shape})"


@dataclass
class Feeds:
    """An array per graph input, and the inputs among them gert invented."""

    arrays: dict
    invented: list = field(default_factory=list)

    def invented_named(self, names) -> list:
        return [i for i in self.invented if i.name in names]


def graph_inputs(proto) -> list:
    """The graph inputs that are not initializers (ValueInfoProtos)."""
    inits = {t.name for t in proto.graph.initializer}
    return [v for v in proto.graph.input if v.name not in inits]


def _declared(v) -> tuple | None:
    """The input's dims: an int where fixed, the dim's name (or None) where dynamic; None when no shape is declared."""
    if not v.type.tensor_type.HasField("shape"):
        return None
    return tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in v.type.tensor_type.shape.dim
    )


def _dtype(v) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))


def example_shapes(proto) -> dict:
    """The model's example input shapes from its metadata (``gert.example_shapes``), {} when it has none."""
    for p in proto.metadata_props:
        if p.key != EXAMPLE_SHAPES_KEY:
            continue
        try:
            data = json.loads(p.value)
            return {str(k): tuple(int(d) for d in v) for k, v in dict(data).items()}
        except (ValueError, TypeError) as e:
            raise FeedError(f"the model's metadata {EXAMPLE_SHAPES_KEY} is not JSON {{name: [dims]}}: {e}") from None
    return {}


def _check_shape(name: str, declared: tuple | None, shape: tuple, what: str) -> None:
    """A shape for input ``name`` must have its rank and its fixed dims (any, where the model declares none)."""
    if declared is None:
        return
    if len(shape) != len(declared):
        raise FeedError(
            f"input '{name}': {what} has rank {len(shape)} (shape {tuple(shape)}); the model takes rank "
            f"{len(declared)} {list(declared)}",
            name,
            declared,
            tuple(shape),
        )
    for axis, (d, s) in enumerate(zip(declared, shape)):
        if isinstance(d, int) and d > 0 and d != s:
            raise FeedError(
                f"input '{name}': {what} has {s} at axis {axis}; the model fixes it to {d} (shape {list(declared)})",
                name,
                declared,
                tuple(shape),
            )


def make_feeds(
    proto,
    given: Mapping[str, np.ndarray] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    dim: int = 1,
) -> Feeds:
    """An array per graph input: ``given`` ones (checked: dtype, rank, fixed dims), else random values of the declared
    dtype in the shape ``shapes`` gives, else the model's example shape, else the declared one (dynamic dims =
    ``dim``). Floats N(0, 1); integers in [0, 3); bools. Names that are no input of the model are refused."""
    rng = np.random.default_rng(seed)
    given, shapes = dict(given or {}), dict(shapes or {})
    ins = graph_inputs(proto)
    names = [v.name for v in ins]
    for what, named in (("an array", given), ("a shape", shapes)):
        unknown = sorted(set(named) - set(names))
        if unknown:
            raise FeedError(
                f"unknown input '{unknown[0]}' given {what}; the model's inputs are {names}",
                unknown[0],
                names,
                unknown[0],
            )
    both = sorted(set(given) & set(shapes))
    if both:
        raise FeedError(f"input '{both[0]}' is given both as an array and as a shape: give one", both[0])
    examples = {k: v for k, v in example_shapes(proto).items() if k in names}
    out = Feeds({})
    for v in ins:
        declared, dtype = _declared(v), _dtype(v)
        if v.name in given:
            a = np.asarray(given[v.name])
            if a.dtype != dtype:
                raise FeedError(
                    f"input '{v.name}': the model takes {dtype}, the array given is {a.dtype}",
                    v.name,
                    str(dtype),
                    str(a.dtype),
                )
            _check_shape(v.name, declared, a.shape, "the array given")
            out.arrays[v.name] = a
            continue
        if v.name in shapes:
            shape, origin = tuple(int(d) for d in shapes[v.name]), "shape"
            _check_shape(v.name, declared, shape, "the shape given")
        elif v.name in examples:
            shape, origin = examples[v.name], "example"
            _check_shape(v.name, declared, shape, f"its example shape ({EXAMPLE_SHAPES_KEY})")
        else:
            shape = tuple(d if isinstance(d, int) and d > 0 else dim for d in declared or ())
            fixed = declared is not None and all(isinstance(d, int) and d > 0 for d in declared)
            origin = "static" if fixed else "declared"
        out.arrays[v.name] = _random(v.name, dtype, shape, rng)
        out.invented.append(Invented(v.name, dtype, declared, shape, origin))
    return out


def _random(name: str, dtype: np.dtype, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 3, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    raise FeedError(f"input '{name}': no random values for dtype {dtype}; give the input", name, None, str(dtype))


def random_inputs(
    proto,
    given: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    dim: int = 1,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> dict:
    """The arrays of make_feeds (the precision comparison's inputs)."""
    return make_feeds(proto, given, shapes, seed, dim).arrays


def upstream_inputs(proto, node_name: str) -> set | None:
    """The graph inputs the node named ``node_name`` of the main graph depends on (None: no such node), through its
    inputs and the outer names its subgraphs read (an If branch reads the main graph's tensors by name)."""
    producer = {o: n for n in proto.graph.node for o in n.output}
    node = next((n for n in proto.graph.node if n.name == node_name), None)
    if node is None:
        return None
    names = {v.name for v in graph_inputs(proto)}
    found, seen, todo = set(), set(), _reads(node)
    while todo:
        t = todo.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        if t in names:
            found.add(t)
        elif t in producer:
            todo.extend(_reads(producer[t]))
    return found


def _reads(node) -> list:
    """The tensor names a node reads: its inputs, and every name its subgraphs' nodes read (outer ones among them)."""
    out = list(node.input)
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in g.node:
                out.extend(_reads(n))
    return out


def ort_session(model: bytes):
    """ONNX Runtime's CPU provider on ``model`` (the reference gert's host NPU computes with); its own log quiet:
    the caller reports a failure."""
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

    so = ort.SessionOptions()
    so.log_severity_level = 4
    return InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])


def run_session(sess, feeds: Mapping[str, np.ndarray]) -> dict:
    """Outputs by name of one run of ``sess``."""
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, dict(feeds))))


def ort_run(model: bytes, feeds: Mapping[str, np.ndarray]) -> dict:
    """Outputs by name from ONNX Runtime's CPU provider."""
    return run_session(ort_session(model), feeds)
