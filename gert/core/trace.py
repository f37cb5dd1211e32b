"""The trace recorder the core writes to while ``gert.trace`` is open (the user-facing side: gert/tracing.py).

Chrome trace-event format (the one Perfetto UI and chrome://tracing open; ONNX Runtime's ``enable_profiling``,
PyTorch's ``export_chrome_trace`` and msprof write it too): complete events (``"ph": "X"``, ``ts`` / ``dur`` in
microseconds), flow events (``"ph": "s"`` / ``"f"``) and track names (``"ph": "M"``).

Tracks: ``pid`` = the device, ``tid`` = one per stream on it; ``pid`` HOST_PID holds one track per calling thread
and one for the compiler thread (gert/core/tiers.py).

Off, it costs the hot path one check: ``if trace.active is not None`` (a module global, read where a request
starts and where a stream runs it); nothing is called.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Callable, Optional, TypeVar

T = TypeVar("T")

HOST_PID = 1_000_000  # the process (track group) of the host threads: callers, the compiler thread

active: Optional["Recorder"] = None  # the open recorder, or None (tracing off)
last: Optional["Recorder"] = None  # the recorder stopped last (Model.stats() shows its stages)


class Recorder:
    """Trace events of one ``gert.trace`` (appended from any thread: list.append is atomic)."""

    def __init__(self, stages: bool = True):
        self.stages = stages  # run a static graph's request as separate h2d / execute / d2h calls, each timed
        self.origin = time.perf_counter()
        self._raw: list = []  # events as tuples, in recording order
        self._meta: list = []  # the tracks' names (Chrome's "M" events)
        self._lock = threading.Lock()
        self._tracks: dict = {}  # key -> (pid, tid)
        self._next_tid: dict = {}  # pid -> next tid
        self._flows = itertools.count(1)

    # ---- time and tracks ------------------------------------------------------------------------------------
    def us(self, t: float) -> float:
        """time.perf_counter() ``t`` as the trace's microseconds."""
        return round((t - self.origin) * 1e6, 3)

    def _track(self, key, pid: int, name: str, sort: int) -> tuple:
        track = self._tracks.get(key)
        if track is not None:
            return track
        with self._lock:
            track = self._tracks.get(key)
            if track is not None:
                return track
            if pid not in self._next_tid:
                self._next_tid[pid] = 0
                pname = "host" if pid == HOST_PID else f"device {pid}"
                self._meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": pname}})
            tid = self._next_tid[pid] = self._next_tid[pid] + 1
            self._meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            self._meta.append(
                {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": sort}}
            )
            self._tracks[key] = track = (pid, tid)
            return track

    def thread_track(self, name: Optional[str] = None) -> tuple:
        """(pid, tid) of the calling thread's track (named ``name``, else the thread's name)."""
        track = self._tracks.get(threading.get_ident())
        if track is not None:
            return track
        t = threading.current_thread()
        return self._track(t.ident, HOST_PID, name or t.name, 1000 + len(self._tracks))

    def stream_track(self, worker) -> tuple:
        """(pid, tid) of a worker's stream (gert.core.executor.Worker): pid = its device."""
        return self._track(("stream", id(worker)), worker.device, f"stream {worker.index}", worker.index)

    def streams_of(self, workers: list) -> set:
        """The (pid, tid) tracks of ``workers``' streams that this trace has."""
        return {self._tracks[("stream", id(w))] for w in workers if ("stream", id(w)) in self._tracks}

    def stage_stats(self, workers: Optional[list] = None) -> dict:
        """Per stage name: count, mean and p99 in ms of its complete events (on ``workers``' stream tracks only,
        when given; the caller-side stages, queue and synchronize, then are left out)."""
        tracks = None if workers is None else self.streams_of(workers)
        durs: dict = {}
        for ph, name, _, start, end, track, _ in list(self._raw):
            if ph == "X" and (tracks is None or track in tracks):
                durs.setdefault(name, []).append((end - start) * 1000.0)
        out = {}
        for name, ds in sorted(durs.items()):
            ds.sort()
            out[name] = {
                "count": len(ds),
                "mean_ms": sum(ds) / len(ds),
                "p99_ms": ds[min(len(ds) - 1, int(0.99 * len(ds)))],
            }
        return out

    # ---- events ---------------------------------------------------------------------------------------------
    # Recorded as tuples (cheap on the request path); ``events`` builds the trace-event dicts when asked.
    def span(
        self, name: str, track: tuple, start: float, end: float, cat: str = "stage", args: Optional[dict] = None
    ) -> None:
        """A complete event from perf_counter ``start`` to ``end`` on ``track``."""
        self._raw.append(("X", name, cat, start, end, track, args))

    def error(
        self, name: str, track: tuple, start: float, end: float, error: BaseException, args: Optional[dict] = None
    ) -> None:
        """A fault, timeout or failed request: a complete event of category "error" naming the exception."""
        self._raw.append(
            (
                "X",
                name,
                "error",
                start,
                end,
                track,
                dict(args or {}, error=type(error).__name__, message=str(error)[:300]),
            )
        )

    def timed(
        self,
        name: str,
        track: tuple,
        call: Callable[[], T],
        cat: str = "stage",
        args_of: Optional[Callable[[T], Optional[dict]]] = None,
        errors: bool = False,
    ) -> T:
        """``call()`` wrapped in a span named ``name`` on ``track`` (``args_of(result)``: its args); its result. When
        it raises: an error event if ``errors``, else nothing. How a stage is traced without lines inside it."""
        start = time.perf_counter()
        try:
            result = call()
        except BaseException as e:
            if errors:
                self.error(name, track, start, time.perf_counter(), e)
            raise
        self.span(name, track, start, time.perf_counter(), cat, None if args_of is None else args_of(result))
        return result

    def flow(self, source: tuple, at: float, target: tuple, to: float, name: str = "request") -> None:
        """An arrow from ``source`` at ``at`` to the event enclosing ``to`` on ``target`` (a request's caller span to
        its stream work)."""
        self._raw.append(("s", name, next(self._flows), at, to, source, target))

    @property
    def events(self) -> list:
        """The trace events so far (Chrome's trace-event format): track metadata first, then in recording order."""
        out = list(self._meta)
        us = self.us
        for ph, name, cat, start, end, track, extra in list(self._raw):
            if ph == "X":
                ev = {
                    "ph": "X",
                    "name": name,
                    "cat": cat,
                    "ts": us(start),
                    "dur": round(max(0.0, end - start) * 1e6, 3),
                    "pid": track[0],
                    "tid": track[1],
                }
                if extra:
                    ev["args"] = extra
                out.append(ev)
            else:  # a flow: cat holds its id, extra its target track
                out.append(
                    {
                        "ph": "s",
                        "name": name,
                        "cat": "flow",
                        "id": cat,
                        "ts": us(start),
                        "pid": track[0],
                        "tid": track[1],
                    }
                )
                out.append(
                    {
                        "ph": "f",
                        "bp": "e",
                        "name": name,
                        "cat": "flow",
                        "id": cat,
                        "ts": us(end),
                        "pid": extra[0],
                        "tid": extra[1],
                    }
                )
        return out


def start(stages: bool = True) -> Recorder:
    """Open a recorder (the core records into it until stop()); GertError-free: one at a time, the newest wins."""
    global active
    active = Recorder(stages)
    return active


def stop() -> Optional[Recorder]:
    """Stop recording; the recorder that was open."""
    global active, last
    rec, active = active, None
    if rec is not None:
        last = rec
    return rec
