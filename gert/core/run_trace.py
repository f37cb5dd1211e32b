"""A stream's run of one request while a trace is open (gert.trace): the same stages as untraced, each in a span.

Worker.run calls its stages (graph lookup, the fused call, the dynamic graph's copy-in / execute / copy-out /
synchronize) on a ``stages`` object: the worker itself when tracing is off, so the untraced path has no tracing
lines, or a TracedStages that wraps each stage of the worker in a span on the stream's track (the synchronize on
the caller's thread track) and adds the request's flow arrow and its ``run`` span around them.
"""

from __future__ import annotations

import time

from gert.core.request import Request
from gert.core.resolve import key_label
from gert.core.staged import run_staged
from gert.core.trace import Recorder

HOST_CLOCK = {"clock": "host"}


class TracedStages:
    """The stages of ``worker`` (gert.core.executor.Worker), each timed into ``tr`` on the worker's stream track."""

    traced = True

    def __init__(self, worker, tr: Recorder):
        self.worker, self.tr = worker, tr
        self.track = tr.stream_track(worker)
        self.separate_calls = tr.stages  # a static graph's stages as separate calls, each timed by the stream
        self.entry = None

    def graph_for(self, req: Request):
        w = self.worker
        compiles = w.stats.request_path_compiles
        self.entry = self.tr.timed(
            "graph",
            self.track,
            lambda: w.graph_for(req),
            args_of=lambda e: {
                "graph": "static" if e.is_static else "dynamic",
                "key": key_label(req.key),
                "compiled": w.stats.request_path_compiles > compiles,
            },
        )
        return self.entry

    def run_separately(self, entry, req, uploads, fills, inputs, downloads, started: float) -> None:
        self.tr.span("prepare", self.track, started, time.perf_counter())
        run_staged(self.worker, self.tr, self.track, entry, req, uploads, fills, inputs, downloads)

    def run_fused(self, entry, req, uploads, fills, inputs, outputs, downloads) -> None:
        self.tr.timed(
            "execute",
            self.track,
            lambda: self.worker.run_fused(entry, req, uploads, fills, inputs, outputs, downloads),
            args_of=lambda _: {**HOST_CLOCK, "fused": "h2d, execute, d2h, synchronize in one call"},
        )

    def copy_in(self, uploads, fills, inputs):
        return self.tr.timed("h2d", self.track, lambda: self.worker.copy_in(uploads, fills, inputs), args_of=_host)

    def execute_async(self, entry, req, tensors):
        return self.tr.timed(
            "execute", self.track, lambda: self.worker.execute_async(entry, req, tensors), args_of=_host
        )

    def copy_out(self, req, outputs, results) -> None:
        self.tr.timed("d2h", self.track, lambda: self.worker.copy_out(req, outputs, results), args_of=_host)

    def synchronize(self, req) -> None:
        self.tr.timed("synchronize", self.tr.thread_track(), lambda: self.worker.synchronize(req))


def _host(_result) -> dict:
    return HOST_CLOCK


def traced_run(worker, req: Request, tr: Recorder) -> dict:
    """``worker.run_stages(req, ...)`` with its stages traced: the caller's flow arrow to the stream's track and the
    request's ``run`` span (rows, graph key, static or dynamic) around them."""
    stages = TracedStages(worker, tr)
    t0 = time.perf_counter()
    tr.flow(tr.thread_track(), t0, stages.track, t0)
    results = worker.run_stages(req, stages)
    entry = stages.entry
    tr.span(
        "run",
        stages.track,
        t0,
        time.perf_counter(),
        "run",
        {
            "rows": req.sizes.get("batch"),
            "key": key_label(req.key),
            "graph": None if entry is None else ("static" if entry.is_static else "dynamic"),
        },
    )
    return results
