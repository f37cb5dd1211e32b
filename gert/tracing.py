"""gert.trace: a per-request timeline of every stream, written as a Chrome trace-event JSON that Perfetto UI
(ui.perfetto.dev) and chrome://tracing open.

    with gert.trace("run.json"):
        model.run(inputs)

or ``t = gert.trace("run.json").start()`` ... ``t.stop()`` for long runs. The core records into
gert/core/trace.py while the trace is open: per request, on the calling thread's track ``request`` with its
``validate``, ``queue`` and ``synchronize``; on the stream's track (pid = device, tid = stream) ``run`` with
``graph`` (static / dynamic, compiled on the request path or not), ``batch`` (dynamic batching: which requests,
their rows), ``prepare``, ``h2d``, ``execute``, ``d2h``; background ``compile`` on the compiler thread's track;
``fault`` / ``timeout`` / ``oom_retry`` / ``recovery`` (category "error"); a flow arrow from each request to its
stream work.

``stages=True``: a static graph's request runs as separate h2d / execute / d2h calls timed by ACL timing events
on the stream (gert/core/staged.py); ``stages=False`` keeps the one fused call (one ``execute`` span).
"""

from __future__ import annotations

import json
import os

from gert.core import trace as _core
from gert.core.atomic_file import atomic_open
from gert.errors import GertError


class Trace:
    """One recording: a context manager, or start() / stop(). ``events``: the trace events so far."""

    def __init__(self, path: str | os.PathLike | None = None, *, stages: bool = True):
        if not isinstance(stages, bool):
            raise GertError(f"trace: stages must be True or False, got {stages!r}")
        self.path = None if path is None else os.fspath(path)
        self.stages = stages
        self.recorder: _core.Recorder | None = None

    def start(self) -> Trace:
        """Start recording (every request of every Model in this process, until stop())."""
        if _core.active is not None:
            raise GertError("trace: another gert.trace is recording; stop it first")
        self.recorder = _core.start(self.stages)
        return self

    def stop(self) -> Trace:
        """Stop recording; write the JSON to ``path`` if one was given."""
        if self.recorder is not None and _core.active is self.recorder:
            _core.stop()
        if self.path is not None:
            self.write(self.path)
        return self

    def __enter__(self) -> Trace:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def events(self) -> list:
        return [] if self.recorder is None else list(self.recorder.events)

    def to_json(self) -> dict:
        """The trace-event JSON object (Chrome's "JSON Object Format")."""
        return {
            "traceEvents": self.events,
            "displayTimeUnit": "ms",
            "otherData": {"producer": "gert", "stages": self.stages},
        }

    def write(self, path: str | os.PathLike, other_data: dict | None = None) -> str:
        """Write the trace to ``path`` (a .json file), ``other_data`` merged into its "otherData"; the path.

        Atomic: the JSON goes to a temporary file beside ``path`` that is renamed over it, so a reader (a viewer, a
        test polling for the file) sees no file or the whole trace, never a half-written one."""
        data = self.to_json()
        data["otherData"].update(other_data or {})
        return write_json(path, data)

    def stage_stats(self) -> dict:
        """Per stage: count, mean_ms, p99_ms."""
        return {} if self.recorder is None else self.recorder.stage_stats()


def write_json(path: str | os.PathLike, data: dict) -> str:
    """Write ``data`` as JSON to ``path`` whole or not at all (gert/core/atomic_file.py); the path."""
    path = os.fspath(path)
    with atomic_open(path) as f:
        json.dump(data, f)
    return path


def trace(path: str | os.PathLike | None = None, *, stages: bool = True) -> Trace:
    """A trace of every request while it is open (see the module's docstring)."""
    return Trace(path, stages=stages)
