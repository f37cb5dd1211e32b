"""Requests the client cancelled (or disconnected from) are answered CANCELLED and never run.

Triton marks a request cancelled when its gRPC call is cancelled or its stream closed; ``request.is_cancelled()``
(Python backend >= 23.10) asks the server, one IPC round trip per call. Triton's dynamic and sequence batchers drop
requests cancelled while queued, but a request cancelled after the batcher handed it to the instance (the batch
waiting for the stub, or in execute while earlier requests are read, preprocessed or run) still reaches execute, so
gert_triton asks every request once, right before the batch it joined runs (after every request of the execute()
was read and preprocessed, and after the earlier groups ran): one IPC round trip per request, the least that
still keeps a cancelled request from running. A cancelled member is taken out of its batch; the others run as
they would have. Config parameter ``check_cancelled: "false"`` turns the asks off (every request runs).

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
from typing import Callable, Optional, Sequence

MESSAGE = "the request was cancelled"


class Cancelled(Exception):
    """The result of a request that was cancelled before its batch ran (answered CANCELLED, never run)."""

    def __init__(self) -> None:
        super().__init__(MESSAGE)


def cancelled_response(pb_utils):
    """The response Triton counts as a cancelled request (failure reason CANCELED)."""
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(MESSAGE, pb_utils.TritonError.CANCELLED))


class Cancellation:
    """Asks the requests of one execute() whether they were cancelled. ``recheck_after_s``: a request asked less
    than this long ago is not asked again right before its batch runs (each ask is an IPC round trip; between the
    first ask and the run of a single group there is only the reading of the other requests)."""

    def __init__(self, requests: Sequence, recheck_after_s: float = 0.001, enabled: bool = True):
        self.requests = requests
        self.recheck_after_s = recheck_after_s
        self._asked: dict = {}  # request index -> monotonic time of the last ask that said "not cancelled"
        self.supported = enabled  # False: not asked (check_cancelled "false", or a stub without is_cancelled())

    def cancelled(self, i: int, recheck: bool = False) -> bool:
        """Whether request ``i`` was cancelled; with ``recheck``, asked again only if its last ask is old enough."""
        if not self.supported:
            return False
        now = time.monotonic()
        if recheck and now - self._asked.get(i, float("-inf")) < self.recheck_after_s:
            return False
        try:
            if self.requests[i].is_cancelled():
                return True
        except AttributeError:  # a stub (or fake) without cancellation
            self.supported = False
            return False
        except Exception:  # noqa: BLE001 - the stub could not ask the server: the request is served, not failed
            return False
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
            return run(batch)
        out: list = [Cancelled() for _ in batch]
        if live:
            for k, result in zip(live, run([batch[k] for k in live])):
                out[k] = result
        return out
