"""The adapter's trace (issue 25): while a model instance serves, gert.trace records every request of its stub
process, and each execute() adds its batch formation: which Triton requests (by request id) rode in which batch,
with their rows. Written as a Chrome trace-event JSON when the instance is finalized.

Turned on per model by the parameter ``trace_file`` (a path, relative to the model's directory unless absolute), or
for every model of the process by the environment variable GERT_TRACE (a directory: one file per instance,
``{model}.{instance}.{pid}.json``); ``gert serve --trace DIR`` sets it for the server.

Triton's own tracing (``--trace-config``, Triton's JSON, not Chrome's) stamps the same requests by id, in ns of
std::chrono::steady_clock (CLOCK_MONOTONIC on Linux, the clock of Python's time.perf_counter): ``otherData``'s
``monotonic_origin_ns`` is that clock at ts = 0 here, so Triton's stamp ``ns`` sits at (ns - monotonic_origin_ns) / 1000
µs in this trace; ``wall_clock_origin_ns`` is the wall clock at ts = 0.
"""

from __future__ import annotations

import os
import time
from typing import Optional

import gert
import gert.core.trace

ENV = "GERT_TRACE"


def trace_path(trace_file: Optional[str], model_dir: str, name: str, instance: str) -> Optional[str]:
    """Where this instance writes its trace, or None (tracing off)."""
    if trace_file:
        return trace_file if os.path.isabs(trace_file) else os.path.join(model_dir, trace_file)
    directory = os.environ.get(ENV)
    if not directory:
        return None
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{name}.{instance or 'instance'}")
    return os.path.join(directory, f"{safe}.{os.getpid()}.json")


class AdapterTrace:
    """gert.trace for one model instance, plus the batch formation of each execute()."""

    def __init__(self, path: str, model_name: str):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        self.model_name = model_name
        self.trace = gert.Trace()
        if gert.core.trace.active is None:
            self.trace.start()
        else:  # another model of this process traces already: share its recording (written by each)
            self.trace.recorder = gert.core.trace.active
        self._recorder = self.trace.recorder
        # the wall clock at the trace's ts = 0 (Triton's --trace-config stamps are wall-clock ns)
        self.wall_origin_ns = time.time_ns() - round((time.perf_counter() - self._recorder.origin) * 1e9)
        self._batch: Optional[tuple] = None  # (start, request ids, rows) of the batch running now

    def batch(self, requests: list, inputs: list, rows_of) -> None:
        """A batch of ``requests`` (pb_utils requests) starts now; the previous one, if any, ended."""
        now = time.perf_counter()
        self._end_batch(now)
        self._batch = (now, [_request_id(r) for r in requests], [rows_of(i) for i in inputs])

    def execute_done(self, started: float, requests: list) -> None:
        """execute() of ``requests`` ran from perf_counter ``started`` until now."""
        now = time.perf_counter()
        self._end_batch(now)
        rec = self._recorder
        rec.span(
            "triton_execute",
            rec.thread_track(),
            started,
            now,
            "triton",
            {"model": self.model_name, "requests": [_request_id(r) for r in requests]},
        )

    def _end_batch(self, now: float) -> None:
        if self._batch is not None:
            start, ids, rows = self._batch
            rec = self._recorder
            rec.span(
                "triton_batch",
                rec.thread_track(),
                start,
                now,
                "triton",
                {"model": self.model_name, "request_ids": ids, "rows": rows},
            )
            self._batch = None

    def close(self) -> str:
        """Stop recording and write the JSON; its path."""
        self.trace.stop()
        return self.trace.write(
            self.path,
            {
                "model": self.model_name,
                "wall_clock_origin_ns": self.wall_origin_ns,
                "monotonic_origin_ns": round(self._recorder.origin * 1e9),
            },
        )


def _request_id(request) -> str:
    try:
        return request.request_id()
    except AttributeError:
        return ""
