"""In-process dynamic batching: its settings, a request waiting to share a run, and its statistics.

The Engine (gert/core/engine.py) batches concurrent callers of one model: a request that may share a graph run
(gert.core.batching.Batcher) waits in the Model's stream queue (gert/dispatch.py) with its batch key; when a stream
comes free, the request that waited longest takes it together with every queued request of the same key, up to the
largest batch gear, and runs them as one batch. Nothing waits for a batch to fill unless ``max_queue_delay_ms`` says
so: a lone request runs at once.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

from gert.core.wakeup import new_wakeup
from gert.errors import GertError

_SETTINGS = ("max_queue_delay_ms", "max_batch", "preferred_batch_size", "latency_slo_ms")
_WAITS_KEPT = 4096  # recent queue waits kept for the p99 (a ring)


@dataclass(frozen=True)
class BatchingConfig:
    """``gert.load(dynamic_batching=...)``, with Triton's names (model_config.proto's dynamic_batching):
    ``max_queue_delay_ms``: how long the first request of a batch may wait for others to fill a preferred size
    (0: never wait); ``max_batch``: rows of one batch at most (default: the largest batch gear);
    ``preferred_batch_size``: sizes at which a batch stops waiting (default: the largest it may have);
    ``latency_slo_ms``: the first request of a batch waits for company only as long as its latency stays within
    this, given the measured run time of the gear the batch would fill (learned online; nothing measured yet:
    no wait). With both delays, the shorter wait applies."""

    max_queue_delay_ms: float = 0.0
    max_batch: Optional[int] = None
    preferred_batch_size: tuple = ()
    latency_slo_ms: Optional[float] = None

    @staticmethod
    def parse(value: Union[bool, Mapping, "BatchingConfig", None]) -> Optional["BatchingConfig"]:
        """True (no added delay) / False (off) / a dict of the settings (or a BatchingConfig: as it is); None when
        off."""
        if value is None or value is False:
            return None
        if isinstance(value, BatchingConfig):
            return value
        if value is True:
            return BatchingConfig()
        if not isinstance(value, Mapping):
            raise GertError(
                f"dynamic_batching must be True, False or a dict of {list(_SETTINGS)}; got {type(value).__name__}"
            )
        unknown = [k for k in value if k not in _SETTINGS]
        if unknown:
            raise GertError(f"dynamic_batching: unknown setting(s) {unknown}; the settings are {list(_SETTINGS)}")
        delay = value.get("max_queue_delay_ms", 0.0)
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not delay >= 0:
            raise GertError(f"dynamic_batching: max_queue_delay_ms must be a number >= 0, got {delay!r}")
        slo = value.get("latency_slo_ms")
        if slo is not None and (isinstance(slo, bool) or not isinstance(slo, (int, float)) or not slo > 0):
            raise GertError(f"dynamic_batching: latency_slo_ms must be a number > 0, got {slo!r}")
        top = value.get("max_batch")
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
            raise GertError(f"dynamic_batching: max_batch must be an int >= 1, got {top!r}")
        preferred = value.get("preferred_batch_size", ())
        preferred = (preferred,) if isinstance(preferred, int) and not isinstance(preferred, bool) else preferred
        try:
            sizes = tuple(sorted({int(s) for s in preferred if not isinstance(s, bool) and int(s) == s and s >= 1}))
            ok = len(sizes) == len(set(preferred))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise GertError(
                f"dynamic_batching: preferred_batch_size must be an int or a list of ints >= 1, got "
                f"{value.get('preferred_batch_size')!r}"
            )
        if top is not None and sizes and sizes[-1] > top:
            raise GertError(f"dynamic_batching: preferred_batch_size {list(sizes)} goes beyond max_batch={top}")
        return BatchingConfig(float(delay), top, sizes, None if slo is None else float(slo))


class Pending:
    """One request waiting in the stream queue to share a run; the request that leads its batch delivers its
    result (or error) here, and its own thread waits for it: asleep on ``wakeup`` (gert/core/wakeup.py) from the
    time it queues until a stream or its result is handed to it (the queue, gert/core/dispatch.py, sleeps on the
    same wake-up, so a request taken into another's batch is woken once)."""

    __slots__ = (
        "arrays",
        "sizes",
        "rows",
        "key",
        "out",
        "timeout",
        "limit",
        "queued_at",
        "wakeup",
        "done",
        "_result",
        "_error",
        "device",
        "wait_s",
    )

    def __init__(
        self,
        arrays: dict,
        sizes: dict,
        rows: int,
        key: tuple,
        out: Optional[dict],
        timeout: Optional[float],
        limit: int,
        device: Optional[int] = None,
        wait_s: float = 0.0,
    ):
        self.arrays, self.sizes, self.rows, self.key = arrays, sizes, rows, key
        self.out, self.timeout, self.limit = out, timeout, limit
        self.device = device  # only a stream of this device may run it (a sequence step: its state lives there)
        self.wait_s = wait_s  # > 0: its batch's leader waits this long for company (sequence_wait_s)
        self.queued_at = time.perf_counter()
        self.wakeup = new_wakeup()
        self.done = False  # its result or error delivered (set before the wake-up is released)
        self._result: Optional[dict] = None
        self._error: Optional[BaseException] = None

    def set_result(self, result: dict) -> None:
        self._deliver(result, None)

    def set_error(self, error: BaseException) -> None:
        self._deliver(None, error)

    def _deliver(self, result: Optional[dict], error: Optional[BaseException]) -> None:
        """The first delivery counts (only the leader of its batch delivers, once); its thread is woken."""
        if self.done:
            return
        self._result, self._error, self.done = result, error, True
        self.wakeup.release()

    def result(self) -> dict:
        """Wait for the batch that took this request; its outputs, or its own error raised. (A wake-up the queue
        consumed already was this delivery's: ``done`` is set before it is released.)"""
        if not self.done:
            self.wakeup.acquire()
        if self._error is not None:
            raise self._error
        return self._result


class RunTimes:
    """Seconds a run takes per batch size the graph runs at, learned from the runs: the median of the last ``kept``
    runs at a size, the first run there left out (it allocates the stream's buffers for that size and touches their
    pages). A median, not a mean: one run stalled by the OS scheduler moves it not at all."""

    def __init__(self, kept: int = 9):
        self._runs: dict = {}  # size -> the last runs' seconds (the first run at a size: not kept)
        self._seconds: dict = {}  # size -> their median
        self._kept = kept
        self._line: Optional[tuple] = None  # cost()'s line through the medians (None: to fit again)

    def add(self, size: int, seconds: float) -> None:
        runs = self._runs.get(size)
        if runs is None:
            self._runs[size] = collections.deque(maxlen=self._kept)
            return
        runs.append(seconds)
        self._seconds[size] = _median(runs)
        self._line = None

    def estimate(self, size: int) -> Optional[float]:
        """The run time at ``size``: measured there, else the one measured at the nearest larger size (a
        conservative guess), else None."""
        known = self._seconds.get(size)
        if known is not None:
            return known
        larger = [s for s in self._seconds if s > size]
        return self._seconds[min(larger)] if larger else None

    def cost(self, size: int) -> Optional[float]:
        """The run time at ``size``: measured there, else read off the straight line (a launch, and a cost per row)
        fitted through the sizes measured (two at least), else None. An estimate that turns out wrong is measured
        once that size runs (gert/core/gear_pieces.py then decides on the measurement)."""
        known = self._seconds.get(size)
        if known is not None or len(self._seconds) < 2:
            return known
        if self._line is None:  # fitted once per change of the medians
            sizes, seconds = zip(*self._seconds.items())
            mean_x, mean_y = sum(sizes) / len(sizes), sum(seconds) / len(seconds)
            per_row = sum((x - mean_x) * (y - mean_y) for x, y in zip(sizes, seconds)) / sum(
                (x - mean_x) ** 2 for x in sizes
            )
            self._line = (mean_x, mean_y, per_row)
        mean_x, mean_y, per_row = self._line
        return max(0.0, mean_y + per_row * (size - mean_x))


class BatchingStats:
    """Batches formed by the dynamic batcher: sizes, queue waits, per gear; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.batches = 0  # runs of the batcher (a lone request is a batch of 1)
        self.requests = 0  # requests those runs served
        self.retried_batches = 0  # merged batches that failed on the device and were retried request by request
        self.sizes: collections.Counter = collections.Counter()  # requests per batch -> batches
        self.gears: dict = {}  # gear label -> [batches, requests]
        self.wait_seconds = 0.0  # summed over requests
        self._waits: collections.deque = collections.deque(maxlen=_WAITS_KEPT)

    def record(self, requests: int, gear: str, waits: list, retried: bool = False) -> None:
        with self._lock:
            self.batches += 1
            self.requests += requests
            self.retried_batches += int(retried)
            self.sizes[requests] += 1
            g = self.gears.setdefault(gear, [0, 0])
            g[0] += 1
            g[1] += requests
            self.wait_seconds += sum(waits)
            self._waits.extend(waits)

    def record_alone(
        self, requests: int, gear: str, wait_s: float = 0.0, waited: int = 0, waits: Sequence[float] = ()
    ) -> None:
        """``requests`` lone requests that ran as batches of one on the compiled hot path (gert/core/_hotpath.pyx,
        which counts them in C): ``waited`` of them waited ``wait_s`` seconds for their streams in all, ``waits``
        the latest of those waits; the others found a stream free."""
        with self._lock:
            self.batches += requests
            self.requests += requests
            self.sizes[1] += requests
            g = self.gears.setdefault(gear, [0, 0])
            g[0] += requests
            g[1] += requests
            self.wait_seconds += wait_s
            self._waits.extend(wait_samples(requests, waited, waits, _WAITS_KEPT))

    def retried(self) -> None:
        """A batch merged by run(list), gert_triton or a sequence step whose run faulted and was retried member by
        member (the dynamic batcher's own are counted by record())."""
        with self._lock:
            self.retried_batches += 1

    def snapshot(self) -> dict:
        """Batches formed, requests, mean / p99 batch size, mean / p99 queue wait (ms), per gear, size histogram."""
        with self._lock:
            sizes = sorted(self.sizes.items())
            waits = sorted(self._waits)
            out = {
                "batches": self.batches,
                "requests": self.requests,
                "retried_batches": self.retried_batches,
                "mean_batch_size": self.requests / self.batches if self.batches else 0.0,
                "p99_batch_size": _percentile_counts(sizes, 0.99),
                "mean_queue_wait_ms": 1000 * self.wait_seconds / self.requests if self.requests else 0.0,
                "p99_queue_wait_ms": 1000 * waits[min(len(waits) - 1, int(0.99 * len(waits)))] if waits else 0.0,
                "batch_sizes": dict(sizes),
                "gears": {
                    k: {"batches": b, "requests": r, "mean_batch_size": r / b}
                    for k, (b, r) in sorted(self.gears.items())
                },
            }
        return out


def _percentile_counts(counts: list, q: float) -> int:
    """The ``q`` quantile of values given as sorted (value, count) pairs (0 when empty)."""
    total = sum(c for _, c in counts)
    if not total:
        return 0
    rank, seen = q * total, 0
    for value, c in counts:
        seen += c
        if seen >= rank:
            return value
    return counts[-1][0]


def _median(values) -> float:
    """statistics.median (whose import, with fractions and decimal, costs a serving process ~0.5 MB)."""
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def wait_samples(requests: int, waited: int, waits: Sequence[float], kept: int) -> list:
    """The queue waits of ``requests`` requests as at most ``kept`` values with their quantiles: ``waited`` of them
    waited, ``waits`` the latest of those waits (seconds), the others waited none. Exact while both counts fit;
    else the waits are picked evenly from their sorted order and zeros stand for the rest in proportion."""
    if requests <= 0:
        return []
    n = min(requests, kept)
    ranked = sorted(waits)
    k = min(n, round(n * min(waited, requests) / requests)) if ranked else 0
    picked = [ranked[i * len(ranked) // k] for i in range(k)]
    return [0.0] * (n - k) + picked
