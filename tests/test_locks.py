"""The compiled lock, hand-off lock and free streams (gert/core/_locks.pyx, gert/core/_free_streams.pyx; issue 39):
one implementation that the Python path and the compiled hot path both call. Their protocol under threads: a lock
as threading.Lock; an action handed over runs exactly once, holding the lock, whatever the holders do meanwhile; a
stream taken and given back by both paths at once is never in two hands, nor lost, nor free twice."""

from __future__ import annotations

import collections
import signal
import threading
import time

import pytest

from gert.core._locks import HandOffLock, Lock
from gert.dispatch import StreamQueue

WAIT = 30.0  # seconds: upper bound for a thread to finish (never reached when things work)


def _run(*targets) -> None:
    """Start a thread per target, join them all; a thread still alive after WAIT fails the test."""
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"


@pytest.mark.parametrize("make", [Lock, HandOffLock])
def test_the_lock_behaves_as_threading_lock(make):
    lock = make()
    assert not lock.locked() and lock.acquire() and lock.locked()
    assert not lock.acquire(False) and not lock.acquire(timeout=0) and not lock.acquire(timeout=0.01)
    lock.release()
    assert not lock.locked()
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()
    with pytest.raises(ValueError, match="non-blocking"):
        lock.acquire(False, timeout=1)
    for bad in (-2, float("nan")):
        with pytest.raises(ValueError, match="non-negative"):
            lock.acquire(timeout=bad)
    with lock as held:
        assert held is lock and lock.locked()
    assert not lock.locked()


def test_a_lock_waited_for_is_taken_once_its_holder_lets_go():
    lock, got = Lock(), []
    lock.acquire()
    waiter = threading.Thread(target=lambda: got.append(lock.acquire(timeout=WAIT)), daemon=True)
    waiter.start()
    lock.release()
    waiter.join(WAIT)
    assert got == [True] and lock.locked()


def test_a_condition_over_the_lock_waits_and_wakes():
    """StreamQueue's ``_arrived`` is a threading.Condition over the queue's Lock."""
    lock = Lock()
    cond = threading.Condition(lock)
    ready, seen = [], []

    def wait() -> None:
        with cond:
            seen.append(bool(cond.wait_for(lambda: ready, timeout=WAIT)))

    def notify() -> None:
        with cond:
            ready.append(1)
            cond.notify_all()

    _run(wait, notify)
    assert seen == [True] and not lock.locked()


class _Interrupted(Exception):
    pass


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread")
def test_a_signal_handler_runs_during_a_wait_for_the_lock_and_its_error_ends_the_wait():
    lock = Lock()
    lock.acquire()
    done = threading.Event()

    def handler(signum, frame):
        raise _Interrupted()

    def poke() -> None:
        while not done.wait(0.01):  # until the waiting thread is out of its wait
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    old = signal.signal(signal.SIGUSR1, handler)
    poker = threading.Thread(target=poke, daemon=True)
    try:
        poker.start()
        with pytest.raises(_Interrupted):
            lock.acquire(timeout=WAIT)
    finally:
        done.set()
        poker.join(WAIT)
        signal.signal(signal.SIGUSR1, old)
    assert lock.locked()  # still the first holder's
    lock.release()


def test_each_action_handed_over_runs_exactly_once_holding_the_lock_while_holders_come_and_go():
    """Holders take and release the lock over and over while givers hand actions over with no wait (timeout 0):
    each action runs once, while the lock is held and no holder is inside, and none is left behind."""
    lock = HandOffLock()
    inside = [0]  # threads inside the lock now: a holder's body or an action
    ran: collections.Counter = collections.Counter()
    wrong: list = []

    def enter(who: str) -> None:
        inside[0] += 1
        if inside[0] != 1 or not lock.locked():
            wrong.append((who, inside[0], lock.locked()))

    def hold(rounds: int) -> None:
        for _ in range(rounds):
            with lock:
                enter("holder")
                time.sleep(0)  # lets the other threads run while this one holds the lock: the givers hand over
                inside[0] -= 1

    def action(i: int):
        def run() -> None:
            enter(f"action {i}")
            ran[i] += 1
            inside[0] -= 1

        return run

    def give(first: int, n: int) -> None:
        for i in range(first, first + n):
            lock.run_or_hand_over(action(i), timeout=0)

    _run(*(lambda: hold(2000) for _ in range(3)), lambda: give(0, 600), lambda: give(600, 600))
    assert wrong == []
    assert sorted(ran) == list(range(1200)) and set(ran.values()) == {1}
    assert not lock.locked()


def test_a_handed_over_action_that_raises_does_not_lose_the_others():
    """An action's Exception is swallowed (a release's failure must not keep the lock held); an exception that
    escapes (KeyboardInterrupt, here a BaseException of the test's) reaches the releaser, and the actions handed over
    after it still run, once, holding the lock."""

    class Stop(BaseException):
        pass

    lock, ran = HandOffLock(), []

    def fail() -> None:
        ran.append("fail")
        raise ValueError("a release that fails")

    def stop() -> None:
        ran.append("stop")
        raise Stop()

    lock.acquire()
    for action in (fail, stop, lambda: ran.append(("after", lock.locked()))):
        assert not lock.run_or_hand_over(action, timeout=0)
    assert ran == []
    with pytest.raises(Stop):
        lock.release()
    assert ran == ["fail", "stop", ("after", True)] and not lock.locked()
    with lock:
        pass
    assert len(ran) == 3


class _Stream:
    """A stand-in for a Worker: the queue only compares and hands them out."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


def test_both_paths_taking_and_giving_back_at_once_keep_each_stream_in_one_place():
    """Threads take streams as the Python path does (acquire, some of them from one stream only, waiting) and as the
    hot path does (try_take, then give_back, or untake as on a miss), all at once: a stream is never in two hands,
    and at the end each one is free exactly once, no request waits."""
    streams = [_Stream(n) for n in "abc"]
    q = StreamQueue(streams)
    guard = threading.Lock()
    holder: dict = {}
    wrong: list = []
    taken = collections.Counter()

    def use(w, who: str) -> None:
        with guard:
            if w in holder:
                wrong.append((w, holder[w], who))
            holder[w] = who
            taken[who] += 1
        with guard:
            del holder[w]

    def python_path(eligible: list, rounds: int) -> None:
        for _ in range(rounds):
            w = q.acquire(eligible)
            try:
                use(w, "python")
            finally:
                q.release(w)

    def hot_path(rounds: int) -> None:
        # at least one take, however the threads are scheduled (a loaded machine can run all ``rounds`` tries while
        # the Python path holds the streams or the lock): then the rounds
        deadline, took, i = time.monotonic() + 30, 0, 0
        while i < rounds or (not took and time.monotonic() < deadline):
            i += 1
            w = q.slots.try_take()
            if w is None:
                continue
            took += 1
            use(w, "hot")
            (q.slots.untake if i % 7 == 0 else q.slots.give_back)(w)

    _run(
        lambda: python_path(streams, 3000),
        lambda: python_path(streams[:1], 3000),
        lambda: hot_path(6000),
        lambda: hot_path(6000),
    )
    assert wrong == []
    assert taken["python"] == 6000 and taken["hot"] > 0
    assert sorted(q.slots.free, key=streams.index) == streams and q.waiting() == 0 and q.idle() == 3


def test_the_hot_paths_take_finds_nothing_on_a_closed_queue():
    q = StreamQueue([_Stream("a")])
    w = q.slots.try_take()
    assert w is not None and q.slots.try_take() is None  # the one stream is taken
    q.slots.give_back(w)
    q.close()
    assert q.slots.try_take() is None and q.idle() == 1
