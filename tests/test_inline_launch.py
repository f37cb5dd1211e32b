"""The host NPU's inline launch (cbindings/hostnpu/ge_session.cpp, ExecuteGraphWithStreamAsync): a graph run launched
on an idle stream runs on the launching thread before the launch returns, instead of being handed to the stream's
worker thread (which would wait for the launching thread's GIL to call the compute provider). CANN's stream rules
hold either way: work already queued runs first, work queued by other threads meanwhile waits behind the run, a
task fault is reported by the next synchronize (once), and a hanging kernel leaves the launch free to return so that
a synchronize can time out."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gert
from _helpers import RUNTIME, acl_code
from gert.hostnpu.ort_provider import OrtExecutable
from models import next_graph_id, scale_model

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # the host NPU's counters, knob and provider

X = np.arange(8, dtype=np.float32).reshape(2, 4)


@pytest.fixture
def fresh(device):
    """A stream of its own and a Session with a static y = 3x graph loaded on it: (session, graph id, stream)."""
    stream = gert.Stream(device)
    stream.cube_cores = 1
    session = gert.Session()
    gid = next_graph_id()
    session.add_graph(gid, gert.Graph.from_onnx(scale_model(3.0, (2, 4))))
    session.compile_graph(gid)
    session.load_graph(gid, stream)
    was = gert.hostnpu.host_inline_launch()
    gert.hostnpu.host_inline_launch(True)
    try:
        yield session, gid, stream
    finally:
        gert.hostnpu.host_inline_launch(was)
        gert.clear_faults()
        stream.synchronize()
        session.close()
        stream.destroy()


def _tensors(stream):
    return [gert.DeviceTensor.from_numpy(X, stream)], [
        gert.DeviceTensor.from_numpy(np.zeros((2, 4), np.float32), stream)
    ]


def _read_on_another_stream(tensor, device) -> np.ndarray:
    """The tensor's device memory now, copied on a stream of its own (the tested stream's queue is not touched)."""
    other = gert.Stream(device)
    try:
        out = tensor.to_numpy(other)
        other.synchronize()
        return out
    finally:
        other.destroy()


@pytest.fixture
def run_threads(monkeypatch):
    """The thread idents the compute provider's Python run was called on (a fresh graph's first run is not a replay
    of a cached binding, so it goes through OrtExecutable.run)."""
    seen: list = []
    original = OrtExecutable.run

    def recording(self, *args, **kwargs):
        seen.append(threading.get_ident())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(OrtExecutable, "run", recording)
    return seen


def test_a_graph_launched_on_an_idle_stream_runs_on_the_launching_thread(fresh, run_threads, device):
    session, gid, stream = fresh
    ins, outs = _tensors(stream)
    stream.synchronize()  # the upload ran: the stream is idle
    gert.reset_host_counters()
    session.execute_async(gid, stream, ins, outs)
    assert run_threads == [threading.get_ident()]  # run here, by the launch itself
    assert gert.host_counters()["inline_tasks"] == 1
    np.testing.assert_array_equal(_read_on_another_stream(outs[0], device), X * 3)  # done before any synchronize
    stream.synchronize()
    np.testing.assert_array_equal(outs[0].to_numpy(stream), X * 3)


def test_with_inline_launches_off_the_stream_worker_runs_it(fresh, run_threads):
    session, gid, stream = fresh
    gert.hostnpu.host_inline_launch(False)
    ins, outs = _tensors(stream)
    stream.synchronize()
    gert.reset_host_counters()
    session.execute_async(gid, stream, ins, outs)
    stream.synchronize()
    assert len(run_threads) == 1 and run_threads[0] != threading.get_ident()
    assert gert.host_counters()["inline_tasks"] == 0
    np.testing.assert_array_equal(outs[0].to_numpy(stream), X * 3)


def test_a_launch_on_a_busy_stream_queues_behind_its_work(fresh, run_threads, device):
    session, gid, stream = fresh
    ins, outs = _tensors(stream)
    started, release = threading.Event(), threading.Event()
    order = []

    def hold():
        order.append("held")
        started.set()
        assert release.wait(30)

    stream.synchronize()  # the uploads ran
    stream.launch_host_func(hold)
    try:
        assert started.wait(30)  # the worker is inside hold(): the stream is busy
        gert.reset_host_counters()
        session.execute_async(gid, stream, ins, outs)  # queued behind hold(): not run here
        stream.launch_host_func(lambda: order.append("after the graph"))
        assert run_threads == []
        np.testing.assert_array_equal(_read_on_another_stream(outs[0], device), np.zeros((2, 4), np.float32))
    finally:
        release.set()
    stream.synchronize()
    assert order == ["held", "after the graph"]
    assert len(run_threads) == 1 and run_threads[0] != threading.get_ident()
    assert gert.host_counters()["inline_tasks"] == 0
    np.testing.assert_array_equal(outs[0].to_numpy(stream), X * 3)


def test_another_threads_work_waits_behind_an_inline_run(fresh, monkeypatch):
    session, gid, stream = fresh
    ins, outs = _tensors(stream)
    stream.synchronize()
    inside, go = threading.Event(), threading.Event()
    order = []
    original = OrtExecutable.run

    def blocking(self, *args, **kwargs):  # the inline run, held inside the provider until `go`
        inside.set()
        assert go.wait(30)
        order.append("graph")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(OrtExecutable, "run", blocking)
    launcher = threading.Thread(target=session.execute_async, args=(gid, stream, ins, outs), daemon=True)
    launcher.start()
    assert inside.wait(30)  # the launch is running the graph on `launcher`
    stream.launch_host_func(lambda: order.append("host function"))  # from this thread, meanwhile
    go.set()
    launcher.join(30)
    assert not launcher.is_alive()
    stream.synchronize()
    assert order == ["graph", "host function"]
    np.testing.assert_array_equal(outs[0].to_numpy(stream), X * 3)


def test_a_fault_of_an_inline_run_is_reported_once_by_the_next_synchronize(fresh):
    session, gid, stream = fresh
    ins, outs = _tensors(stream)
    stream.synchronize()
    gert.reset_host_counters()
    gert.inject_fault("execute")
    session.execute_async(gid, stream, ins, outs)  # the launch succeeds, as on a device: the kernel fails later
    assert gert.host_counters()["inline_tasks"] == 1
    with pytest.raises(gert.AclError) as err:
        stream.synchronize()
    assert err.value.code == acl_code("ACL_ERROR_RT_AICORE_EXCEPTION")
    stream.synchronize()  # reported once (CONTINUE mode): the stream works again
    session.execute_async(gid, stream, ins, outs)
    stream.synchronize()
    np.testing.assert_array_equal(outs[0].to_numpy(stream), X * 3)


def test_a_hanging_kernel_runs_on_the_worker_so_the_launch_returns_and_a_synchronize_times_out(fresh):
    session, gid, stream = fresh
    ins, outs = _tensors(stream)
    stream.synchronize()
    gert.inject_fault("hang", duration_ms=0)  # until aborted
    launched = threading.Event()

    def launch():
        session.execute_async(gid, stream, ins, outs)
        launched.set()

    t = threading.Thread(target=launch, daemon=True)
    t.start()
    assert launched.wait(30), "the launch of a hanging kernel did not return"
    with pytest.raises(gert.AclError) as err:
        stream.synchronize(timeout=0.05)
    assert err.value.code == acl_code("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT")
    stream.abort()
    stream.synchronize()
    session.execute_async(gid, stream, ins, outs)
    stream.synchronize()
    np.testing.assert_array_equal(outs[0].to_numpy(stream), X * 3)


def test_a_graph_whose_last_run_was_long_is_launched_on_the_worker_and_the_launch_returns_at_once(fresh, monkeypatch):
    """Only short runs go inline: once a graph's run took longer than a hand-off costs (the host NPU's kInlineMaxNs,
    100 us), its next launch returns while the run goes on on the stream's worker, as a launch on a device does (one
    thread launching on several streams gets them to overlap; a synchronize with a timeout can time out)."""
    session, gid, stream = fresh
    original = OrtExecutable.run
    go = threading.Event()
    calls: list = []

    def slow(self, *args, **kwargs):  # every run through the provider's Python (not a replay) is long
        calls.append(threading.get_ident())
        if len(calls) == 1:
            go.wait(0.01)  # the first: 10 ms, on the launching thread (its length was not known yet)
        else:
            assert go.wait(30)  # the second: until the test lets it go
        return original(self, *args, **kwargs)

    monkeypatch.setattr(OrtExecutable, "run", slow)
    ins, outs = _tensors(stream)
    stream.synchronize()
    gert.reset_host_counters()
    session.execute_async(gid, stream, ins, outs)
    assert calls == [threading.get_ident()] and gert.host_counters()["inline_tasks"] == 1
    stream.synchronize()
    ins2, outs2 = _tensors(stream)  # other tensors: a run through the provider's Python again, not a replay
    stream.synchronize()
    launched = threading.Event()
    launcher = threading.Thread(
        target=lambda: (session.execute_async(gid, stream, ins2, outs2), launched.set()), daemon=True
    )
    launcher.start()
    try:
        assert launched.wait(10), "the launch of a graph known to run long waited for its run"
        assert stream.query() is False  # the run goes on
    finally:
        go.set()
    launcher.join(30)
    stream.synchronize()
    assert len(calls) == 2 and calls[1] not in (threading.get_ident(), launcher.ident)  # the worker ran it
    assert gert.host_counters()["inline_tasks"] == 1
    np.testing.assert_array_equal(outs2[0].to_numpy(stream), X * 3)
