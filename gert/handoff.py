"""HandOffLock: a lock whose holder runs, at release, what others handed over to it.

A stream (gert.executor.Worker) or a sequence (gert.sequence.Sequence) has one owner at a time: whoever holds its
lock. close() with a timeout must not free what a stuck request or step still uses, nor wait for it without bound:
it runs the release under the lock when it gets the lock in time, and otherwise hands the release to the holder,
which runs it when it lets go (``run_or_hand_over``). Either way the release runs exactly once, by the owner.
"""
from __future__ import annotations

import threading
from typing import Callable, Optional


class HandOffLock:
    """A non-reentrant lock (acquire / release / ``with``) with ``run_or_hand_over``."""

    __slots__ = ("_lock", "_meta", "_handed", "acquire", "locked")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meta = threading.Lock()   # guards _handed, and the holder's final release against a hand-over
        self._handed: list = []
        self.acquire = self._lock.acquire
        self.locked = self._lock.locked

    def release(self) -> None:
        """Run what was handed over (still holding the lock), then release."""
        while True:
            with self._meta:
                if not self._handed:
                    self._lock.release()
                    return
                actions, self._handed = self._handed, []
            for action in actions:
                try:
                    action()
                except Exception:  # noqa: BLE001 - a release's failure must not keep the lock held
                    pass

    def __enter__(self) -> "HandOffLock":
        self._lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def run_or_hand_over(self, action: Callable[[], None], timeout: Optional[float]) -> bool:
        """Run ``action`` holding the lock if it comes free within ``timeout`` seconds (None: wait); else hand it
        to the holder, which runs it at its release. True if it ran here."""
        if self._lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            try:
                action()
            finally:
                self.release()
            return True
        with self._meta:
            # the holder releases the lock only under _meta and with nothing handed over: if the lock is still held
            # here, the holder will see this action; if it came free meanwhile, take it and run the action here
            mine = self._lock.acquire(blocking=False)
            if not mine:
                self._handed.append(action)
        if mine:
            try:
                action()
            finally:
                self.release()
        return mine
