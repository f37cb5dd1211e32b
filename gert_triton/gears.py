"""Batch gears under Triton's dynamic batcher.

Triton merges queued requests into a batch of any size from 1 to max_batch_size (``preferred_batch_size`` is only a
preference: a batch is sent when the queue delay runs out, whatever its size). With the ``pad`` policy gert pads a
batch up to the next gear. With a policy that takes only the gears' sizes (``exact``, or ``dynamic`` / ``auto`` with
batch gears) a merged batch of another size would fail as a whole, so it is run as gear-sized pieces (3 rows with
gears 1,2,4,8: 2 + 1) and each request gets its own rows back, as it would with any Triton backend; the load refuses
gears that cannot make up every size up to max_batch_size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from gert.core.batching import join
from gert.errors import GertError
from gert_triton.config import ConfigError


@lru_cache(maxsize=256)
def gear_chunks(rows: int, gears: tuple) -> tuple:
    """The fewest gear sizes that add up to ``rows``, largest first; () when none do."""
    best: list = [()] + [None] * rows  # best[n]: the pieces for n rows
    for n in range(1, rows + 1):
        for g in gears:
            if g <= n and best[n - g] is not None and (best[n] is None or len(best[n - g]) + 1 < len(best[n])):
                best[n] = best[n - g] + (g,)
    return tuple(sorted(best[rows], reverse=True)) if best[rows] else ()


@dataclass(frozen=True)
class GearSplitter:
    """Runs a batch whose size is not one of ``gears`` as gear-sized pieces. No gears: nothing to split (the batch
    axis pads, or takes any size)."""

    gears: tuple = ()
    inputs: dict = field(default_factory=dict)  # input name -> the model axis of its batch (None: none)
    outputs: dict = field(default_factory=dict)  # output name -> the same

    @classmethod
    def for_plan(cls, plan) -> "GearSplitter":
        """The splitter for a gert.Model's shape plan: gears only when the batch dim's policy is not ``pad``."""
        batch = plan.batch
        if batch is None or batch.policy == "pad" or not batch.gears:
            return cls()
        return cls(
            tuple(sorted(batch.gears)),
            {t.name: plan.batch_axis(t.name) for t in plan.inputs},
            {t.name: plan.batch_axis(t.name, output=True) for t in plan.outputs},
        )

    def check(self, max_batch_size: int) -> None:
        """Refuse gears that cannot make up some batch size Triton may form (1 .. max_batch_size)."""
        if not self.gears:
            return
        missing = [n for n in range(1, max_batch_size + 1) if not gear_chunks(n, self.gears)]
        if missing:
            raise ConfigError(
                f"parameter 'gears': batch gears {list(self.gears)} under a non-pad batch policy cannot "
                f"make up batch sizes {missing}, which Triton's batcher forms (any size up to "
                f"max_batch_size {max_batch_size}); add gear 1, or use shape_policy batch:pad"
            )

    def run_batch(self, engine, batch: list) -> list:
        """``engine.run_checked(batch)`` (each request the (arrays, sizes) of ``Engine.check``), in gear-sized pieces
        when the batch's rows are not a gear (each piece a slice of validated requests: not checked again)."""
        if not self.gears:
            return engine.run_checked(batch)
        rows = [sizes["batch"] for _, sizes in batch]
        total = sum(rows)
        if total in self.gears or not total or 0 in rows:
            return engine.run_checked(batch)
        chunks = gear_chunks(total, self.gears)
        if not chunks:
            raise GertError(f"a batch of {total} rows cannot be split into the batch gears {list(self.gears)}")
        parts: list = [[] for _ in batch]  # per request: its outputs piece by piece
        req = off = 0
        for size in chunks:
            piece = []  # (request, first row, end row)
            while size:
                take = min(size, rows[req] - off)
                piece.append((req, off, off + take))
                size -= take
                off += take
                if off == rows[req]:
                    req, off = req + 1, 0
            results = engine.run_checked([self._slice(engine.batcher, batch[r], a, b) for r, a, b in piece])
            for (r, _, _), out in zip(piece, results):
                parts[r].append(out)
        return [p[0] if len(p) == 1 else self._join(p) for p in parts]

    @staticmethod
    def _slice(batcher, checked: tuple, start: int, stop: int) -> tuple:
        """Rows start:stop of a checked request: its batched inputs' (views: gert.core.batching.Batcher.piece), its
        sizes."""
        arrays, sizes = checked
        if start == 0 and stop == sizes["batch"]:
            return checked
        return batcher.piece(arrays, start, stop - start), dict(sizes, batch=stop - start)

    def _join(self, pieces: list) -> dict:
        """A request's outputs from its pieces, joined on each output's batch axis (gert.core.batching.join)."""
        return join(pieces, self.outputs)
