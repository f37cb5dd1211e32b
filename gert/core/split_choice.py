"""Whether a merged batch runs split over the idle streams or whole on one, by the wall time each way took.

With split_batch, a batch of several requests can be spread over the idle streams at request boundaries, each part
run in parallel. Where the streams share the device's cores by load (gert/core/_core_share.pyx), a part gets its
share of the cores, and the whole batch on one stream gets them all: which is faster is the model's (on the host NPU:
two single-threaded ONNX Runtime runs of half the rows against one run with every intra-op thread; PP-OCR cls runs
faster split, det's 640x640 convolutions whole). So each (rows, other dims, parts) is measured: the split first (the
behaviour before), then the whole batch, each ``MEASURED`` times after a first run left out (it allocates buffers);
then the faster is taken, and the other is run again once every ``RETRY`` batches of that size so that a change (the
device's other load) is seen. Times are medians of the last ``KEPT`` runs (one run the OS stalled moves nothing).
The other dims are part of the key (a 640x640 batch is not timed against a 320x320 one); the latest ``SHAPES``
batch shapes are kept.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Executor
from statistics import median
from typing import Callable, Sequence

MEASURED = 3  # runs each way before the faster is chosen
RETRY = 50  # the slower way runs once every this many batches of a size
KEPT = 9  # the latest runs a median is taken over
SHAPES = 256  # batch shapes (rows and other dims) whose times are kept, the least recently run dropped first


def _rows_of(checked: tuple) -> int:
    """Rows of one checked request ((arrays, sizes) of Engine.check)."""
    return checked[1]["batch"]


class SplitChoice:
    """Runs a merged batch split in ``parts`` or whole, whichever its size ran faster (the module's docstring).
    ``chunks(group, rows_of, top)``: the batcher's cut at request boundaries into parts of at most ``top`` rows;
    ``parts_pool()``: the executor that runs every part but the first (the caller's thread runs that one)."""

    def __init__(self, chunks: Callable, parts_pool: Callable[[], Executor]):
        self._chunks = chunks
        self._parts_pool = parts_pool
        self._lock = threading.Lock()
        # batch shape (rows, other dims) -> {parts: the latest wall times}, least recently run first
        self._times: collections.OrderedDict = collections.OrderedDict()
        self._batches: collections.Counter = collections.Counter()  # batch shape -> batches chosen for
        self.runs: collections.Counter = collections.Counter()  # "split" / "whole" -> batches run so

    def choose(self, shape: tuple, parts: int) -> int:
        """How many parts a batch of ``shape`` (its rows, then its other dims) runs in: ``parts`` or 1 (whole)."""
        with self._lock:
            self._batches[shape] += 1
            ways = self._times.get(shape, {})
            split, whole = ways.get(parts), ways.get(1)
            if split is None or len(split) < MEASURED:
                return parts
            if whole is None or len(whole) < MEASURED:
                return 1
            best, other = (parts, 1) if median(split) <= median(whole) else (1, parts)
            return other if self._batches[shape] % RETRY == 0 else best

    def record(self, shape: tuple, parts: int, seconds: float) -> None:
        """A batch of ``shape`` ran in ``parts`` (1: whole) in ``seconds`` of wall time."""
        with self._lock:
            ways = self._times.get(shape)
            if ways is None:
                ways = self._times[shape] = {}
                if len(self._times) > SHAPES:
                    dropped, _ = self._times.popitem(last=False)
                    self._batches.pop(dropped, None)
            self._times.move_to_end(shape)
            self.runs["whole" if parts < 2 else "split"] += 1
            runs = ways.get(parts)
            if runs is None:  # the first run of the shape this way: left out
                ways[parts] = collections.deque(maxlen=KEPT)
            else:
                runs.append(seconds)

    def snapshot(self) -> dict:
        """For Model.stats(): merged batches run split and whole, and the batch shapes measured."""
        with self._lock:
            return {"split": self.runs["split"], "whole": self.runs["whole"], "shapes": len(self._times)}

    def times(self) -> dict:
        """(batch shape, parts) -> median wall seconds measured (parts 1: whole), for stats and tests."""
        with self._lock:
            return {(shape, p): median(r) for shape, ways in self._times.items() for p, r in ways.items() if r}

    def run(self, group: Sequence[tuple], parts: int, run: Callable[[Sequence[tuple], bool], list]) -> list:
        """``group`` (checked requests) run split in up to ``parts`` parts at request boundaries, in parallel, or
        whole, as ``choose`` says; ``run(part, spread)`` runs requests as one merged batch (``spread`` False: on one
        stream). The results in order."""
        rows = sum(_rows_of(c) for c in group)
        shape = (rows, *sorted((d, n) for d, n in group[0][1].items() if d != "batch"))
        k = self.choose(shape, parts)
        t0 = time.perf_counter()
        if k < 2:
            out = run(group, False)
        else:
            subs = self._chunks(group, _rows_of, -(-rows // k))
            futures = [self._parts_pool().submit(run, sub, False) for sub in subs[1:]]
            out = run(subs[0], False) + [o for f in futures for o in f.result()]
        self.record(shape, k, time.perf_counter() - t0)
        return out
