"""Which gear-sized runs a merged batch takes under the ``pad`` policy: padded up to one gear, or cut into consecutive
groups of its requests, each padded to its own gear, whichever the measured run times say is cheaper.

Why: a batch of 10 rows with gears 1, 2, 4, 8, 16 padded to 16 computes 6 rows nobody sent (PP-OCR cls from 16
threads on two streams formed batches of 6 and 10: 24 rows computed for 16). Run as 8 + 2 it computes 10, at the
price of one more launch. Which is cheaper depends on the model and the device (on a CPU a row costs about the same
at any batch; an NPU runs a larger batch at little extra cost), so it is decided from the run times the model's
streams measure per batch size (StreamPool.run_times, gert.core.dynamic.RunTimes) and changes as they do. Requests are never cut: each group is whole
requests, in their order, so a request's rows run together as they were sent.

Queued requests (dynamic batching) are not cut after they were taken: the batch takes only as many as run well in one
graph run (``first_batch``), and the others lead or join the next batch, where they cost no launch of their own.
"""

from __future__ import annotations

from typing import Callable, Iterator, List, Optional, Sequence, Tuple

from gert.core.dynamic import RunTimes


MARGIN = 0.15  # a cut must save this share of the whole batch's run time: measured times carry noise


def gear_for(rows: int, gears: Sequence[int]) -> Optional[int]:
    """The smallest gear that holds ``rows`` (None: none does)."""
    for g in gears:
        if g >= rows:
            return g
    return None


def cheapest_pieces(rows: Sequence[int], gears: Sequence[int], cost: Callable[[int], Optional[float]]) -> List[int]:
    """The end indices of the consecutive groups of requests (``rows``: each request's rows) whose runs, each padded
    to its gear (``gears``, ascending), cost least by ``cost(gear)`` (seconds of one run at that gear; None: not
    known). One group (``[len(rows)]``, the whole batch padded) unless every cost a cheaper cut needs is known and
    the cut saves at least MARGIN of the whole batch's cost; at once (it is on every merged batch's path) where the
    batch fills its gear (nothing padded) or where no two runs can cost less than that."""
    n = len(rows)
    whole = [n]
    if n < 2:
        return whole
    total = sum(rows)
    top = gear_for(total, gears)
    whole_cost = None if top is None or top == total else cost(top)
    if whole_cost is None:
        return whole
    costs = {g: cost(g) for g in gears}
    known = [c for c in costs.values() if c is not None]
    if 2 * min(known) >= whole_cost * (1 - MARGIN):  # a cut is two runs at least
        return whole
    # best[j]: (the least cost of running requests 0 .. j-1, in how few runs); ties go to fewer runs
    best: List[Optional[tuple]] = [(0.0, 0)] + [None] * n
    cut: List[int] = [0] * (n + 1)
    for j in range(1, n + 1):
        total = 0
        for i in range(j - 1, -1, -1):
            total += rows[i]
            g = gear_for(total, gears)
            if g is None:
                break
            c, before = costs[g], best[i]
            if c is None or before is None:
                continue
            option = (before[0] + c, before[1] + 1)
            current = best[j]
            if current is None or option < current:
                best[j], cut[j] = option, i
    done = best[n]
    if done is None or done[0] >= whole_cost * (1 - MARGIN):
        return whole
    ends, j = [], n
    while j > 0:
        ends.append(j)
        j = cut[j]
    return ends[::-1]


def first_batch(rows: Sequence[int], gears: Sequence[int], cost: Callable[[int], Optional[float]]) -> int:
    """How many of the queued requests with ``rows`` each (in arrival order) one batch takes, when those left out
    join the next batch: the most requests whose run, padded to its gear, computes real rows at a rate (rows per
    second by ``cost(gear)``) within MARGIN of the best prefix's. All of them at once where they fill their gear, or
    where a cost it needs is not known. PP-OCR cls from 16 threads on one stream: batches of 12 and 4 alternated
    (12 padded to 16), or 9 and 7 (each 9 cut into 8 + 1); taking 8 of 12 turns that into batches of 8."""
    n = len(rows)
    total = sum(rows)
    top = gear_for(total, gears)
    if n < 2 or top is None or top == total:
        return n
    rates: List[tuple] = []  # (rows per second, requests)
    for k, rate in prefix_rates(rows, gears, cost):
        if rate is None:
            if k == n:
                return n
            continue
        rates.append((rate, k))
    best = max(r for r, _ in rates)
    return max(k for r, k in rates if r >= best * (1 - MARGIN))


def prefix_rates(
    rows: Sequence[int], gears: Sequence[int], cost: Callable[[int], Optional[float]]
) -> Iterator[Tuple[int, Optional[float]]]:
    """(k, real rows per second of one run of the first k requests) for each k whose rows fit a gear (``gears``
    empty: a run of exactly its rows), by ``cost`` of the run's size; None where that cost is not known."""
    done = 0
    for k in range(1, len(rows) + 1):
        done += rows[k - 1]
        size = gear_for(done, gears) if gears else done
        if size is None:
            return
        c = cost(size)
        yield k, None if c is None else done / c if c > 0 else float("inf")


def run_cheapest(
    members: Sequence, rows: Sequence[int], batch, times: RunTimes, run: Callable[[Sequence], list]
) -> list:
    """``run(group)`` (one result per member) for each group of ``members`` that cheapest_pieces cuts by ``times``
    (the streams' measured run times, gert.core.pool.StreamPool.run_times), in order: all their results. Only under
    the ``pad`` policy of ``batch`` (the plan's batch Dim; None: no batch or no merging): else ``run(members)``."""
    if not batch or batch.policy != "pad" or len(members) < 2:
        return run(members)
    ends = cheapest_pieces(rows, batch.gears, times.cost)
    outs: list = []
    for start, end in zip([0, *ends], ends):
        outs += run(members[start:end])
    return outs


def company(rows: Sequence[int], gears: Sequence[int], cost: Callable[[int], Optional[float]]) -> int:
    """With several streams, how many of the queued requests with ``rows`` each (in arrival order, the leader's first)
    one batch takes: company only where the measured run times say merged rows run faster than the leader's alone
    (rows per second by ``cost`` of the run's size: its gear under the pad policy, ``gears`` empty: its rows) by more
    than MARGIN, and then the most requests within MARGIN of the best rate; the others run on the next stream free.
    An NPU runs a batch of 8 at little more than one row's time; on a CPU (the host NPU) a row costs the same at any
    batch, and merging only adds the gather, the merge and the fan-out (PP-OCR cls from 16 threads on 4 streams:
    0.86x run(list of 16) merging everything queued, 1.17x running each request alone). A cost not measured yet: all
    of them (their merged run measures it)."""
    n = len(rows)
    if n < 2:
        return n
    rates: List[tuple] = []  # (rows per second, requests); past the largest gear the batch stops before
    for k, rate in prefix_rates(rows, gears, cost):
        if rate is None:
            return n
        rates.append((rate, k))
    best = max(r for r, _ in rates)
    if best <= rates[0][0] * (1 + MARGIN):
        return 1
    return max(k for r, k in rates if r >= best * (1 - MARGIN))
