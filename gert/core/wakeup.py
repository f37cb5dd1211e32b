"""A one-shot wake-up for a thread that sleeps until another thread hands it something (a stream, a result).

A bare lock, taken when made: ``wakeup.acquire()`` sleeps (the GIL released) until another thread's
``wakeup.release()``; the wake is consumed, so the next ``acquire()`` sleeps again. It is what ``threading.Event``
does underneath, without the Condition, the waiter list and the extra lock each ``wait()`` allocates: a woken request
thread costs one lock hand-off, which matters when 16 threads share one batch (issue 40: the leader wakes each
member once, with its result).
"""

from __future__ import annotations

from _thread import LockType, allocate_lock


def new_wakeup() -> LockType:
    """A wake-up not yet given: ``acquire()`` sleeps until someone calls ``release()``."""
    lock = allocate_lock()
    lock.acquire()
    return lock
