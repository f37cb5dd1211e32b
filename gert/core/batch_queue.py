"""The one batch queue of a model (dynamic batching, after Ray Serve's ``_BatchQueue``).

Concurrent callers whose requests may share a graph run wait for a stream with their batch key
(gert.core.batching.Batcher.key: dtypes, non-batch shapes, values of inputs without the batch axis; not their
timeouts). The caller that gets a stream leads: it gathers company for as long as the settings allow
(``gather_rule``), admits the members (sequence steps: those whose sequence it can lock), runs them as one batch,
retries a device fault member by member (``run_isolated``), and fans each member its result or error. Model requests
(gert.core.engine.Engine.run) and seq.run steps (gert/sequence.py, which pass their own run function) go through it
alike; the stream is taken from the model's StreamPool (gert/core/pool.py).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Optional, Sequence

from gert.core.batching import Batcher
from gert.core.dynamic import BatchingConfig, BatchingStats, Pending
from gert.core.dispatch import Fit
from gert.core.gear_pieces import company, first_batch, run_cheapest
from gert.core.executor import Request
from gert.core.pool import StreamPool
from gert.core.error_kinds import is_runtime_failure
from gert.core.resolve import key_label
from gert.core.shapes import DEFAULT_BATCH_GEARS, ShapePlan
from gert.errors import GertError

VERDICT_S = 0.1  # how long takes_company's answer for a size holds before the run times are looked at again
# a size whose requests run alone has its merged runs measured again this often: for VERDICT_S its queued requests take
# the batch queue and merge (run times not measured again go stale: the device's other load changes)
PROBE_S = 5.0

# run_members(members, run): one result per member (Pending), running Requests by ``run`` on the leader's stream
RunMembers = Callable[[list, Callable[[Request], dict]], list]
# admit(group): (the members to run, a callable that lets go of what admitting took)
Admit = Callable[[list], tuple]


class BatchQueue:
    """Gathers concurrent callers of one model, leads their batches, runs them once, fans the results back."""

    def __init__(
        self,
        pool: StreamPool,
        plan: ShapePlan,
        batcher: Batcher,
        config: Optional[BatchingConfig],
        resolve: Callable[[dict], tuple],
    ):
        self.pool = pool
        self.plan = plan
        self.batcher = batcher
        self.config = config
        self.resolve = resolve  # real sizes -> (run sizes, graph key): the model's resolve step (Engine.resolve)
        self.limit = batch_limit(plan, batcher, config)  # rows of one batch at most (0: off)
        # how many queued requests a batch of run_requests takes: first_batch under the pad policy on one stream,
        # where the requests left out join the next batch on it; with several streams, company only where merging
        # runs rows faster (gear_pieces.company): the next stream free runs the others. None: all.
        self._gears: tuple = plan.batch.gears if plan.batch is not None and plan.batch.policy == "pad" else ()
        self._several = pool.count > 1
        self.fit: Optional[Fit] = self.company if self._several else self.first_batch if self._gears else None
        self.stats = BatchingStats()
        self.run_times = pool.run_times  # per batch size, measured by the streams: latency_slo_ms, gear pieces
        self._verdicts: dict = {}  # rows -> (time.perf_counter() until which it holds, takes_company's answer)
        self._alone_since: dict = {}  # rows -> when its requests began running alone (or were last probed)
        self._probing: dict = {}  # rows -> time.perf_counter() until which its queued requests merge (PROBE_S)

    def submit(
        self,
        pending: Pending,
        run_members: RunMembers,
        admit: Optional[Admit] = None,
        record: bool = True,
        fit: Optional[Fit] = None,
    ) -> dict:
        """``pending``'s result: queued with its key, led by itself or by the request whose batch takes it.
        ``run_members(members, run)``: how a batch runs (one result per member); ``admit(group)``: which members of
        a batch run (sequences: each step's sequence locked, without waiting); ``record``: the batch counts in the
        dynamic batching stats (sequence steps count only their retries); ``fit``: how many of the queued requests
        a batch takes (BatchQueue.fit for run_requests)."""
        return self.pool.dispatch_batch(
            pending, lambda group, run: self._lead(group, run, run_members, admit, record), self.gather_rule, fit
        )

    def first_batch(self, rows: list) -> int:
        """How many of the queued requests with ``rows`` each (in arrival order) one batch takes under the pad
        policy (gear_pieces.first_batch, by the streams' measured run times): the others stay queued for the next
        batch."""
        return first_batch(rows, self._gears, self.run_times.cost)

    def company(self, rows: list) -> int:
        """How many of the queued requests with ``rows`` each one batch takes on a model with several streams
        (gear_pieces.company, by the streams' measured run times)."""
        return company(rows, self._gears, self.run_times.cost)

    def takes_company(self, rows: int) -> bool:
        """Whether a request of ``rows`` rows goes through the batch queue: always with one stream; with several,
        only while a queue full of such requests would take company (``company``, by the streams' measured run
        times, looked at again every VERDICT_S seconds). False: it runs alone on the next stream free (``run_alone``),
        as it would if the batch queue took it, without the queue's gather, merge and fan-out (on the host NPU, where a
        row costs the same in a batch as alone: PP-OCR cls from 16 threads 1.14x the requests/s through the queue).
        Once PROBE_S has passed with a size's requests running alone, they take the queue for VERDICT_S (``probing``):
        the merged sizes' run times, which running alone never measures again, are measured again."""
        if not self._several:
            return True
        now = time.perf_counter()
        verdict = self._verdicts.get(rows)
        if verdict is not None and now < verdict[0]:
            return verdict[1]
        takes = company([rows] * max(1, self.limit // rows), self._gears, self.run_times.cost) > 1
        if takes:
            self._alone_since.pop(rows, None)
        elif now - self._alone_since.setdefault(rows, now) >= PROBE_S:  # merged runs measured again
            self._alone_since[rows] = now
            self._probing[rows] = now + VERDICT_S
            takes = True
        self._verdicts[rows] = (now + VERDICT_S, takes)
        return takes

    def probing(self, rows: int) -> bool:
        """Whether requests of ``rows`` rows take the batch queue to measure merged runs again (PROBE_S): their
        batches then take every queued request (the run times that say no company may be stale)."""
        until = self._probing.get(rows)
        return until is not None and time.perf_counter() < until

    def alone(self, rows: int) -> bool:
        """Whether a request of ``rows`` rows runs alone, without the batch queue (not takes_company): the compiled
        hot path's question before it waits for a stream for such a request."""
        return not self.takes_company(rows)

    def run_queued(self, req: Request) -> dict:
        """``req`` (numpy inputs, fewer rows than the limit: a request dynamic batching may merge) through the batch
        queue where it may take company (takes_company), else alone (run_alone)."""
        rows = req.sizes["batch"]
        if not self.takes_company(rows):
            return self.run_alone(req)
        pending = Pending(req.arrays, req.sizes, rows, self.batcher.key(req.arrays), req.out, req.timeout, self.limit)
        return self.submit(pending, self.run_requests, fit=None if self.probing(rows) else self.fit)

    def run_alone(self, req: Request) -> dict:
        """``req`` (a request takes_company turned away) on the next stream free (StreamPool.dispatch), counted in the
        batching stats as a batch of one with its wait for the stream, as the batch queue would count it."""
        queued = time.perf_counter()
        started: list = []
        try:
            return self.pool.dispatch(req, lambda: started.append(time.perf_counter()))
        finally:
            if started:
                self.stats.record(1, key_label(req.key), [started[0] - queued])

    def run_requests(self, members: list, run: Callable[[Request], dict]) -> list:
        """The run function of Model requests (Engine.run): the Pending requests ``members`` (one batch key) merged
        (Batcher.merge), run by ``run`` with the smallest timeout among them, and split back: one result per member.
        Under the pad policy, as consecutive groups each padded to its own gear where the measured run times say
        that is cheaper than padding the whole batch (gert/core/gear_pieces.py)."""
        rows = [p.rows for p in members]
        return run_cheapest(members, rows, self.plan.batch, self.run_times, lambda part: self._run_merged(part, run))

    def _run_merged(self, members: Sequence, run: Callable[[Request], dict]) -> list:
        rows = [p.rows for p in members]
        first = members[0]
        alone = len(members) == 1
        arrays = first.arrays if alone else self.batcher.merge([p.arrays for p in members])
        sizes = dict(first.sizes, batch=sum(rows))
        run_sizes, key = self.resolve(sizes)
        out = run(
            Request(
                arrays,
                sizes,
                run_sizes,
                key,
                first.out if alone else None,
                first.timeout if alone else smallest_timeout(members),
            )
        )
        return [out] if alone else self.batcher.split(out, rows)

    def gather_rule(self, group: list) -> tuple:
        """(time.perf_counter() until which the leader of ``group`` may wait for company, enough(rows)), or
        (None, None) for no added delay: max_queue_delay_ms from the leader's arrival, latency_slo_ms minus the
        measured run time of the gear the batch would fill from the oldest member's arrival; the batch stops
        waiting once it reaches the largest preferred size (default: the largest batch)."""
        if group[0].wait_s > 0:  # sequence steps with sequence_wait_s: the window of their own
            return group[0].queued_at + group[0].wait_s, (lambda rows: rows >= group[0].limit)
        config = self.config
        if config is None or not (config.max_queue_delay_ms or config.latency_slo_ms):
            return None, None
        target = config.preferred_batch_size[-1] if config.preferred_batch_size else self.limit
        first = min(p.queued_at for p in group)
        until = []
        if config.max_queue_delay_ms:
            until.append(group[0].queued_at + config.max_queue_delay_ms / 1000.0)
        if config.latency_slo_ms:
            run = self.run_times.estimate(self.plan.batch.resolve(target, "dynamic batching"))
            until.append(first + config.latency_slo_ms / 1000.0 - run if run is not None else first)
        return min(until), (lambda rows: rows >= target)

    def _lead(
        self,
        group: list,
        on_stream: Callable[[Request], dict],
        run_members: RunMembers,
        admit: Optional[Admit],
        record: bool,
    ) -> Callable[[], None]:
        """Run the admitted members of ``group`` as one batch on the stream ``on_stream`` runs on; what delivers each
        its outputs or error (StreamPool.dispatch_batch calls it once the stream is given back). A device fault of a
        merged batch is retried member by member, so that only a member that fails alone fails."""
        started = time.perf_counter()
        ran: list = []  # the graph key of each run: the batch's (one per gear-sized group), then any retry's
        attempts = [0]  # run_members calls: the batch, then one per member when a device fault retries them

        def run(req: Request) -> dict:
            ran.append(req.key)
            return on_stream(req)

        def run_all(ms: list) -> list:
            attempts[0] += 1
            return run_members(ms, run)

        members, let_go = (group, None) if admit is None else admit(group)
        try:
            outs: list = []
            if members:
                try:
                    outs = run_isolated(members, run_all, None if record else self.stats.retried)
                except Exception as e:  # noqa: BLE001 - the batch's error (not a device fault): every member's
                    outs = [e] * len(members)
        except BaseException as e:  # noqa: BLE001 - nobody in the group is left waiting
            for p in group:
                if not p.done:
                    p.set_error(e)
            raise
        finally:
            if let_go is not None:  # sequences: their state is written; their next steps may run
                let_go()

        def deliver() -> None:
            for p, out in zip(members, outs):
                if isinstance(out, BaseException):
                    p.set_error(out)
                else:
                    p.set_result(out)
            if record and ran:  # it ran (a request whose sizes have no graph did not)
                self.stats.record(
                    len(group), key_label(ran[0]), [started - p.queued_at for p in group], attempts[0] > 1
                )

        return deliver


def batch_limit(plan: ShapePlan, batcher: Batcher, config: Optional[BatchingConfig]) -> int:
    """Rows one dynamic batch may have: up to the largest gear (pad) or max_batch; 0 when requests of this model
    never share a run: batching off, no batch axis, outputs that do not carry the batch (plan.unsplit),
    value-dependent outputs (their size would follow the whole batch), a batch of policy exact, or with gears that
    are not padded to (each merged size would need a graph of its own)."""
    batch = plan.batch
    if config is None or not batcher.enabled or plan.value_dependent or batch is None:
        return 0
    if batch.policy == "pad":
        top = batch.gears[-1]
        if config.max_batch is not None:
            top = min(top, config.max_batch)
    elif batch.policy in ("dynamic", "auto") and not batch.gears:
        # any size runs (the dynamic-shape graph; with auto, hot sizes get static graphs in the background)
        top = config.max_batch or DEFAULT_BATCH_GEARS[-1]
    else:
        return 0
    if config.preferred_batch_size and config.preferred_batch_size[-1] > top:
        raise GertError(
            f"dynamic_batching: preferred_batch_size {list(config.preferred_batch_size)} goes "
            f"beyond the largest batch this model runs ({top})"
        )
    return top if top > 1 else 0


def smallest_timeout(members: Iterable[Pending]) -> Optional[float]:
    """The device timeout a merged batch runs with: the smallest of its members' (None: none has one)."""
    timeouts = [p.timeout for p in members if p.timeout is not None]
    return min(timeouts) if timeouts else None


def run_isolated(members: list, run: Callable[[list], list], on_retry: Optional[Callable[[], None]] = None) -> list:
    """``run(members)``: one result per member, run as one batch. When a batch of several fails with a device
    fault, each member runs again alone (``run([member])``) so that only a member that fails alone fails: its
    result is then its error. Any other error of the batch is raised (it is every member's). The one fault
    isolation of merged batches: dynamic batches and seq.run steps (BatchQueue), run(list) and gert_triton
    (Engine.run_many), sequence steps (gert/sequence.py, whose failed step leaves every state as it was).
    ``on_retry``: called once when the members are retried (stats' retried_batches)."""
    try:
        return run(members)
    except Exception as e:  # noqa: BLE001 - raised unless a device fault of several members
        if len(members) < 2 or not _device_fault(e):
            raise
    if on_retry is not None:
        on_retry()
    outs: list = []
    for m in members:
        try:
            outs.append(run([m])[0])
        except Exception as e1:  # noqa: BLE001 - this member's own error
            outs.append(e1)
    return outs


def _device_fault(e: BaseException) -> bool:
    """A failure of the device or runtime while a merged batch ran (error_kinds.RUNTIME_FAILURES: a fault, out of
    memory, an aborted run; a timeout is not one): its requests are retried one by one, so that only a request that
    fails alone fails."""
    return is_runtime_failure(e)
