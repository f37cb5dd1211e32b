"""Shape tiers: which graph serves a request's shape, and which static graphs are kept.

Policy ``auto`` (the default for non-batch dims without gears): a shape without a static graph runs at once on the
stream's dynamic-shape graph (compiled at load by warmup). gert counts how often each shape is seen in a sliding
window; once a shape is hot (``hot_after`` hits within the last ``hot_window`` requests) a background thread compiles
a static graph for it on every stream, outside the streams' locks (GE compiles one graph of a Session while its other
graphs execute), loads it, and routes the shape to it. The static set is bounded by ``max_exact_graphs`` with
TinyLFU-style admission: a hot shape replaces the least frequent static one only if it was seen more than twice as
often over a longer horizon (ADMIT_HORIZON windows), so a scan of one-off sizes (never hot) cannot evict the hot
set, and shapes of about equal frequency do not keep swapping places. The static set is also bounded in bytes by
``host_memory`` (gert/core/host_memory.py): a shape is admitted only if its graphs (on every stream; their size
estimated from the static graphs built before) fit in what the set leaves of the budget, and its first graph built
is checked again before it is installed (GE's summary of the dynamic graph gives no sizes to estimate the first); a shape turned down runs on the dynamic graph, as before.
The compiler thread keeps to a share of one CPU (``compile_share``), resting between compiles.

Policy ``exact`` compiles on the request path (it has no other graph to run on); its bounded set is a segmented LRU
(SegmentedLRU): new sizes enter a probation segment and only a second hit protects them, so a scan of one-off sizes
evicts only other one-offs.
"""

from __future__ import annotations

import atexit
import collections
import threading
import time
import weakref
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from gert.core import host_memory as _host_memory
from gert.core.resolve import key_label
from gert.core.frequency import FrequencyWindow, SegmentedLRU  # noqa: F401 - SegmentedLRU: its old place
from gert.core import trace as _trace
from gert.errors import SessionReplaced

if TYPE_CHECKING:  # pragma: no cover
    from gert.core.executor import GraphEntry, Request, Worker

# Defaults: a size seen 4 times within the last 256 requests is hot. A long tail of sizes reaches that rarely by
# chance (a size with a 0.2% share, as one of PP-OCR det's 144 tail sizes, reaches 4 in a window with 0.2% chance,
# 3 with 1.7%: at 3, det's tail made a false start, a compile, every ~100 requests), while a size with a 2% share
# is seen ~5 times per window. A compile costs seconds on an NPU, so a size must show it recurs before it is paid
# for.
HOT_AFTER = 4
HOT_WINDOW = 256
# With the static set full, a newly hot shape replaces the least frequent static one only if it was seen more than
# ADMIT_FACTOR times as often (over ADMIT_HORIZON windows): counts are noisy, and shapes of about equal frequency
# would otherwise keep swapping places, each swap a compile (seconds on an NPU) that gains nothing.
ADMIT_FACTOR = 2
# The compiler thread's duty cycle: after a compile that took d seconds it rests d * (1 - share) / share seconds, so
# that background compiles take at most this share of one CPU on average. A compile is CPU work on the host (GE's,
# seconds to minutes; on the host NPU, ONNX Runtime's session creation) and a burst of them, when many sizes turn hot
# at once, would take that CPU from serving: request handling on a real device, the compute itself on the host NPU
# (PP-OCR rec in benchmarks/bench_shapes.py, 16 sizes hot within its first 240 requests: 0.74x ONNX Runtime's
# throughput in that pass without the rest, 0.93-0.96x with it).
# Under load a compile takes longer and the rest grows with it. The sizes that turn hot first (the most frequent)
# compile first.
COMPILE_SHARE = 0.25
# Admission (ADMIT_FACTOR) counts over the last ADMIT_HORIZON windows: a size's share over a window is too noisy to
# rank sizes of about equal frequency (PP-OCR rec over 24 widths, 16 static graphs: 11 sizes swapped in per 240
# requests when ranked by one window).
ADMIT_HORIZON = 4


class Tiers:
    """The ``auto`` policy of one Model: routes each request to its static graph or the stream's dynamic-shape graph,
    counts hotness, and compiles static graphs for hot shapes in one background thread."""

    def __init__(
        self,
        workers: Callable[[], list],
        dims: Sequence[str],
        max_static: int,
        hot_after: int = HOT_AFTER,
        hot_window: int = HOT_WINDOW,
        compile_share: float = COMPILE_SHARE,
        host_memory=None,
    ):
        self.host_memory = _host_memory.parse(host_memory)  # bytes the static graphs may hold (all streams)
        self.compile_share = float(compile_share)
        self._workers = workers  # () -> the model's workers (its stream pool opens them after the tiers)
        self.max_static = int(max_static)
        self.hot_after = int(hot_after)
        self.fallback_key = tuple((n, -1) for n in sorted(dims))  # every dynamic dim dynamic: serves any shape
        self._window = FrequencyWindow(int(hot_window))
        # admission compares frequencies over a longer horizon: within one window, sizes of about equal share
        # (a tail of a few dozen sizes, each a percent or so) swap places by chance, each swap a compile
        self._long = FrequencyWindow(ADMIT_HORIZON * int(hot_window))
        self._lock = threading.Condition()
        self._static: dict = {}  # admitted keys -> tick of their last request
        self._queue: collections.deque = collections.deque()
        self._queued: set = set()
        self._rejected: dict = {}  # key -> (its count, the tick) when admission turned it down
        self._failed: "collections.OrderedDict" = collections.OrderedDict()  # key -> why its compile failed
        self._tick = 0
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        self.evictions = 0
        self.rejections = 0
        self.memory_refusals = 0  # hot shapes turned down (or dropped once built) for the host_memory budget
        self._bytes: dict = {}  # admitted keys -> bytes of their graphs on every stream (once built)
        self._largest = 0  # the most bytes one static shape's graphs took (the estimate for the next)
        self.resting = 0.0  # seconds the compiler thread rested between compiles (COMPILE_SHARE)
        self._rest_until = 0.0  # time.monotonic() before which the compiler thread starts no compile
        _live.add(self)

    @property
    def workers(self) -> list:
        return self._workers()

    # ---- the request path (the caller holds w.lock) ----------------------------------------------------------
    def route(self, w: "Worker", req: "Request") -> "GraphEntry":
        key = req.key
        self.seen(w, key)
        entry = w.entry(key)
        if entry is not None:
            return entry
        entry = w.entry(self.fallback_key)
        if entry is None:  # warmup did not run: the dynamic graph is compiled once, here
            entry = w.compile(self.fallback_key)
            w.stats.request_path_compiles += 1
        return entry

    def seen(self, w: "Worker", key: tuple) -> None:
        """Count a request of ``key`` on ``w`` (the caller holds w.lock), and queue its static graph's compile once it
        is hot: route's count, and the compiled hot path's for a run of a static graph (gert/core/_hotpath.pyx)."""
        with self._lock:
            self._tick += 1
            n = self._window.add(key)
            self._long.add(key)
            if key in self._static:
                self._static[key] = self._tick
                if not w.has(key) and key not in self._queued and not self._stopping:
                    # admitted, yet this stream lost the graph (its Session was rebuilt by a device recovery)
                    self._queued.add(key)
                    self._queue.append(key)
                    self._lock.notify()
            elif (
                n >= self.hot_after
                and key not in self._queued
                and key not in self._failed
                and self._may_retry(key, n)
                and not self._stopping
                and not w.has(key)
            ):
                self._queued.add(key)
                self._queue.append(key)
                self._lock.notify()
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="gert-tiers", daemon=True)
                    self._thread.start()

    def _may_retry(self, key, n: int) -> bool:
        """Turned down before: ask again once it is seen more often, or a window later (the static set cools)."""
        rejected = self._rejected.get(key)
        return rejected is None or n > rejected[0] or self._tick - rejected[1] >= self._window.size

    # ---- the compiler thread -----------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._lock.wait()
                rest = self._rest_until - time.monotonic()  # the duty cycle (COMPILE_SHARE) after the last compile
                if rest > 0 and not self._stopping:
                    self.resting += rest
                    self._lock.wait_for(lambda: self._stopping, timeout=rest)
                if self._stopping:
                    return
                key = self._queue.popleft()
                victim = None if key in self._static else self._admit(key)  # admitted before: rebuild only
                if victim is False:
                    self._queued.discard(key)
                    continue
            if victim is not None:
                self._evict(victim)
            t0 = time.monotonic()
            p0 = time.perf_counter()
            self._build(key)
            self._account(key)
            t1 = time.monotonic()
            tr = _trace.active
            if tr is not None:  # a background compile, on the compiler thread's track
                tr.span(
                    "compile",
                    tr.thread_track("compiler (gert-tiers)"),
                    p0,
                    time.perf_counter(),
                    "compile",
                    {"key": key_label(key), "streams": len(self.workers)},
                )
            with self._lock:
                self._queued.discard(key)
                self._rest_until = t1 + (t1 - t0) * (1 - self.compile_share) / self.compile_share

    def _admit(self, key):
        """None: admitted with room to spare; a key: admitted in place of that victim; False: turned down (too rare
        to replace the least frequent static shape, or over the host_memory budget)."""
        victim = None
        if len(self._static) >= self.max_static:
            if not self._static:
                return False
            victim = min(self._static, key=lambda k: (self._long.count(k), self._static[k]))
            if self._long.count(key) <= ADMIT_FACTOR * self._long.count(victim):
                self._turn_down(key)
                return False
        freed = self._bytes.get(victim, 0) if victim is not None else 0
        if self.static_bytes() - freed + self._estimate() > self.host_memory:
            self._turn_down(key)
            self.memory_refusals += 1
            return False
        if victim is not None:
            del self._static[victim]
            self._bytes.pop(victim, None)
            self.evictions += 1
        self._static[key] = self._tick
        self._rejected.pop(key, None)
        return victim

    def _turn_down(self, key) -> None:
        if len(self._rejected) >= _REJECTED_KEPT:
            self._rejected.clear()
        self._rejected[key] = (self._window.count(key), self._tick)
        self.rejections += 1

    def static_bytes(self) -> int:
        """Bytes the admitted static graphs hold on all streams (those built so far)."""
        return sum(self._bytes.values())

    def _estimate(self) -> int:
        """The bytes a new static shape's graphs will take on all streams: the most a static shape's took so far
        (0 before the first is built: GE's summary of a dynamic graph has no memory sizes, so the first one is
        built, measured, and dropped again if it does not fit)."""
        return self._largest

    def _fits(self, key: tuple, cost: int) -> bool:
        """Whether the shape's graphs (``cost`` bytes on all streams, from the first one built) fit in the
        host_memory budget beside the other static shapes; if not, it is turned down (before it is installed)."""
        with self._lock:
            self._largest = max(self._largest, cost)
            if key in self._static and self.static_bytes() - self._bytes.get(key, 0) + cost <= self.host_memory:
                return True
            self._static.pop(key, None)
            self._bytes.pop(key, None)
            self._turn_down(key)
            self.memory_refusals += 1
            return False

    def _account(self, key: tuple) -> None:
        """Record what the shape's graphs hold once built; over the host_memory budget (the estimate was short),
        drop them again: the shape stays on the dynamic graph."""
        used = sum(getattr(w.entry(key), "memory", 0) for w in self.workers if w.has(key))
        with self._lock:
            if key not in self._static:
                return
            self._bytes[key] = used
            self._largest = max(self._largest, used)
            over = self.static_bytes() > self.host_memory
            if over:
                del self._static[key]
                del self._bytes[key]
                self._turn_down(key)
                self.memory_refusals += 1
        if over:
            self._evict(key)

    def _evict(self, key: tuple) -> None:
        for w in self.workers:
            if self._stopping:
                return
            with w.lock:  # not in flight: requests synchronize before they release the lock
                w.evict(key)

    def _build(self, key: tuple) -> None:
        """Compile, load and install the static graph for ``key`` on each stream in turn, through the worker's graph
        table: the build holds no lock, and a graph built in a Session that a device recovery (or close) retired
        meanwhile is not installed (the next request of that shape queues it again)."""
        for w in self.workers:
            if self._stopping:
                return
            if w.has(key):  # built already (a rebuild after a recovery touches only the streams that lost it)
                continue
            try:
                entry = w.build(key)  # without w.lock: the stream keeps serving on its other graphs
            except SessionReplaced:
                continue  # not the shape's fault: the new Session builds it when a request asks again
            except Exception as e:  # noqa: BLE001 - recorded; the shape stays on the dynamic graph
                if w.closed or self._stopping:
                    return
                with self._lock:
                    self._failed[key] = e
                    while len(self._failed) > _FAILED_KEPT:
                        self._failed.popitem(last=False)
                    self._static.pop(key, None)
                with w.lock:
                    w.stats.failed_background_compiles += 1
                return
            if not self._fits(key, entry.memory * len(self.workers)):  # never installed: no request runs on it
                with w.lock:
                    w.discard(entry)
                return
            with w.lock:
                if w.install(entry):  # routing switches here, atomically for this stream
                    w.stats.background_compiles += 1

    # ---- lifecycle and stats -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop compiling; returns without waiting for a compile in flight: the worker it builds in closes that
        Session when the build ends (gert.core.executor.Worker.build), and the graph is not installed."""
        with self._lock:
            self._stopping = True
            self._queue.clear()
            self._lock.notify_all()

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait for the compiler thread to end (after close()); True if it has."""
        t = self._thread
        if t is not None:
            t.join(timeout)
            return not t.is_alive()
        return True

    def stats(self) -> dict:
        with self._lock:
            return {
                "static_shapes": len(self._static),
                "max_static": self.max_static,
                "pending": len(self._queued),
                "evictions": self.evictions,
                "rejections": self.rejections,
                "host_memory": self.host_memory,
                "static_bytes": self.static_bytes(),
                "memory_refusals": self.memory_refusals,
                "compile_share": self.compile_share,
                "resting_s": round(self.resting, 3),
                "failed_background_compiles": {key_label(k): str(e) for k, e in self._failed.items()},
            }


_FAILED_KEPT = 64
_REJECTED_KEPT = 1024
_EXIT_WAIT = 120.0  # seconds: at exit, how long a compile in flight may still take
_live: "weakref.WeakSet[Tiers]" = weakref.WeakSet()


@atexit.register
def _stop_at_exit() -> None:
    """Stop every compiler thread and let a compile in flight return while Python still runs: a daemon thread that
    comes back into Python during finalization is ended by force, inside C++ frames (std::terminate)."""
    for t in list(_live):
        t.close()
    for t in list(_live):
        t.join(_EXIT_WAIT)
