"""HandOffLock: a lock whose holder runs, at release, what others handed over to it.

A stream (gert.core.executor.Worker) or a sequence (gert.sequence.Sequence) has one owner at a time: whoever holds its
lock. close() with a timeout must not free what a stuck request or step still uses, nor wait for it without bound:
it runs the release under the lock when it gets the lock in time, and otherwise hands the release to the holder,
which runs it when it lets go (``run_or_hand_over``). Either way the release runs exactly once, holding the lock.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional


class HandOffLock:
    """A non-reentrant lock (acquire / release / ``with``) with ``run_or_hand_over``.

    The release path costs one check of an empty list (it is on every request's path): an action handed over is
    appended, then its giver tries to take the lock; a releaser checks for actions after it let go and takes the
    lock to run them. Whichever comes second sees the other's step, so an action is never left behind, and it runs
    exactly once (taken from the list under ``_meta``), holding the lock."""

    __slots__ = ("_lock", "_meta", "_handed", "acquire", "locked")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meta = threading.Lock()  # guards taking actions off _handed
        self._handed: list = []
        self.acquire = self._lock.acquire
        self.locked = self._lock.locked

    def release(self) -> None:
        self._lock.release()
        if self._handed and self._lock.acquire(blocking=False):
            self._run_handed()

    def __enter__(self) -> "HandOffLock":
        self._lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()
        if self._handed and self._lock.acquire(blocking=False):
            self._run_handed()

    def _run_handed(self) -> None:
        """Run what was handed over, holding the lock (the caller took it), then release."""
        try:
            while True:
                with self._meta:  # emptied in place: parts_for_hot_path's list stays this lock's
                    actions = self._handed[:]
                    self._handed.clear()
                if not actions:
                    return
                for action in actions:
                    try:
                        action()
                    except Exception:  # noqa: BLE001 - a release's failure must not keep the lock held
                        pass
        finally:
            self._lock.release()
            if self._handed and self._lock.acquire(blocking=False):  # handed over while the last ones ran
                self._run_handed()

    def parts_for_hot_path(self) -> tuple:
        """(acquire, release, handed, run_handed): what the compiled hot path (gert/core/_hotpath.pyx) takes and
        releases this lock by without a Python call per request: ``release`` is the plain lock's, then, as release()
        does, when ``handed`` (the list of handed-over actions) is not empty and ``acquire(False)`` succeeds, call
        ``run_handed()``."""
        return self._lock.acquire, self._lock.release, self._handed, self._run_handed

    def run_or_hand_over(self, action: Callable[[], None], timeout: Optional[float]) -> bool:
        """Run ``action`` holding the lock if it comes free within ``timeout`` seconds (None: wait; True then); else
        hand it over (False): it runs, holding the lock, when the holder releases it."""
        if self._lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            try:
                action()
            finally:
                self.release()
            return True
        with self._meta:
            self._handed.append(action)
        if self._lock.acquire(blocking=False):  # released meanwhile, perhaps before the releaser could see it
            self._run_handed()
        return False
