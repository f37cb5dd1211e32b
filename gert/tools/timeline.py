"""A Gantt picture of a gert trace (gert.trace): one row per stream, one colour per stage, over a window of steady
state, so that whether streams overlap is visible at a glance (`gert bench --timeline OUT.png`)."""

from __future__ import annotations

from gert.core.trace import HOST_PID
from gert.errors import GertError

COLOURS = {
    "graph": "#bbbbbb",
    "prepare": "#dddddd",
    "batch": "#9467bd",
    "h2d": "#1f77b4",
    "execute": "#2ca02c",
    "d2h": "#ff7f0e",
    "compile": "#8c564b",
    "error": "#d62728",
}
SHOWN = ("batch", "graph", "prepare", "h2d", "execute", "d2h")


def _rows(events: list) -> tuple:
    """(names by track, complete events on the stream tracks and the compiler's)."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    rows = {}
    for e in events:
        if e["ph"] != "X":
            continue
        track = (e["pid"], e["tid"])
        on_stream = e["pid"] != HOST_PID
        if (on_stream and (e["name"] in SHOWN or e.get("cat") == "error")) or e.get("cat") == "compile":
            label = f"{procs.get(e['pid'], e['pid'])} / {names.get(track, e['tid'])}"
            rows.setdefault(label, []).append(e)
    return rows


def window(events: list, width_ms: float) -> tuple:
    """(start, end) in µs: ``width_ms`` around the middle of the stream work (steady state, past warm-up)."""
    runs = sorted(e["ts"] for e in events if e["ph"] == "X" and e["pid"] != HOST_PID)
    if not runs:
        raise GertError("timeline: the trace has no stream work (did any request run while it was open?)")
    mid = runs[len(runs) // 2]
    start = max(runs[0], mid - width_ms * 500.0)
    return start, start + width_ms * 1000.0


def figure(panels: list, width_ms: float = 300.0):
    """A matplotlib Figure (built without pyplot): one panel per (title, events) in ``panels`` (events: Trace.events
    or a trace JSON's traceEvents), each a row per stream over ``width_ms`` of its steady state."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        raise GertError("the timeline needs matplotlib: pip install 'gert[plot]'") from None
    laid = [(title, _rows(events), window(events, width_ms)) for title, events in panels]
    heights = [max(1, len(rows)) + 1.2 for _, rows, _ in laid]
    fig = Figure(figsize=(9, 0.45 * sum(heights) + 0.8))
    axes = fig.subplots(len(laid), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
    for ax, (title, rows, (t0, t1)) in zip(axes, laid):
        labels = sorted(rows)
        for y, label in enumerate(labels):
            for name in SHOWN + ("compile", "error"):
                bars = [
                    ((e["ts"] - t0) / 1000.0, max(e["dur"], 1.0) / 1000.0)
                    for e in rows[label]
                    if (e["name"] == name or (name == "error" and e.get("cat") == "error"))
                    and e["ts"] + e["dur"] >= t0
                    and e["ts"] <= t1
                ]
                if bars:
                    ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=COLOURS[name])
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.set_xlim(0, (t1 - t0) / 1000.0)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("ms (a window of steady state)")
    fig.legend(
        handles=[Patch(color=COLOURS[n], label=n) for n in SHOWN + ("compile", "error")],
        fontsize=7,
        ncol=8,
        loc="lower center",
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def save(path: str, panels: list, width_ms: float = 300.0) -> str:
    """figure(panels, width_ms) as a PNG at ``path``; the path."""
    figure(panels, width_ms).savefig(path, dpi=100)
    return path
