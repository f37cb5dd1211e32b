"""gert.dispatch.StreamQueue: one queue in arrival order for all of a Model's streams, with direct hand-off; and a
Model that uses it: a request takes the first stream that comes free."""

from __future__ import annotations

import threading
import time

import pytest

import gert
from _helpers import RUNTIME
from gert.dispatch import StreamQueue
from gert.errors import GertError
from model_helpers import check_echo, echo_input, echo_model

WAIT = 10.0  # seconds: upper bound for a thread to get where the test expects (never reached when things work)


class _Stream:
    """A stand-in for a Worker: StreamQueue only compares and hands them out."""

    def __init__(self, name: str, device: int = 0):
        self.name, self.device = name, device

    def __repr__(self) -> str:
        return self.name


def _waiter(q: StreamQueue, eligible: list, got: list) -> threading.Thread:
    def take():
        try:
            got.append(q.acquire(eligible))
        except GertError as e:
            got.append(e)

    t = threading.Thread(target=take)
    t.start()
    return t


def _until(cond, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def test_free_streams_are_taken_in_turn():
    a, b = _Stream("a"), _Stream("b")
    q = StreamQueue([a, b])
    first, second = q.acquire([a, b]), q.acquire([a, b])
    assert {first, second} == {a, b} and q.idle() == 0 and set(q.busy()) == {a, b}
    q.release(first)
    q.release(second)
    assert q.idle() == 2 and q.acquire([a, b]) is not q.acquire([a, b])


def test_a_stream_that_comes_free_goes_to_the_longest_waiting_request():
    a, b = _Stream("a"), _Stream("b")
    q = StreamQueue([a, b])
    held = [q.acquire([a, b]), q.acquire([a, b])]
    got = [[] for _ in range(3)]
    threads = []
    for i in range(3):  # three requests queue up, one after the other
        threads.append(_waiter(q, [a, b], got[i]))
        _until(lambda i=i: q.waiting() == i + 1, f"request {i} did not queue")
    q.release(held[1])  # b comes free: the first waiter gets it, whoever asks next
    threads[0].join(WAIT)
    assert got[0] == [held[1]] and q.waiting() == 2 and q.idle() == 0, "no hand-off to the first in line"
    late = []
    _waiter(q, [a, b], late)  # a newcomer cannot barge ahead of requests 1 and 2
    _until(lambda: q.waiting() == 3, "the newcomer did not queue")
    assert late == []
    q.release(held[0])
    threads[1].join(WAIT)
    assert got[1] == [held[0]] and got[2] == []
    q.close()
    threads[2].join(WAIT)
    _until(lambda: len(late) == 1, "the newcomer was not woken by close()")
    assert isinstance(got[2][0], GertError) and isinstance(late[0], GertError)
    assert "closed before this request started" in str(got[2][0])


def test_a_waiter_gets_only_a_stream_it_may_use():
    """A request bound to device 1 is skipped for a device-0 stream that comes free; a later request that may use
    device 0 gets it."""
    a0, b1 = _Stream("a0", 0), _Stream("b1", 1)
    q = StreamQueue([a0, b1])
    held = [q.acquire([a0]), q.acquire([b1])]
    dev1, anyone = [], []
    t1 = _waiter(q, [b1], dev1)
    _until(lambda: q.waiting() == 1, "device-1 request did not queue")
    t2 = _waiter(q, [a0, b1], anyone)
    _until(lambda: q.waiting() == 2, "second request did not queue")
    q.release(held[0])  # a0: not for the device-1 request
    t2.join(WAIT)
    assert anyone == [a0] and dev1 == []
    q.release(held[1])
    t1.join(WAIT)
    assert dev1 == [b1]


def test_closed_queue_refuses_new_requests():
    q = StreamQueue([_Stream("a")])
    q.close()
    with pytest.raises(GertError, match="closed before this request started"):
        q.acquire(q.busy() + [q.slots.workers[0]])


@RUNTIME[0]
def test_a_short_request_does_not_wait_behind_a_long_one_while_another_stream_is_free():
    """Two streams; stream A runs a long request while another long request waits for a stream. When stream B
    finishes its short request, the waiting request takes B at once instead of waiting for A (a queue per stream,
    picked on arrival, would keep it behind A's long request)."""
    with gert.load(echo_model(), streams=2, gears={"batch": [1]}) as m:
        m.warmup()
        q = m.pool.queue
        a = q.acquire(m.pool.workers)  # stands for a long request on stream A: held until the test releases it
        try:
            x = echo_input(1, 1, 3)
            results = []
            ts = [
                threading.Thread(target=lambda i=i: results.append(m.run({"x": echo_input(i, 1, 3)})))
                for i in range(2, 6)
            ]
            for t in ts:
                t.start()
            for t in ts:
                t.join(WAIT)
            # all four ran on the other stream while A was held: none waited for A
            assert len(results) == 4 and q.busy() == [a]
            check_echo(m.run({"x": x}), x)
        finally:
            q.release(a)
        served = [s["requests"] for s in m.stats()["streams"]]
        assert served[a.index] == 0 and served[1 - a.index] == 5


def test_busy_on_counts_a_devices_streams_in_use():
    """What a launch's core share divides by (gert/core/_core_share.pyx): the streams of its device taken now."""
    a0, b0, a1 = _Stream("a0", 0), _Stream("b0", 0), _Stream("a1", 1)
    q = StreamQueue([a0, b0, a1])
    assert (q.busy_on(0), q.busy_on(1), q.busy_on(7)) == (0, 0, 0)
    got = q.acquire([a0, b0])
    assert (q.busy_on(0), q.busy_on(1)) == (1, 0)
    other = q.acquire([a1])
    assert (q.busy_on(0), q.busy_on(1)) == (1, 1)
    q.release(got)
    q.release(other)
    assert (q.busy_on(0), q.busy_on(1)) == (0, 0)
