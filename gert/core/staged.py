"""A static graph's request run stage by stage while a trace is open (gert.trace(stages=True)), each stage timed by
the stream itself.

Untraced, a static graph's request is one fused call (Session.run_fused: uploads, run, downloads and the
synchronize without the GIL), which leaves nothing to stamp between the stages. Here the same work is queued as
separate calls with ACL timing events (ACL_EVENT_TIME_LINE) between them: aclrtEventElapsedTime gives each stage's
duration in stream order, as the device ran it, not as the host queued it. The span ends at the synchronize's return
(the last event completed then); a stage's start is placed back from there by the device's durations.

Only requests without a timeout run here: on the host NPU a static graph's ExecuteGraphWithStreamAsync waits for the
run, and a hung run is ended only by run_fused's own timed synchronize (an abort from the watchdog of
gert/core/recovery.py did not end it in this path); a request with a timeout keeps the fused call, one ``execute``.
"""
from __future__ import annotations

import time
from typing import Optional

from gert import _cann
from gert._cann import Event
from gert.core import hooks
from gert.core.tensor import DeviceTensor

STAGES = ("h2d", "execute", "d2h")


def timing_events(worker) -> Optional[list]:
    """The worker's four timing events (created once, on its device), or None where the runtime has none."""
    if worker.trace_events is None:
        try:
            worker.trace_events = [Event(timing=True, device=worker.device) for _ in range(len(STAGES) + 1)]
        except Exception:  # noqa: BLE001 - no timing events: the host's stamps are used instead
            worker.trace_events = []
    return worker.trace_events or None


def run_staged(worker, tr, track: tuple, entry, req, uploads: list, fills: list, inputs: list,
               downloads: list) -> None:
    """Queue ``req``'s uploads, run and downloads on ``worker``'s stream as separate calls with a timing event
    between each, synchronize, and record h2d / execute / d2h (device time) and synchronize (the host's wait)."""
    stream, handle, plan = worker.stream, worker.stream.handle, worker.plan
    events = timing_events(worker)
    host = [time.perf_counter()]  # the host's stamps: the fallback where the stream has no timing events
    if events:
        events[0].record(stream)
    for dptr, dmax, data in uploads:
        if data.nbytes:
            _cann.memcpy_async(dptr, dmax, data.ctypes.data, data.nbytes, _cann.MEMCPY_HOST_TO_DEVICE, handle)
    for dptr, dmax, n, value in fills:
        _cann.memset_async(dptr, dmax, value, n, handle)
    stream.keep_alive(uploads)
    if events:
        events[1].record(stream)
    host.append(time.perf_counter())
    outs = []
    for o, shape, (dtype, _, _) in zip(plan.outputs, entry.output_shapes, entry.out_meta):
        target = req.device_out.get(o.name) if req.device_out else None
        outs.append(DeviceTensor(target if target is not None else worker.out_bufs[o.name], shape, dtype))
    worker.session.execute_async(entry.graph_id, stream, [DeviceTensor(b, s, d) for b, s, d, _, _ in inputs], outs)
    if events:
        events[2].record(stream)
    host.append(time.perf_counter())
    for data, dptr in downloads:
        _cann.memcpy_async(data.ctypes.data, data.nbytes, dptr, data.nbytes, _cann.MEMCPY_DEVICE_TO_HOST, handle)
    if req.after:
        worker.enqueue(req.after)
    if events:
        events[3].record(stream)
    host.append(time.perf_counter())
    waited = host[-1]
    if req.timeout is None:  # the host NPU runs it on this thread (as Worker._run_dynamic)
        with hooks.current().inline(handle):
            stream.synchronize()
    else:
        stream.synchronize(req.timeout)
    done = time.perf_counter()
    host.append(done)
    spans = _device_spans(events, done, host[0]) if events else None
    clock = "device" if spans else "host"
    if spans is None:  # the host's view: when each stage was queued (the last one until the synchronize returned)
        spans = list(zip(host[:3], host[1:3] + [done]))
    for name, (start, end) in zip(STAGES, spans):
        tr.span(name, track, start, end, args={"clock": clock})
    tr.span("synchronize", tr.thread_track(), waited, done)


def _device_spans(events: list, done: float, earliest: float) -> Optional[list]:
    """[(start, end)] per stage in perf_counter time from the events' elapsed times, the last ending at ``done``."""
    try:
        ms = [events[i].elapsed_ms(events[i + 1]) for i in range(len(STAGES))]
    except Exception:  # noqa: BLE001 - not timed: the caller uses the host's stamps
        return None
    start = max(earliest, done - sum(ms) / 1000.0)
    spans = []
    for d in ms:
        spans.append((start, start + d / 1000.0))
        start += d / 1000.0
    return spans
