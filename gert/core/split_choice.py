"""Whether a merged batch runs split over the idle streams or whole on one, by the wall time each way took.

With split_batch, a batch of several requests can be spread over the idle streams at request boundaries, each part
run in parallel. Where the streams share the device's cores by load (gert/core/_core_share.pyx), a part gets its
share of the cores, and the whole batch on one stream gets them all: which is faster is the model's (on the host NPU:
two single-threaded ONNX Runtime runs of half the rows against one run with every intra-op thread; PP-OCR cls runs
faster split, det's 640x640 convolutions whole). So each (rows, other dims, parts) is measured both ways, split and
whole in turn (split first: the behaviour before), each ``MEASURED`` times after a first run left out (it allocates
buffers): in turn, so that load that comes or goes while measuring (a server's first requests, another process) hits
both ways alike, not only the way measured second. Then the faster is taken, and the other is run again once every
``RETRY`` batches of that size (a change in the device's other load is seen); once every ``RETRY_EARLY`` while it
is within ``CLOSE`` of the faster and has fewer than ``KEPT`` runs (a close verdict from a few runs is checked soon,
where a retry costs little; PP-OCR det's 4-image batch, 20 % slower split, is not retried early). Times are medians
of the last ``KEPT`` runs (one run the OS stalled moves nothing).
The other dims are part of the key (a 640x640 batch is not timed against a 320x320 one); the latest ``SHAPES``
batch shapes are kept.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from statistics import median
from typing import Callable, Mapping, Optional, Sequence, TypeVar

T = TypeVar("T")  # what a timed run returns

MEASURED = 3  # runs each way before the faster is chosen
RETRY = 50  # the slower way runs once every this many batches of a size
RETRY_EARLY = 8  # ... once every this many while it has fewer than KEPT runs and is within CLOSE of the faster
CLOSE = 1.10  # the slower way's median under this times the faster's: close
KEPT = 9  # the latest runs a median is taken over
SHAPES = 256  # batch shapes (rows and other dims) whose times are kept, the least recently run dropped first


def _rows_of(checked: tuple) -> int:
    """Rows of one checked request ((arrays, sizes) of Engine.check)."""
    return checked[1]["batch"]


def _measured(runs: Optional[collections.deque]) -> int:
    """Runs measured one way (-1: not run yet; 0: run once, that first run left out)."""
    return -1 if runs is None else len(runs)


@dataclass
class _Shape:
    """What is kept of one batch shape: its batches run, and per way (parts; 1: whole) its latest wall times."""

    batches: int = 0
    ways: dict = field(default_factory=dict)


class SplitChoice:
    """Runs a merged batch split in ``parts`` or whole, whichever its size ran faster (the module's docstring).
    ``chunks(group, rows_of, top)``: the batcher's cut at request boundaries into parts of at most ``top`` rows;
    ``parts_pool()``: the executor that runs every part but the first (the caller's thread runs that one)."""

    def __init__(self, chunks: Callable, parts_pool: Callable[[], Executor]):
        self._chunks = chunks
        self._parts_pool = parts_pool
        self._lock = threading.Lock()
        # batch shape (rows, other dims) -> its _Shape, least recently run first; a shape is kept once a batch of
        # it ran (a shape whose batches all fail leaves nothing)
        self._shapes: collections.OrderedDict = collections.OrderedDict()
        self.runs: collections.Counter = collections.Counter()  # "split" / "whole" -> batches run so

    def choose(self, shape: tuple, parts: int) -> int:
        """How many parts a batch of ``shape`` (its rows, then its other dims) runs in: ``parts`` or 1 (whole)."""
        with self._lock:
            kept = self._shapes.get(shape) or _Shape()
            ways = kept.ways
            split, whole = _measured(ways.get(parts)), _measured(ways.get(1))
            if split < MEASURED or whole < MEASURED:  # measuring, in turn: split, whole, split, ...
                return parts if split <= whole else 1
            best, other = (parts, 1) if median(ways[parts]) <= median(ways[1]) else (1, parts)
            close = median(ways[other]) < CLOSE * median(ways[best])  # a verdict a few runs could turn
            every = RETRY_EARLY if close and len(ways[other]) < KEPT else RETRY
            return other if (kept.batches + 1) % every == 0 else best

    def record(self, shape: tuple, parts: int, seconds: float) -> None:
        """A batch of ``shape`` ran in ``parts`` (1: whole) in ``seconds`` of wall time."""
        with self._lock:
            kept = self._shapes.get(shape)
            if kept is None:
                kept = self._shapes[shape] = _Shape()
                if len(self._shapes) > SHAPES:
                    self._shapes.popitem(last=False)
            self._shapes.move_to_end(shape)
            kept.batches += 1
            self.runs["whole" if parts < 2 else "split"] += 1
            runs = kept.ways.get(parts)
            if runs is None:  # the first run of the shape this way: left out
                kept.ways[parts] = collections.deque(maxlen=KEPT)
            else:
                runs.append(seconds)

    def snapshot(self) -> dict:
        """For Model.stats(): merged batches run split and whole, and the batch shapes measured."""
        with self._lock:
            return {"split": self.runs["split"], "whole": self.runs["whole"], "shapes": len(self._shapes)}

    def times(self) -> dict:
        """(batch shape, parts) -> median wall seconds measured (parts 1: whole), for stats and tests."""
        with self._lock:
            return {(shape, p): median(r) for shape, kept in self._shapes.items() for p, r in kept.ways.items() if r}

    def timed(self, shape: tuple, parts: int, run: Callable[[int], T]) -> T:
        """``run(k)`` with k = ``parts`` (split) or 1 (whole), as ``choose`` says for ``shape``; its wall time
        recorded."""
        k = self.choose(shape, parts)
        t0 = time.perf_counter()
        out = run(k)
        self.record(shape, k, time.perf_counter() - t0)
        return out

    def run(self, group: Sequence[tuple], parts: int, run: Callable[[Sequence[tuple], bool], list]) -> list:
        """``group`` (checked requests) run split in up to ``parts`` parts at request boundaries, in parallel, or
        whole, as ``choose`` says; ``run(part, spread)`` runs requests as one merged batch (``spread`` False: on one
        stream). The results in order."""
        rows = sum(_rows_of(c) for c in group)

        def split_in(k: int) -> list:
            if k < 2:
                return run(group, False)
            subs = self._chunks(group, _rows_of, -(-rows // k))
            futures = [self._parts_pool().submit(run, sub, False) for sub in subs[1:]]
            return run(subs[0], False) + [o for f in futures for o in f.result()]

        return self.timed(batch_shape(dict(group[0][1], batch=rows)), parts, split_in)


def batch_shape(sizes: Mapping[str, int]) -> tuple:
    """The key a batch's times are kept under: its rows, then its other dims' sizes."""
    return (sizes["batch"], *sorted((d, n) for d, n in sizes.items() if d != "batch"))


def even_rows(total: int, parts: int) -> list:
    """(start, rows) of ``total`` rows cut into ``parts`` parts as even as can be (the first ones a row more)."""
    counts = [total // parts + (1 if i < total % parts else 0) for i in range(parts)]
    return [(sum(counts[:i]), counts[i]) for i in range(parts)]
