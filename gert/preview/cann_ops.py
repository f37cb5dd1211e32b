"""Would a stock CANN 8.x ONNX parser take this model? The parser's node lookup, emulated over a data table.

GE's ONNX parser (hicann/ge ``parser/parser/onnx/onnx_parser.cc``) keys each node as
``<domain or ai.onnx>::<the MODEL's opset_import version for that domain>::<op_type>`` and looks the key up
exactly (no nearest version) among the keys the op plugins registered. Its pre-check reports every node whose key is
unregistered (E13010), for the root graph and each ``If`` branch, then fails the parse. ``Constant`` is built into
the parser and always maps. The registered keys are ``cann_ops.json`` next to this module (its ``source`` and
``date`` say where they come from); a user plugin in a custom OPP can add keys, so "unregistered" means "on a
stock install".
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Union

from gert.core.option_error import cann_ops_mode

ModelLike = Union[str, bytes, os.PathLike, "onnx.ModelProto"]  # noqa: F821 - onnx is imported lazily

DEFAULT_DOMAIN = "ai.onnx"
MAX_STANDARD_OPSET = 18
ENV = "GERT_CANN_OPS"
HOST_REFUSES = frozenset({"Loop", "Scan"})  # refused by the host NPU's own parser too (cbindings/hostnpu/ge_graph.cpp)

# Reasons an item of CannReport.unsupported gives
OP_NOT_MAPPED = "op not mapped"
OPSET_NOT_MAPPED = "opset not mapped"
DOMAIN_NOT_MAPPED = "domain not mapped"
MISSING_OPSET_IMPORT = "missing opset import"


class CannCompatibilityWarning(UserWarning):
    """A model a stock CANN 8.x ONNX parser would refuse (E13010) was loaded on the host NPU, which runs it anyway."""


def _parse_range(text: str) -> frozenset:
    """ "1,8-18" -> {1, 8, ..., 18}."""
    out = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


@dataclass(frozen=True)
class OpTable:
    """The registered keys: domain -> op_type -> model opsets; plus the table's provenance."""

    ops: dict
    standard: frozenset  # op types of the ONNX standard set that map at some opset (Constant included)
    source: str
    date: str
    notes: dict

    def opsets(self, domain: str, op_type: str) -> frozenset:
        return self.ops.get(domain, {}).get(op_type, frozenset())

    def maps(self, domain: str, opset: int, op_type: str) -> bool:
        if op_type == "Constant" and domain == DEFAULT_DOMAIN:
            return True
        return opset in self.opsets(domain, op_type)


@functools.lru_cache(maxsize=1)
def table() -> OpTable:
    """The table shipped with gert (gert/preview/cann_ops.json)."""
    with open(os.path.join(os.path.dirname(__file__), "cann_ops.json"), encoding="utf-8") as f:
        raw = json.load(f)
    ops: dict = {}
    standard = {"Constant"}
    for domain, groups in raw["domains"].items():
        for group, entries in groups.items():
            for op, rng in entries.items():
                ops.setdefault(domain, {})[op] = _parse_range(rng)
                if group == "standard":
                    standard.add(op)
    return OpTable(ops, frozenset(standard), raw["source"], raw["date"], raw.get("not_mapped_notes", {}))


@dataclass(frozen=True)
class Unsupported:
    """A node a stock CANN parser refuses: ``key`` as GE builds it (``ai.onnx::19::Relu``), ``reason`` one of
    op not mapped / opset not mapped / domain not mapped / missing opset import, ``graph`` where the node is."""

    node: str
    op_type: str
    key: str
    reason: str
    graph: str = ""
    detail: str = ""

    @property
    def error_code(self) -> str:
        return "E19999" if self.reason == MISSING_OPSET_IMPORT else "E13010"

    def ge_message(self) -> str:
        """GE's message for this node (base/common/error_registry: E13010; onnx_parser.cc for E19999)."""
        if self.reason == MISSING_OPSET_IMPORT:
            return f"E19999: The opset of domain[{self.key.split('::')[0]}] has no responding version."
        return f"E13010: No operator plugin is registered for Op: {self.node}, optype: {self.key}."


@dataclass
class CannReport:
    """What a stock CANN 8.x ONNX parser would do with a model: ``ok`` when it maps every node."""

    opsets: dict
    unsupported: list
    suggestions: list
    nodes: int
    table_date: str = ""
    notes: list = field(default_factory=list)
    fix: object | None = None  # cann_check(fix=...): the fix's result (gert.preview.fix.FixResult)

    @property
    def ok(self) -> bool:
        return not self.unsupported

    def ge_message(self) -> str:
        """The parse failure as GE reports it: one line per refused node."""
        lines = [u.ge_message() for u in self.unsupported]
        # GE's error manager puts the first code first; E13010 is the pre-check's, E19999 comes after it
        lines.sort(key=lambda s: not s.startswith("E13010"))
        return "\n".join(lines)

    def summary(self) -> str:
        if self.ok:
            return f"a stock CANN 8.x ONNX parser maps all {self.nodes} node(s)"
        return f"a stock CANN 8.x ONNX parser would refuse {len(self.unsupported)} of {self.nodes} node(s) (E13010)"

    def rows(self) -> list:
        return [
            (u.node, u.op_type, u.key, u.reason + (f" ({u.detail})" if u.detail else ""), u.graph or "main")
            for u in self.unsupported
        ]

    def __str__(self) -> str:
        opsets = ", ".join(f"{d or DEFAULT_DOMAIN} {v}" for d, v in sorted(self.opsets.items()))
        out = [f"CANN op coverage (table of {self.table_date}): {self.summary()}", f"  opsets: {opsets or '(none)'}"]
        if self.unsupported:
            head = ("node", "op_type", "key", "reason", "graph")
            rows = [head] + self.rows()
            widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
            for r in rows:
                out.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
        for s in self.suggestions:
            out.append(f"  suggestion: {s}")
        for n in self.notes:
            out.append(f"  note: {n}")
        return "\n".join(out)

    def _repr_html_(self) -> str:
        import html

        e = html.escape
        parts = [
            f"<p><b>CANN op coverage</b>: {e(self.summary())}<br>opsets: "
            f"{e(', '.join(f'{d or DEFAULT_DOMAIN} {v}' for d, v in sorted(self.opsets.items())))}</p>"
        ]
        if self.unsupported:
            parts.append("<table><tr><th>node</th><th>op_type</th><th>key</th><th>reason</th><th>graph</th></tr>")
            for r in self.rows():
                parts.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>")
            parts.append("</table>")
        if self.suggestions:
            parts.append("<ul>" + "".join(f"<li>{e(s)}</li>" for s in self.suggestions) + "</ul>")
        return "".join(parts)

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "opsets": dict(self.opsets),
            "nodes": self.nodes,
            "table_date": self.table_date,
            "unsupported": [
                {
                    "node": u.node,
                    "op_type": u.op_type,
                    "key": u.key,
                    "reason": u.reason,
                    "graph": u.graph,
                    "detail": u.detail,
                }
                for u in self.unsupported
            ],
            "suggestions": list(self.suggestions),
            "notes": list(self.notes),
        }


def load_proto(model: ModelLike):
    """A ModelProto from a path, serialized bytes or a ModelProto (external data is not loaded: not needed)."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        from gert.core.skeleton import skeleton  # the ops and opsets, without parsing the weights

        return skeleton(model if isinstance(model, bytes) else memoryview(model))
    return onnx.load(os.fspath(model), load_external_data=False)


def _graph_of(data: bytes):
    """The model's graph for check_proto: read without onnx where the wire reader takes it (gert/core/wire_graph.py:
    a serving process keeps no onnx), else load_proto's skeleton."""
    from gert.core import wire_graph

    try:
        return wire_graph.parse(data)
    except wire_graph.Unsupported:
        return load_proto(data)


def walk_nodes(graph, path: str):
    """(node, graph path) for every node of the graph, recursing into If branches (GE's only subgraph adapter).
    Other ops' subgraphs (Loop, Scan bodies) are never reached: GE refuses the op itself first."""
    for n in graph.node:
        yield n, path
        if n.op_type == "If" and n.domain in ("", DEFAULT_DOMAIN):
            for a in n.attribute:
                if a.g is not None and a.g.ByteSize():
                    yield from walk_nodes(a.g, f"{path}/{n.name or n.op_type}.{a.name}")


def _node_name(n, index: int) -> str:
    return n.name or f"{n.op_type}_{index}"


def check_proto(proto) -> CannReport:
    """The report for a ModelProto (see cann_check)."""
    t = table()
    opsets = {(o.domain or DEFAULT_DOMAIN): int(o.version) for o in proto.opset_import}
    unsupported = []
    nodes = list(walk_nodes(proto.graph, "main"))
    for i, (n, path) in enumerate(nodes):
        domain = n.domain or DEFAULT_DOMAIN
        if n.op_type == "Constant" and domain == DEFAULT_DOMAIN:
            continue
        name = _node_name(n, i)
        version = opsets.get(domain)
        if version is None:
            unsupported.append(
                Unsupported(
                    name,
                    n.op_type,
                    f"{domain}::?::{n.op_type}",
                    MISSING_OPSET_IMPORT,
                    path,
                    f"the model imports no opset for domain {domain}",
                )
            )
            continue
        key = f"{domain}::{version}::{n.op_type}"
        if t.maps(domain, version, n.op_type):
            continue
        registered = t.opsets(domain, n.op_type)
        if domain not in t.ops:
            reason, detail = DOMAIN_NOT_MAPPED, f"nothing is registered for domain {domain}"
        elif not registered:
            reason, detail = OP_NOT_MAPPED, t.notes.get(n.op_type, "no plugin at any opset")
        else:
            reason, detail = OPSET_NOT_MAPPED, f"registered at opset {_ranges(registered)}"
        unsupported.append(Unsupported(name, n.op_type, key, reason, path, detail))
    ops = [(n.domain or DEFAULT_DOMAIN, n.op_type) for n, _ in nodes]
    return CannReport(opsets, unsupported, _suggestions(opsets, ops, unsupported, t), len(nodes), t.date)


def _ranges(values) -> str:
    vs = sorted(values)
    out, start = [], None
    for i, v in enumerate(vs):
        if start is None:
            start = v
        if i + 1 == len(vs) or vs[i + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ",".join(out)


def best_opset(ops, t: OpTable | None = None, highest: int = MAX_STANDARD_OPSET) -> int | None:
    """The highest ai.onnx opset <= ``highest`` at which every ai.onnx node of ``ops`` ((domain, op_type)) maps."""
    t = t or table()
    types = {op for d, op in ops if d == DEFAULT_DOMAIN and op != "Constant"}
    for v in range(highest, 0, -1):
        if all(v in t.opsets(DEFAULT_DOMAIN, op) for op in types):
            return v
    return None


def _suggestions(opsets: dict, ops, unsupported, t: OpTable) -> list:
    out = []
    if not unsupported:
        return out
    reasons = {(u.op_type, u.reason) for u in unsupported}
    version = opsets.get(DEFAULT_DOMAIN)
    if any(r == OPSET_NOT_MAPPED for _, r in reasons) and version is not None:
        v = best_opset(ops, t, min(version, MAX_STANDARD_OPSET))
        if v is None and version > MAX_STANDARD_OPSET:
            v = best_opset([o for o in ops if t.opsets(*o)], t)
            if v is not None:
                out.append(
                    f"re-export at opset {v} (or `gert check --fix`): every op that CANN maps at all maps "
                    f"there; the others stay refused"
                )
        elif v is not None:
            out.append(f"re-export at opset {v} (or `gert check --fix OUT.onnx`): every op maps there")
    types = {op for op, _ in reasons}
    if types & {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul"}:
        out.append("quantized (QDQ) model: convert it with AMCT to CANN's AscendQuant/AscendDequant form before ATC")
    if types & {"Loop", "Scan"}:
        out.append("Loop/Scan: unroll the loop or run it on the host around the NPU graph")
    if any(u.reason == DOMAIN_NOT_MAPPED and u.key.startswith("com.microsoft") for u in unsupported):
        out.append(
            "com.microsoft ops come from ONNX Runtime's graph optimizations: save the model before "
            "optimizing (ORT_DISABLE_ALL) or export it from the framework again"
        )
    if "Gelu" in types:
        out.append("Gelu (opset 20): export at opset <= 18, where exporters decompose it into Erf/Mul/Add")
    return out


# ---- gert.load(cann_ops=...) -----------------------------------------------------------------------------------------
_warned: set = set()
_reports: collections.OrderedDict[str, CannReport] = collections.OrderedDict()  # model digest -> its report
_REPORTS_KEPT = 64
_reports_lock = threading.Lock()
_WARN_LINES = 12  # nodes a warning names (a model at opset 19 has hundreds); the report lists every one


def resolve_mode(mode: str | None) -> str:
    """``mode``, else GERT_CANN_OPS, else "warn"; a clear error for anything else (LoadConfig's check, in
    gert/core/option_error.py)."""
    if mode is None:
        return cann_ops_mode(os.environ.get(ENV) or "warn", ENV)
    return cann_ops_mode(mode)


def enforce(data: bytes, mode: str | None, digest: str | None = None, stacklevel: int = 3) -> CannReport | None:
    """Apply ``cann_ops`` to a model about to be loaded: "off" nothing; "warn" a CannCompatibilityWarning once per
    model (its digest) per process; "strict" a GeError with GE's E13010 text, as aclgrphParseONNX refuses it."""
    mode = resolve_mode(mode)
    if mode == "off":
        return None
    import hashlib

    from gert import _cann

    digest = digest or hashlib.blake2b(data, digest_size=16).hexdigest()
    report = _reports.get(digest)
    if report is None:
        try:
            report = check_proto(_graph_of(data))  # ~50 ms for PP-OCR det or rec: once per model per process
        except Exception:  # noqa: BLE001 - a model onnx cannot read fails in GE's parser, with GE's own message
            return None
        with _reports_lock:
            _reports[digest] = report
            while len(_reports) > _REPORTS_KEPT:
                _reports.popitem(last=False)
    if report.ok:
        return report
    real = _cann.backend() != "hostnpu"
    if (
        mode == "warn"
        and not real
        and any(u.op_type in HOST_REFUSES and u.key.startswith(DEFAULT_DOMAIN + "::") for u in report.unsupported)
    ):
        return report  # the host NPU's parser refuses the model itself next, with GE's E13010

    if mode == "strict" and not real:
        from gert.errors import GeError

        raise GeError(0xFFFFFFFF, f"aclgrphParseONNX: {report.ge_message()}")  # ge::GRAPH_FAILED, as GE returns
    if mode == "warn":
        with _reports_lock:
            if digest in _warned:
                return report
            _warned.add(digest)
        where = (
            "the CANN toolkit's parser decides"
            if real
            else "the host NPU runs it anyway; cann_ops='strict' refuses it as CANN does"
        )
        lines = report.ge_message().splitlines()
        shown = "\n".join(lines[:_WARN_LINES]) + (
            f"\n... and {len(lines) - _WARN_LINES} more (gert.cann_check(model) lists them)"
            if len(lines) > _WARN_LINES
            else ""
        )
        warnings.warn(
            f"{report.summary()} ({where}):\n{shown}" + "".join(f"\n  suggestion: {s}" for s in report.suggestions),
            CannCompatibilityWarning,
            stacklevel=stacklevel,
        )
    return report


# ---- Graph.from_onnx (GE's parser API) under GERT_CANN_OPS ----------------------------------------------------------
_checked = threading.local()


@contextlib.contextmanager
def checked() -> Iterator[None]:
    """Within the block, Graph.from_onnx skips the check: the caller (gert.load) applied its own cann_ops."""
    _checked.on = True
    try:
        yield
    finally:
        _checked.on = False


def enforce_parse(model) -> None:
    """Graph.from_onnx's hook, active when GERT_CANN_OPS is set: its mode for the model (bytes or a path)."""
    if getattr(_checked, "on", False):
        return
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    else:
        try:
            with open(model, "rb") as f:
                data = f.read()
        except (OSError, TypeError):
            return  # GE's parser reports the unreadable file with its own message
    enforce(data, None, stacklevel=4)
