"""Edge partitioning for gert.InferenceSession: the nodes GE's parser refuses run on ONNX Runtime's CPU provider
before (a prefix) or after (a suffix) the core, and the core runs on gert.

ONNX Runtime's CANN execution provider hands CANN the nodes CANN's parser takes and leaves the rest to the CPU
provider. gert compiles one graph per model, so it takes the shape that keeps one graph: every refused node goes
to the CPU with all its ancestors (a prefix: tokenizers, string pre-processing) or all its descendants (a suffix:
decoders, label lookups); what is left, the core, is one graph for GE. Only a partition that is proved sound is
used: the prefix is closed under ancestors, the suffix under descendants, they do not meet, the core holds no
refused node, has at least one input (GE's parser needs one), and every tensor crossing into or out of it is a
numeric tensor of a known element type. Anything else returns None and the whole model runs on the CPU
(gert/ort_fallback.py). Which nodes GE refuses is read from the model as CANN 8.5's parser decides it
(cbindings/hostnpu/ge_graph.cpp refuse_like_cann): string tensors, non-tensor values (sequence, map, optional),
Loop and Scan; with ``cann_ops="strict"`` also the nodes CANN has no plugin for (gert/preview/cann_ops.py).
"""

from __future__ import annotations

import concurrent.futures
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gert.ort_api import AssignedNode, AssignedSubgraph
from gert.ort_io import ort_class

CPU_PROVIDER = "CPUExecutionProvider"
_DEFAULT_DOMAINS = ("", "ai.onnx")
_warned: set = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True)
class Plan:
    """Which nodes go where (indices into the graph's node list, in its order) and what crosses between them."""

    prefix: tuple
    core: tuple
    suffix: tuple
    refused: tuple  # the refused nodes (named in the warning)
    prefix_inputs: tuple
    prefix_outputs: tuple
    core_inputs: tuple
    core_outputs: tuple
    suffix_inputs: tuple
    suffix_outputs: tuple


def refused_nodes(model, strict_ops: bool = False) -> list:
    """Indices of the top-level nodes CANN 8.5's ONNX parser refuses (a node whose subgraph holds one counts)."""
    import onnx

    types = _value_types(model)
    refused = set()
    for i, node in enumerate(model.graph.node):
        for n in _with_subgraph_nodes(node):
            if (n.domain in _DEFAULT_DOMAINS) and n.op_type in ("Loop", "Scan"):
                refused.add(i)
            names = [x for x in list(n.input) + list(n.output) if x]
            if any(_not_numeric(types.get(x)) for x in names):
                refused.add(i)
            if any(
                a.type == onnx.AttributeProto.TENSOR and a.t.data_type == onnx.TensorProto.STRING for a in n.attribute
            ):
                refused.add(i)
    if strict_ops:
        from gert.preview import cann_ops

        report = cann_ops.check_proto(model)
        unmapped = {u.node for u in report.unsupported}
        for i, node in enumerate(model.graph.node):
            if any((n.name or n.op_type) in unmapped for n in _with_subgraph_nodes(node)):
                refused.add(i)
    return sorted(refused)


def plan(model, refused: Sequence[int]) -> Plan | None:
    """The prefix / core / suffix split of ``model`` (a ModelProto) around the ``refused`` nodes, or None when no
    sound one exists (see the module doc)."""
    nodes = list(model.graph.node)
    if not refused or not nodes:
        return None
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    uses = [_used_names(n) for n in nodes]
    consumers: dict = {}
    for i, names in enumerate(uses):
        for x in names:
            consumers.setdefault(x, set()).add(i)
    parents = [{producer[x] for x in names if x in producer} for names in uses]
    children = [set().union(*(consumers.get(o, set()) for o in n.output if o)) if n.output else set() for n in nodes]
    prefix: set = set()
    suffix: set = set()
    for r in refused:
        up, down = _closure(r, parents), _closure(r, children)
        (prefix if len(up) <= len(down) else suffix).update(up if len(up) <= len(down) else down)
    core = [i for i in range(len(nodes)) if i not in prefix and i not in suffix]
    if prefix & suffix or not core or set(refused) & set(core):
        return None
    graph_inputs = [v.name for v in model.graph.input]
    graph_outputs = [v.name for v in model.graph.output]
    inits = {t.name for t in model.graph.initializer}
    made = {i: set(o for o in nodes[i].output if o) for i in range(len(nodes))}

    def produced(part) -> set:
        return set().union(*(made[i] for i in part)) if part else set()

    def needed(part) -> set:
        return set().union(*(uses[i] for i in part)) - produced(part) if part else set()

    available_before_core = set(graph_inputs) | produced(prefix)
    core_inputs = [x for x in _ordered(needed(core), graph_inputs, nodes, prefix) if x in available_before_core]
    later = needed(suffix) | set(graph_outputs)
    core_outputs = [x for x in _ordered(produced(core), (), nodes, core) if x in later]
    prefix_outputs = [
        x
        for x in _ordered(produced(prefix), (), nodes, prefix)
        if x in needed(core) | needed(suffix) | set(graph_outputs)
    ]
    prefix_inputs = [x for x in graph_inputs if x in needed(prefix)]
    suffix_inputs = [
        x
        for x in _ordered(needed(suffix), graph_inputs, nodes, set(prefix) | set(core))
        if x not in inits and x in (set(graph_inputs) | produced(prefix) | produced(core))
    ]
    suffix_outputs = [x for x in _ordered(produced(suffix), (), nodes, suffix) if x in graph_outputs]
    if not core_inputs or not core_outputs:
        return None  # GE's parser needs a root graph with an input; a core nothing reads is no core
    types = _value_types(model)
    if any(_not_numeric(types.get(x)) or types.get(x) is None for x in core_inputs + core_outputs):
        return None  # a string or sequence, or a type nothing says, would cross into GE's graph
    return Plan(
        tuple(sorted(prefix)),
        tuple(core),
        tuple(sorted(suffix)),
        tuple(refused),
        tuple(prefix_inputs),
        tuple(prefix_outputs),
        tuple(core_inputs),
        tuple(core_outputs),
        tuple(suffix_inputs),
        tuple(suffix_outputs),
    )


def sub_model(model, indices: Sequence[int], inputs: Sequence[str], outputs: Sequence[str]) -> bytes:
    """The model of the nodes ``indices`` of ``model``, reading ``inputs`` and giving ``outputs`` (their types from
    the model and ONNX shape inference), with the initializers those nodes use."""
    from onnx import helper

    infos = _value_infos(model)
    nodes = [model.graph.node[i] for i in indices]
    used = set().union(*(_used_names(n) for n in nodes)) if nodes else set()
    graph = helper.make_graph(
        nodes,
        f"{model.graph.name}_part",
        [infos.get(x) or helper.make_empty_tensor_value_info(x) for x in inputs],
        [infos.get(x) or helper.make_empty_tensor_value_info(x) for x in outputs],
        [t for t in model.graph.initializer if t.name in used and t.name not in inputs],
    )
    graph.sparse_initializer.extend(s for s in model.graph.sparse_initializer if s.values.name in used)
    part = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    part.functions.extend(model.functions)
    return part.SerializeToString()


class EdgeSession:
    """An onnxruntime.InferenceSession's run / run_async over the prefix (ONNX Runtime, CPU), the core (a
    gert.InferenceSession) and the suffix (ONNX Runtime, CPU). It owns the three sessions and its callback thread."""

    def __init__(
        self,
        model,
        p: Plan,
        core_session: Callable[[bytes], Any],
        cpu_session: Callable[[bytes], Any],
        core_provider: str,
    ) -> None:
        self.plan = p
        self._inputs = [v.name for v in model.graph.input]
        self._outputs = [v.name for v in model.graph.output]
        self._nodes = [AssignedNode(n.name, n.op_type, n.domain) for n in model.graph.node]
        self._core_provider = core_provider
        self._prefix = cpu_session(sub_model(model, p.prefix, p.prefix_inputs, p.prefix_outputs)) if p.prefix else None
        self._suffix = cpu_session(sub_model(model, p.suffix, p.suffix_inputs, p.suffix_outputs)) if p.suffix else None
        self.core = core_session(sub_model(model, p.core, p.core_inputs, p.core_outputs))
        self._async: concurrent.futures.ThreadPoolExecutor | None = None
        self._async_lock = threading.Lock()

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options=None) -> list:
        """The outputs named (all for None or []), in that order: prefix, then core, then suffix."""
        names = list(output_names) if output_names else list(self._outputs)
        for n in names:
            if n not in self._outputs:
                raise ort_class("InvalidArgument")(
                    f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Invalid output name:{n}"
                )
        missing = [n for n in self._inputs if n not in input_feed]
        if missing:
            raise ValueError(f"Required inputs ({missing}) are missing from input feed ({list(input_feed)}).")
        values = {n: input_feed[n] for n in self._inputs}
        p = self.plan
        for session, ins, outs in (
            (self._prefix, p.prefix_inputs, p.prefix_outputs),
            (self.core, p.core_inputs, p.core_outputs),
            (self._suffix, p.suffix_inputs, p.suffix_outputs),
        ):
            if session is not None:
                values.update(zip(outs, session.run(list(outs), {x: values[x] for x in ins}, run_options)))
        out = [np.asarray(values[n]) for n in names]
        seen: set = set()
        for i, n in enumerate(names):
            if n in seen or n in self._inputs:  # a tensor listed twice, or an input passed through: its own array
                out[i] = np.array(out[i], copy=True)
            seen.add(n)
        return out

    def run_async(self, output_names, input_feed, callback, user_data=None, run_options=None) -> None:
        """run() on the session's callback thread; ``callback(outputs, user_data, err)`` as ONNX Runtime calls it."""

        def work() -> None:
            try:
                result = self.run(output_names, input_feed, run_options)
            except BaseException as e:  # noqa: BLE001 - handed to the callback, as ONNX Runtime does
                callback([], user_data, str(e) or type(e).__name__)
            else:
                callback(result, user_data, "")

        with self._async_lock:
            if self._async is None:
                self._async = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gert-edges")
            self._async.submit(work)

    def assignment(self) -> list:
        """ONNX Runtime's graph assignment: the prefix and suffix on the CPU provider, the core on gert's."""
        p = self.plan
        parts = [(CPU_PROVIDER, p.prefix), (self._core_provider, p.core), (CPU_PROVIDER, p.suffix)]
        return [AssignedSubgraph(ep, tuple(self._nodes[i] for i in idx)) for ep, idx in parts if idx]

    def warn_once(self, graph_name: str, model) -> None:
        """Once per model: which nodes run on the CPU provider and why."""
        refused = [model.graph.node[i] for i in self.plan.refused]
        key = (graph_name, tuple(n.name or n.op_type for n in refused))
        with _warned_lock:
            if key in _warned:
                return
            _warned.add(key)
        shown = ", ".join(f"{n.op_type}('{n.name}')" if n.name else n.op_type for n in refused[:8])
        warnings.warn(
            f"gert.InferenceSession: GE cannot take {len(refused)} node(s) of '{graph_name}' ({shown}); "
            f"they run on ONNX Runtime's {CPU_PROVIDER} with {len(self.plan.prefix)} prefix and "
            f"{len(self.plan.suffix)} suffix node(s), the other {len(self.plan.core)} on gert",
            UserWarning,
            stacklevel=5,
        )

    def close(self) -> None:
        """Close the core's streams; wait for callbacks already started."""
        with self._async_lock:
            pool, self._async = self._async, None
        if pool is not None:
            pool.shutdown(wait=True)
        self.core.close()


def edge_session(
    data: bytes,
    cann_ops_mode: str | None,
    graph_name: str,
    core_provider: str,
    core_session: Callable[[bytes], Any],
    cpu_session: Callable[[bytes], Any],
) -> EdgeSession | None:
    """The EdgeSession of a model GE refused (its bytes), warned once; None when the whole model must run on the
    CPU: no sound split, external data (sub-models made from bytes cannot resolve files next to the model), or a
    part neither runtime takes."""
    import onnx

    from gert.preview import cann_ops

    proto = onnx.load_model_from_string(data)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        return None
    strict = cann_ops.resolve_mode(cann_ops_mode) == "strict"
    p = plan(proto, refused_nodes(proto, strict_ops=strict))
    if p is None:
        return None
    try:
        edges = EdgeSession(proto, p, core_session, cpu_session, core_provider)
    except Exception:  # noqa: BLE001 - a part neither runtime takes: the whole model on the CPU instead
        return None
    edges.warn_once(graph_name, proto)
    return edges


# ---- graph reading ---------------------------------------------------------------------------------------------


def _with_subgraph_nodes(node) -> list:
    """The node and every node of its subgraphs (If branches, Loop bodies), depth first."""
    import onnx

    out = [node]
    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            for n in g.node:
                out.extend(_with_subgraph_nodes(n))
    return out


def _used_names(node) -> set:
    """The names a node reads: its inputs and those its subgraphs read from the outer scope."""
    import onnx

    used = {x for x in node.input if x}
    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            inner = {v.name for v in g.input} | {t.name for t in g.initializer}
            made = {o for n in g.node for o in n.output}
            for n in g.node:
                used |= _used_names(n) - inner - made
    return used


def _closure(start: int, edges: Sequence[set]) -> set:
    seen, todo = {start}, [start]
    while todo:
        for j in edges[todo.pop()]:
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return seen


def _ordered(names: set, first: Sequence[str], nodes, part) -> list:
    """``names`` in a stable order: graph inputs first (as declared), then outputs in node order."""
    out = [x for x in first if x in names]
    for i in sorted(part):
        out.extend(o for o in nodes[i].output if o in names and o not in out)
    return out + sorted(names - set(out))


def _value_infos(model) -> dict:
    """name -> ValueInfoProto from the graph's inputs, outputs, value_info and ONNX shape inference."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is a help here, never a condition
        inferred = model
    infos = {}
    for v in list(inferred.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        if v.type.WhichOneof("value") is not None:
            infos[v.name] = v
    for t in model.graph.initializer:
        if t.name not in infos:
            infos[t.name] = onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
    return infos


def _value_types(model) -> dict:
    """name -> ("tensor", elem_type) or (kind, None) for sequence / map / optional values."""
    out = {}
    for name, v in _value_infos(model).items():
        kind = v.type.WhichOneof("value")
        out[name] = ("tensor", v.type.tensor_type.elem_type) if kind == "tensor_type" else (kind, None)
    return out


def _not_numeric(t) -> bool:
    """A value GE's graphs cannot hold: a string tensor, or not a tensor at all."""
    import onnx

    if t is None:
        return False
    kind, elem = t
    return kind != "tensor" or elem == onnx.TensorProto.STRING
