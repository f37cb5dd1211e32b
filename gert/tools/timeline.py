"""A Gantt picture of a gert trace (gert.trace): one row per stream, one colour per stage, over a window of steady
state, so that whether streams overlap is visible at a glance (`gert bench --timeline OUT.png`)."""
from __future__ import annotations

from typing import Optional

from gert.core.trace import HOST_PID
from gert.errors import GertError

COLOURS = {"graph": "#bbbbbb", "prepare": "#dddddd", "batch": "#9467bd", "h2d": "#1f77b4", "execute": "#2ca02c",
           "d2h": "#ff7f0e", "compile": "#8c564b", "error": "#d62728"}
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


def figure(events: list, width_ms: float = 300.0, title: Optional[str] = None):
    """A matplotlib Figure (built without pyplot) of ``events`` (Trace.events or its JSON's traceEvents)."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        raise GertError("the timeline needs matplotlib: pip install 'gert[plot]'") from None
    rows = _rows(events)
    t0, t1 = window(events, width_ms)
    labels = sorted(rows)
    fig = Figure(figsize=(9, 0.6 * len(labels) + 1.6))
    ax = fig.subplots()
    for y, label in enumerate(labels):
        for name in SHOWN + ("compile", "error"):
            bars = [((e["ts"] - t0) / 1000.0, max(e["dur"], 1.0) / 1000.0) for e in rows[label]
                    if (e["name"] == name or (name == "error" and e.get("cat") == "error"))
                    and e["ts"] + e["dur"] >= t0 and e["ts"] <= t1]
            if bars:
                ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=COLOURS[name])
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlim(0, (t1 - t0) / 1000.0)
    ax.set_xlabel("ms")
    ax.set_title(title or "gert trace: stream timeline", fontsize=10)
    ax.legend(handles=[Patch(color=COLOURS[n], label=n) for n in SHOWN + ("compile", "error")], fontsize=7,
              ncol=8, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(labels) < 3 else -0.12), frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def save(path: str, events: list, width_ms: float = 300.0, title: Optional[str] = None) -> str:
    """figure(...) as a PNG at ``path``; the path."""
    figure(events, width_ms, title).savefig(path, dpi=100)
    return path
