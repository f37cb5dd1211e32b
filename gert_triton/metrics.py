"""gert's custom Triton metrics, published by a thread, at most once per interval.

Every pb_utils Metric call is a blocking IPC round trip to the server process (~40 us when idle). Made by
execute() after every batch they cost ~0.3 ms of a 5 ms PP-OCR cls batch under 16 clients; made by a thread
after every batch they still competed with the requests for the server's IPC and cost ~6% of the requests/s
(benchmarks/bench_triton.py). So execute() only notifies the Publisher (a lock and a counter; the thread is
woken only when idle); its thread waits ``interval`` from the first notification, asks ``collect()`` for
everything counted since its last publication (so any number of batches become one call per metric that
changed) and makes the calls. flush() publishes at once and waits; close() flushes, stops the thread and deletes
the metrics before their families (as Triton requires).

Every series carries ``model``, ``version`` and ``instance`` labels (one stub per instance: without ``instance``
two instances would overwrite each other's gauges and share counters), and the ``gear`` label is bounded: a dim at
one of its declared gears shows its size, any other size shows as ``dynamic`` (``batch=4,S=dynamic``), so a model
serving thousands of sizes still has at most one series per gear combination (StatsChanges).

Every series also carries the stub's ``pid``. Triton shares a custom metric across the stubs that create a
family of the same name and a series with the same labels (Triton core's MetricFamily::Add returns prometheus-cpp's
existing series, and each stub's family counts its own references), and the first stub to delete its Metric removes
the shared series while the other still writes to it: a use after free in the server process
(triton-inference-server/server#8663; tritonserver 2.51 aborted with "malloc(): unaligned fastbin chunk detected"
later, in our runs after a model was reloaded). A model reloaded, or a load that replaces a serving one, starts new
stubs with the same model, version and instance names while the old ones still serve: the pid keeps their series
apart. The old stub's series go when it unloads (its Metrics are deleted), so a model has one set of series per live
stub.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Mapping, Optional

(
    GEAR_HITS,
    PADDING_RATIO,
    STREAM_BUSY,
    GRAPH_REQUESTS,
    BACKGROUND_COMPILES,
    REQUEST_PATH_COMPILES,
    ACTIVE_SEQUENCES,
    RETRIED_BATCHES,
    PADDING_SECONDS,
    SPLIT_BATCHES,
    CANCEL_CHECKS,
) = range(11)

Change = tuple  # (family, labels, "increment" | "set", value)


class Publisher:
    """The gert metric families of one model instance and the thread that publishes to them."""

    def __init__(
        self,
        pb_utils,
        model_name: str,
        collect: Callable[[], list[Change]],
        interval: float = 0.1,
        version: str = "",
        instance: str = "",
        pid: Optional[int] = None,
    ):
        fam = pb_utils.MetricFamily
        self._log = getattr(pb_utils, "Logger", None)
        self._families = self._create_families(fam)
        self._base = (
            ("model", model_name),
            ("version", str(version)),
            ("instance", instance or model_name),
            ("pid", str(os.getpid() if pid is None else pid)),
        )
        self._collect = collect
        self.interval = interval
        self._metrics: dict = {}
        self._cond = threading.Condition()
        self._requested = 0  # notify() / flush() calls so far
        self._done = 0  # the _requested value the last finished publication covered
        self._urgent = 0  # flushes waiting: publish without waiting for the interval
        self._stop = False
        self._idle = False  # the thread waits for a notify (not for the end of an interval)
        self._error_logged = False
        self._thread: Optional[threading.Thread] = None

    @staticmethod
    def _create_families(fam) -> list:
        return [
            fam(name="gert_gear_hits_total", description="Batches run per gear (graph shape)", kind=fam.COUNTER),
            fam(name="gert_padding_ratio", description="Share of padded elements per gear", kind=fam.GAUGE),
            fam(
                name="gert_stream_busy_seconds_total",
                description="Seconds each stream spent running requests",
                kind=fam.COUNTER,
            ),
            fam(
                name="gert_graph_requests_total",
                description="Requests per stream served by static or dynamic-shape graphs",
                kind=fam.COUNTER,
            ),
            fam(
                name="gert_background_compiles_total",
                description="Static graphs compiled off the request path for hot shapes (shape policy auto)",
                kind=fam.COUNTER,
            ),
            fam(name="gert_request_path_compiles_total", description="Compiles a request waited for", kind=fam.COUNTER),
            fam(
                name="gert_active_sequences",
                description="Sequences whose state is held on the device (stateful models)",
                kind=fam.GAUGE,
            ),
            fam(
                name="gert_retried_batches_total",
                description="Merged batches whose run failed on the device and "
                "were retried request by request, so that only a request failing alone failed",
                kind=fam.COUNTER,
            ),
            fam(
                name="gert_padding_seconds_total",
                description="Run seconds spent on padded elements per gear (each run's time times its padded share)",
                kind=fam.COUNTER,
            ),
            fam(
                name="gert_split_batches_total",
                description="Merged batches run split over the idle streams or whole on one (split_batch: "
                "whichever measured faster for the batch's shape)",
                kind=fam.COUNTER,
            ),
            fam(
                name="gert_cancellation_checks_total",
                description="is_cancelled() asks made before requests ran, and requests run unasked (check_cancelled "
                "auto: where an ask costs more than its share of a run)",
                kind=fam.COUNTER,
            ),
        ]

    def notify(self) -> None:
        """Something was counted: publish it within ``interval`` (returns at once)."""
        with self._cond:
            if self._stop:
                return
            self._requested += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gert-triton-metrics", daemon=True)
                self._thread.start()
            elif self._idle:  # otherwise it is counting down an interval and will see this: no wake-up per batch
                self._cond.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Publish everything counted so far now, and wait for it; False on timeout."""
        self.notify()
        with self._cond:
            if self._thread is None:
                return True
            target = self._requested
            self._urgent += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: self._done >= target, timeout)
            finally:
                self._urgent -= 1

    def close(self, timeout: float = 10.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        self._metrics.clear()  # Metrics go before their families
        self._families.clear()

    # ---- the publishing thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                self._idle = True
                self._cond.wait_for(lambda: self._requested > self._done or self._stop)
                self._idle = False
                deadline = time.monotonic() + self.interval  # what comes in meanwhile joins this publication
                while not (self._stop or self._urgent):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._stop and self._requested == self._done:
                    return
                covered = self._requested
            try:
                self._publish(self._collect())
            except Exception as e:  # noqa: BLE001 - metrics must never take the model down; say it once
                if not self._error_logged and self._log is not None:
                    self._error_logged = True
                    self._log.log_error(f"gert_triton: publishing metrics failed: {type(e).__name__}: {e}")
            finally:
                with self._cond:
                    self._done = covered
                    self._cond.notify_all()

    def _publish(self, changes: list[Change]) -> None:
        for family, labels, op, value in changes:
            key = (family, self._base + tuple(sorted(labels.items())))
            m = self._metrics.get(key)
            if m is None:
                m = self._families[family].Metric(labels=dict(key[1]))
                self._metrics[key] = m
            if op == "increment":
                m.increment(value)
            else:
                m.set(value)


def gear_label(key: str, gears: Mapping[str, frozenset]) -> str:
    """The bounded ``gear`` label of a graph key label ("S=37,batch=1"): each dim's size where it is one of the dim's
    declared ``gears`` (sizes as strings), else ``dynamic``; "static" (a model without dynamic dims) stays."""
    if key == "static":
        return key
    parts = []
    for item in key.split(","):
        dim, _, size = item.rpartition("=")
        parts.append(f"{dim}={size if size in gears.get(dim, ()) else 'dynamic'}")
    return ",".join(parts)


class StatsChanges:
    """gert.Model.stats() snapshots -> the metric changes since the previous snapshot, with bounded gear labels.
    The padding ratio of a gear label that several graph shapes share is their hits-weighted mean."""

    def __init__(self, gears: Mapping[str, frozenset]):
        self.gears = dict(gears)
        self._hits: dict = {}  # gear label -> hits published
        self._padding: dict = {}  # gear label -> padding ratio published
        self._padding_s: dict = {}  # gear label -> padding seconds published
        self._streams: dict = {}  # (device, stream) -> the stream's last stats
        self._active: Optional[int] = None
        self._retried = 0
        self._counted: dict = {}  # (family, label value) -> the count published

    def __call__(self, stats: Mapping, active: Optional[int] = None, checks: Optional[Mapping] = None) -> list:
        """The changes since the last call; ``checks``: the cancellation asks ({"asked": n, "skipped": n})."""
        changes: list = []
        hits: dict = {}
        padded: dict = {}
        padding_s: dict = {}
        for key, g in stats["gears"].items():
            label = gear_label(key, self.gears)
            hits[label] = hits.get(label, 0) + g["hits"]
            padded[label] = padded.get(label, 0.0) + g["hits"] * g["padding_ratio"]
            padding_s[label] = padding_s.get(label, 0.0) + g.get("padding_seconds", 0.0)
        for label, n in hits.items():
            delta = n - self._hits.get(label, 0)
            if delta > 0:  # only gears that ran since
                changes.append((GEAR_HITS, {"gear": label}, "increment", delta))
                ratio = padded[label] / n
                if self._padding.get(label) != ratio:  # a gauge: only when it changes
                    changes.append((PADDING_RATIO, {"gear": label}, "set", ratio))
                    self._padding[label] = ratio
                cost = padding_s[label] - self._padding_s.get(label, 0.0)
                if cost > 0:
                    changes.append((PADDING_SECONDS, {"gear": label}, "increment", cost))
                    self._padding_s[label] = padding_s[label]
            self._hits[label] = n
        for s in stats["streams"]:
            where = {"stream": str(s["stream"]), "device": str(s["device"])}
            before = self._streams.get((s["device"], s["stream"]), {})
            delta = s["busy_seconds"] - before.get("busy_seconds", 0.0)
            if delta > 0:
                changes.append((STREAM_BUSY, where, "increment", delta))
            for family, name, labels in (
                (GRAPH_REQUESTS, "static_hits", {"graph": "static"}),
                (GRAPH_REQUESTS, "dynamic_hits", {"graph": "dynamic"}),
                (BACKGROUND_COMPILES, "background_compiles", {}),
                (REQUEST_PATH_COMPILES, "request_path_compiles", {}),
            ):
                n = s[name] - before.get(name, 0)
                if n > 0:
                    changes.append((family, {**where, **labels}, "increment", n))
            self._streams[(s["device"], s["stream"])] = s
        retried = (stats.get("batching") or {}).get("retried_batches", 0)
        if retried > self._retried:
            changes.append((RETRIED_BATCHES, {}, "increment", retried - self._retried))
            self._retried = retried
        split = stats.get("split_batch") or {}
        for family, label, counts in (
            (SPLIT_BATCHES, "way", {w: split.get(w, 0) for w in ("split", "whole")}),
            (CANCEL_CHECKS, "check", checks or {}),
        ):
            for value, n in counts.items():
                delta = n - self._counted.get((family, value), 0)
                if delta > 0:
                    changes.append((family, {label: value}, "increment", delta))
                    self._counted[(family, value)] = n
        if active is not None and active != self._active:
            self._active = active
            changes.append((ACTIVE_SEQUENCES, {}, "set", active))
        return changes
