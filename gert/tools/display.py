"""How a Model and its stats() show in Jupyter (HTML tables) and in IPython or a terminal (text tables).

Both views are built from the same sections (a title, column headers, rows), so they always say the same thing.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Protocol

from gert.core.shapes import ShapePlan


class Model(Protocol):
    """What the display reads of a gert.Model (named here, not imported: the runtime imports this tool, not the other
    way round)."""

    plan: ShapePlan

    @property
    def closed(self) -> bool: ...

    @property
    def num_streams(self) -> int: ...

    @property
    def split_batch(self) -> bool: ...

    def stats(self) -> Any: ...


@dataclass
class Section:
    title: str
    headers: list = field(default_factory=list)
    rows: list = field(default_factory=list)  # lists of cells (str() of each is shown)
    note: str = ""  # shown when there are no rows, or under the table


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _mb(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def stats_sections(stats: dict) -> list:
    """Streams (device, core limits, requests, busy, compiles, static / dynamic hits, compile cache), gears (hits,
    padding), faults and recovery, device memory."""
    streams = Section(
        "streams",
        [
            "stream",
            "device",
            "cube cores",
            "vector cores",
            "requests",
            "busy s",
            "compiles",
            "compile s",
            "static / dynamic",
            "cache hit / miss",
        ],
    )
    for s in stats.get("streams", []):
        streams.rows.append(
            [
                s["stream"],
                s["device"],
                s["cube_cores"],
                s["vector_cores"],
                s["requests"],
                f"{s['busy_seconds']:.3f}",
                s["compiles"],
                f"{s['compile_seconds']:.2f}",
                f"{s.get('static_hits', 0)} / {s.get('dynamic_hits', 0)}",
                f"{s.get('cache_hits', 0)} / {s.get('cache_misses', 0)}",
            ]
        )
    faults = Section(
        "faults and recovery", ["failed tasks", "timeouts", "aborted streams", "recoveries", "OOM retries"]
    )
    faults.rows.append(
        [stats.get(k, 0) for k in ("failed_tasks", "timeouts", "aborted_streams", "recoveries", "oom_retries")]
    )
    gears = Section("gears", ["gear", "hits", "padding", "padding cost"], note="no requests yet")
    for label, g in sorted(stats.get("gears", {}).items()):
        cost = g.get("padding_seconds", 0.0)
        gears.rows.append([label, g["hits"], f"{100 * g['padding_ratio']:.1f}%", f"{1000 * cost:.1f} ms"])
    memory = Section("device memory", ["device", "used", "total"])
    for d, m in sorted(stats.get("device_memory", {}).items()):
        memory.rows.append([d, _mb(m["used"]), _mb(m["total"])])
    return [streams, gears, faults, memory, *graphs_sections(stats)] + batching_sections(stats.get("batching"))


def graphs_sections(stats: dict) -> list:
    """Memory per graph (GE's summary: const + feature memory, on all its streams) and, with the auto policy, the
    static graphs' budget (host_memory, gert/core/host_memory.py)."""
    graphs = Section("graphs", ["graph", "kind", "streams", "memory"], note="no graphs compiled yet")
    for label, g in sorted(stats.get("graphs", {}).items()):
        graphs.rows.append([label, "static" if g["static"] else "dynamic", g["streams"], _mb(g["memory"])])
    tiers = stats.get("tiers")
    if not tiers or "host_memory" not in tiers:
        return [graphs]
    budget = Section("static graph budget", ["host_memory", "static graphs hold", "sizes turned down for it"])
    budget.rows.append([_mb(tiers["host_memory"]), _mb(tiers["static_bytes"]), tiers["memory_refusals"]])
    return [graphs, budget]


def batching_sections(b) -> list:
    """Dynamic batching (gert/core/dynamic.py): batches formed, mean / p99 size, queue wait, retries; per gear."""
    if not b:
        return []
    if not b.get("enabled"):
        return [
            Section(
                "dynamic batching",
                note="off (gert.load(dynamic_batching=False), or requests of this model cannot share a run)",
            )
        ]
    total = Section(
        "dynamic batching",
        [
            "batches",
            "requests",
            "mean size",
            "p99 size",
            "max size",
            "mean wait ms",
            "p99 wait ms",
            "retried",
            "queued",
        ],
    )
    total.rows.append(
        [
            b["batches"],
            b["requests"],
            f"{b['mean_batch_size']:.2f}",
            b["p99_batch_size"],
            b["max_batch"],
            f"{b['mean_queue_wait_ms']:.2f}",
            f"{b['p99_queue_wait_ms']:.2f}",
            b["retried_batches"],
            b["queued"],
        ]
    )
    gears = Section("dynamic batches per gear", ["gear", "batches", "requests", "mean size"], note="no batches yet")
    for label, g in b.get("gears", {}).items():
        gears.rows.append([label, g["batches"], g["requests"], f"{g['mean_batch_size']:.2f}"])
    return [total, gears]


def model_sections(model: Model) -> list:
    """Inputs and outputs with their dims, the dynamic dims' policies and gears, then the stats (if open)."""
    plan = model.plan
    io = Section("inputs and outputs", ["", "name", "dtype", "shape"])
    for kind, tensors in (("input", plan.inputs), ("output", plan.outputs)):
        for t in tensors:
            io.rows.append([kind, t.name, str(t.dtype), _fmt_shape(t.shape)])
    dims = Section("dynamic dims", ["dim", "axes", "policy", "gears"], note="none: every shape is fixed")
    for name, d in sorted(plan.dims.items()):
        axes = ", ".join(f"{n}:{a}" for n, a in d.axes)
        dims.rows.append([name, axes, d.policy, ",".join(map(str, d.gears)) or "any size"])
    if model.closed:
        return [io, dims, Section("streams", note="the model is closed")]
    return [io, dims] + stats_sections(model.stats())


def model_title(model: Model) -> str:
    from gert._cann import backend

    state = "closed" if model.closed else f"{model.num_streams} stream(s)"
    split = ", split_batch" if model.split_batch and not model.closed else ""
    return f"gert.Model on {backend()}: {state}{split}"


# ---- renderers ---------------------------------------------------------------------------------------------------
def to_text(title: str, sections: list) -> str:
    lines = [title]
    for s in sections:
        lines.append(f"{s.title}:")
        if s.rows:
            cells = [[str(h) for h in s.headers]] + [[str(c) for c in r] for r in s.rows]
            widths = [max(len(r[i]) for r in cells) for i in range(len(s.headers))]
            for r in cells:
                lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        elif s.note:
            lines.append(f"  {s.note}")
    return "\n".join(lines)


def to_html(title: str, sections: list) -> str:
    e = html.escape
    out = [f"<div class='gert'><b>{e(title)}</b>"]
    for s in sections:
        out.append(f"<div><i>{e(s.title)}</i>")
        if s.rows:
            out.append(
                "<table><thead><tr>" + "".join(f"<th>{e(str(h))}</th>" for h in s.headers) + "</tr></thead><tbody>"
            )
            for r in s.rows:
                out.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>")
            out.append("</tbody></table>")
        elif s.note:
            out.append(f"<p>{e(s.note)}</p>")
        out.append("</div>")
    out.append("</div>")
    return "\n".join(out)


def _pretty(p, cycle: bool, text: str, short: str) -> None:
    p.text(short if cycle else text)


class Stats(dict):
    """What Model.stats() returns: a plain dict (index it as before), shown as tables in Jupyter and IPython."""

    TITLE = "gert.Model stats"

    def _repr_html_(self) -> str:
        return to_html(self.TITLE, stats_sections(self))

    def _repr_pretty_(self, p, cycle: bool) -> None:
        _pretty(p, cycle, to_text(self.TITLE, stats_sections(self)), "Stats(...)")

    def __str__(self) -> str:
        return to_text(self.TITLE, stats_sections(self))


def model_html(model: Model) -> str:
    return to_html(model_title(model), model_sections(model))


def model_text(model: Model) -> str:
    return to_text(model_title(model), model_sections(model))


def model_repr(model: Model) -> str:
    """The one-line repr: inputs with their dims, and the streams."""
    ins = ", ".join(f"{t.name}{_fmt_shape(t.shape)}" for t in model.plan.inputs)
    state = "closed" if model.closed else f"{model.num_streams} stream(s)"
    precision = getattr(model, "precision", None)
    mode = "" if precision is None or precision.keeps_dtypes else f", precision {precision.describe()}"
    return f"<gert.Model ({ins}) on {state}{mode}>"


def pretty_model(model: Model, p, cycle: bool) -> None:
    _pretty(p, cycle, model_text(model), model_repr(model))


__all__ = [
    "Stats",
    "Section",
    "model_html",
    "model_text",
    "model_repr",
    "pretty_model",
    "stats_sections",
    "to_html",
    "to_text",
]
