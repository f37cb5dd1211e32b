"""Background calls with futures that close() can cancel and wake (Model.submit / run_async)."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Callable

from gert.errors import ModelClosed


class FutureRunner:
    """Runs calls on a thread pool, each through a Future of its own (not the pool's), so that close() can cancel
    the queued ones AND notify their waiters: a future cancelled by ThreadPoolExecutor.shutdown(cancel_futures=True)
    is never notified, and concurrent.futures.wait / as_completed on it would block forever."""

    def __init__(self, max_workers: int, thread_name_prefix: str):
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix=thread_name_prefix
        )
        self._lock = threading.Lock()
        self._queued: set = set()  # futures no pool thread has started
        self._closed = False

    def submit(self, fn: Callable, *args, **kwargs) -> concurrent.futures.Future:
        """``fn(*args, **kwargs)`` on a pool thread; the Future resolves to its result or its exception."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise ModelClosed()
            self._queued.add(fut)
            try:
                self._pool.submit(self._run, fut, fn, args, kwargs)
            except RuntimeError:  # the pool is shut down: closing
                self._queued.discard(fut)
                raise ModelClosed() from None
        return fut

    def _run(self, fut: concurrent.futures.Future, fn: Callable, args: tuple, kwargs: dict) -> None:
        with self._lock:
            if fut not in self._queued:
                return  # close() cancelled it
            self._queued.discard(fut)
        if not fut.set_running_or_notify_cancel():
            return  # the caller cancelled it
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - delivered to the caller through the future
            fut.set_exception(e)
        else:
            fut.set_result(result)

    def close(self) -> None:
        """Cancel the calls not started (their waiters wake); running ones complete."""
        with self._lock:
            self._closed = True
            queued, self._queued = list(self._queued), set()
        for fut in queued:
            if fut.cancel():
                fut.set_running_or_notify_cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
