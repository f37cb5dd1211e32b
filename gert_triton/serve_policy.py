"""The limits and delays of `gert serve`'s supervision, and how an exit is told (gert_triton/supervisor.py)."""

from __future__ import annotations

import signal
import time
from collections import deque
from dataclasses import dataclass
from typing import Optional

# tritonserver's own --exit-timeout-secs default: Triton unloads a Python-backend stub in ~1.5 s, so a repository of a
# dozen models overruns 10 s and tritonserver exits 1 (issue 43)
DRAIN_TIMEOUT_S = 30


@dataclass
class Policy:
    """Limits and delays of the supervision (gert serve's options set the first ones)."""

    max_restarts: int = 5
    max_reloads: int = 5
    window_s: float = 600.0
    drain_delay_s: float = 0.0
    drain_timeout_s: int = DRAIN_TIMEOUT_S
    poll_s: float = 0.5
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    hung_s: float = 30.0
    fatal_grace_s: float = 5.0
    load_timeout_s: float = 600.0


class Attempts:
    """Attempts in a sliding window: the delay before the next one (0, then backoff doubling up to its cap), or
    None once ``limit`` attempts are in the window."""

    def __init__(self, policy: Policy, limit: int):
        self.policy, self.limit = policy, limit
        self.times: deque = deque()

    def next_delay(self) -> Optional[float]:
        now = time.monotonic()
        while self.times and now - self.times[0] > self.policy.window_s:
            self.times.popleft()
        if len(self.times) >= self.limit:
            return None
        n = len(self.times)
        self.times.append(now)
        return 0.0 if n == 0 else min(self.policy.backoff_s * 2 ** (n - 1), self.policy.backoff_max_s)


def exit_status(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
