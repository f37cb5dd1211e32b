"""Requests the client cancelled (or disconnected from), asked before they run, are answered CANCELLED and not run.

Triton marks a request cancelled when its gRPC call is cancelled or its stream closed; ``request.is_cancelled()``
(Python backend >= 23.10) asks the server, one IPC round trip per call. Triton's dynamic and sequence batchers drop
requests cancelled while queued, but a request cancelled after the batcher handed it to the instance (the batch
waiting for the stub, or in execute while earlier requests are read, preprocessed or run) still reaches execute.
gert_triton asks such a request once, right before the batch it joined runs (after every request of the execute()
was read and preprocessed, and after the earlier groups ran). A cancelled member is taken out of its batch; the
others run as they would have.

When to ask is a trade measured per model (``AskPolicy``, config parameter ``check_cancelled``, default "auto"): an ask
costs the stub a round trip during which its streams idle (50-130 us measured under PP-OCR cls load through
bench_triton; asked from a thread pool instead they took longer, so they cannot be overlapped), and what it can save
is the run of a request that was cancelled in the short window since Triton's batcher last checked. "auto" asks a
batch while the asks cost at most ``ASK_SHARE`` (2 %) of its run, both measured here: every request of a model whose
run takes >= 50x an ask (det, rec, anything long) is asked as before; a model whose requests run in about an ask's
time (PP-OCR cls: ~0.5 ms per request against ~0.1 ms per ask; 3.8 % more requests/s unasked) is not, since
running a request cancelled in that window costs less than asking every request. Until both are measured, and once
every ``PROBE_S`` after, a batch is asked anyway. "true" always asks, "false" never does (every request runs).

What Triton 2.51 itself does not do (measured with 200 gRPC calls of 2 MB cancelled mid-flight plus 50 dropped HTTP
connections, four bursts; the notes of issue 37):
- an HTTP client that drops its connection does not cancel its request: a full request runs, a half-sent one is
  never parsed; only gRPC (and the C API) cancel;
- a request cancelled while its batch runs is not stopped (gert has no abort of a running request either);
- the Python backend's shared memory pool grows to the largest bytes in flight and never shrinks (RssShmem of
  tritonserver and the stub: 4 -> ~230 MB after the bursts);
- tritonserver's heap keeps what it freed (RssAnon 10 -> ~500 MB after the bursts, flat after the second);
  MALLOC_MMAP_THRESHOLD_=131072 in its environment kept it at ~100 MB, at a cost for MB-sized tensors (2 MB
  requests: 10-40 % fewer requests/s on the loaded 2-core machine, noisy).
The stub's own memory (gert's pools: the largest gear's device buffers and ONNX Runtime's arena) stays at the
level one full batch leaves (tests/test_triton_cancel_e2e.py).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from statistics import median
from typing import Callable, Optional, Sequence

MESSAGE = "the request was cancelled"


class Cancelled(Exception):
    """The result of a request that was cancelled before its batch ran (answered CANCELLED, never run)."""

    def __init__(self) -> None:
        super().__init__(MESSAGE)


def cancelled_response(pb_utils):
    """The response Triton counts as a cancelled request (failure reason CANCELED)."""
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(MESSAGE, pb_utils.TritonError.CANCELLED))


MODES = ("auto", "true", "false")
ASK_SHARE = 0.02  # "auto" asks a batch while its asks cost at most this share of its run
PROBE_S = 1.0  # "auto" not asking: a batch is asked anyway once this long after the last ask (fresh ask costs)
_KEPT = 16  # the decision takes the median of this many latest asks and runs (a slow first ask does not hold it)


@dataclass
class AskPolicy:
    """Whether an execute() asks its requests is_cancelled() (the module's docstring says why), from the model's
    measured ask and run times: one per TritonPythonModel, kept across execute() calls."""

    mode: str = "auto"
    ask_times: deque = field(default_factory=lambda: deque(maxlen=_KEPT))  # seconds of the latest is_cancelled()s
    run_times: deque = field(default_factory=lambda: deque(maxlen=_KEPT))  # seconds per request of the latest runs
    last_ask: float = float("-inf")  # monotonic time of the last ask
    asked: int = 0  # requests asked
    skipped: int = 0  # requests of batches run without asking them ("auto")

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"check_cancelled: expected one of {MODES}, got {self.mode!r}")

    def asks(self, now: float) -> bool:
        """Whether the batches of an execute() starting ``now`` are asked."""
        if self.mode != "auto":
            return self.mode == "true"
        if not self.ask_times or not self.run_times or now - self.last_ask >= PROBE_S:
            return True
        return median(self.ask_times) <= ASK_SHARE * median(self.run_times)

    def took_ask(self, seconds: float, now: float) -> None:
        """One ask took ``seconds``."""
        self.ask_times.append(seconds)
        self.last_ask = now
        self.asked += 1

    def took_run(self, seconds: float, requests: int, asked: bool) -> None:
        """A batch of ``requests`` ran in ``seconds`` (``asked``: its members were asked first)."""
        if requests <= 0:
            return
        self.run_times.append(seconds / requests)
        if not asked:
            self.skipped += requests


class Cancellation:
    """Asks the requests of one execute() whether they were cancelled. ``recheck_after_s``: a request asked less
    than this long ago is not asked again right before its batch runs (each ask is an IPC round trip; between the
    first ask and the run of a single group there is only the reading of the other requests). ``policy``: the
    model's AskPolicy, which decides whether this execute() asks at all (else ``enabled`` does) and learns the
    asks' and runs' times."""

    def __init__(
        self,
        requests: Sequence,
        recheck_after_s: float = 0.001,
        enabled: bool = True,
        policy: Optional[AskPolicy] = None,
    ):
        self.requests = requests
        self.recheck_after_s = recheck_after_s
        self._asked: dict = {}  # request index -> monotonic time of the last ask that said "not cancelled"
        self.policy = policy
        if policy is not None:
            enabled = policy.asks(time.monotonic())
        self.supported = enabled  # False: not asked (check_cancelled, or a stub without is_cancelled())

    def cancelled(self, i: int, recheck: bool = False) -> bool:
        """Whether request ``i`` was cancelled; with ``recheck``, asked again only if its last ask is old enough."""
        if not self.supported:
            return False
        now = time.monotonic()
        if recheck and now - self._asked.get(i, float("-inf")) < self.recheck_after_s:
            return False
        try:
            cancelled = self.requests[i].is_cancelled()
        except AttributeError:  # a stub (or fake) without cancellation
            self.supported = False
            return False
        except Exception:  # noqa: BLE001 - the stub could not ask the server: the request is served, not failed
            return False
        done = time.monotonic()
        if self.policy is not None:
            self.policy.took_ask(done - now, done)
        if cancelled:
            return True
        self._asked[i] = now
        return False

    def run_live(self, batch: list, run: Callable[[list], list], index_of: Callable[[object], Optional[int]]) -> list:
        """``run(batch)`` without the members cancelled since they were read (each one's result: ``Cancelled()``);
        ``index_of(member)`` is its request's index (None: not asked again)."""
        live = [
            k
            for k, member in enumerate(batch)
            if (i := index_of(member)) is None or not self.cancelled(i, recheck=True)
        ]
        if len(live) == len(batch):
            return self._timed(run, batch)
        out: list = [Cancelled() for _ in batch]
        if live:
            for k, result in zip(live, self._timed(run, [batch[k] for k in live])):
                out[k] = result
        return out

    def _timed(self, run: Callable[[list], list], batch: list) -> list:
        """``run(batch)``, its time per request told to the policy."""
        if self.policy is None:
            return run(batch)
        t0 = time.monotonic()
        out = run(batch)
        self.policy.took_run(time.monotonic() - t0, len(batch), self.supported)
        return out
