"""A static graph's request run stage by stage while a trace is open (gert.trace(stages=True)), each stage timed by
the stream itself.

Untraced, a static graph's request is one fused call (Session.run_fused: uploads, run, downloads and the
synchronize without the GIL), which leaves nothing to stamp between the stages. Here the same work is queued as
separate calls with ACL timing events (ACL_EVENT_TIME_LINE) between them: aclrtEventElapsedTime gives each stage's
duration in stream order, as the device ran it, not as the host queued it. The span ends at the synchronize's return
(the last event completed then); a stage's start is placed back from there by the device's durations.

A request with a timeout runs here too, its waits bounded by it as the fused call's are: the calls that can wait for
the device without a timeout of their own (a D2H copy into pageable host memory synchronizes the stream first, as
CANN 8.5's aclrtMemcpyAsync does; a GE run that sizes its outputs) run under the watchdog of gert/core/recovery.py,
whose abort (aclrtStreamAbort) past the timeout ends them, and the final synchronize waits only for what is left of
the timeout. Either way the request raises ACL_ERROR_RT_STREAM_SYNC_TIMEOUT (Recovery.run: RequestTimeout, the stream
aborted and reused).
"""

from __future__ import annotations

import time
from typing import Optional

from gert import _cann
from gert._cann import Event
from gert.core import hooks
from gert.core.recovery import watchdog
from gert.core.tensor import DeviceTensor
from gert.core.transfers import Transfers

STAGES = ("h2d", "execute", "d2h")


def timing_events(worker) -> Optional[list]:
    """The worker's four timing events (created once, on its device), or None where the runtime has none."""
    if worker.trace_events is None:
        try:
            worker.trace_events = [Event(timing=True, device=worker.device) for _ in range(len(STAGES) + 1)]
        except Exception:  # noqa: BLE001 - no timing events: the host's stamps are used instead
            worker.trace_events = []
    return worker.trace_events or None


def run_staged(worker, tr, track: tuple, entry, req, uploads: list, fills: list, inputs: list, downloads: list) -> None:
    """Queue ``req``'s uploads, run and downloads on ``worker``'s stream as separate calls with a timing event
    between each, synchronize, and record h2d / execute / d2h (device time) and synchronize (the host's wait).
    With ``req.timeout``, every wait ends by then (see the module's docstring): AclError 507046 past it."""
    events = timing_events(worker)
    host = [time.perf_counter()]  # the host's stamps: the fallback where the stream has no timing events
    deadline = None if req.timeout is None else host[0] + req.timeout
    with watchdog(worker.stream, req.timeout):  # past the timeout: the stream aborted, whatever call waits ends
        _queue(worker, entry, req, uploads, fills, inputs, downloads, events, host)
        waited = host[-1]
        _synchronize(worker.stream, deadline)
    done = time.perf_counter()
    host.append(done)
    spans = _device_spans(events, done, host[0]) if events else None
    clock = "device" if spans else "host"
    if spans is None:  # the host's view: when each stage was queued (the last one until the synchronize returned)
        spans = list(zip(host[:3], host[1:3] + [done]))
    for name, (start, end) in zip(STAGES, spans):
        tr.span(name, track, start, end, args={"clock": clock})
    tr.span("synchronize", tr.thread_track(), waited, done)


def _queue(
    worker, entry, req, uploads: list, fills: list, inputs: list, downloads: list, events: Optional[list], host: list
) -> None:
    """The request's calls on the stream, a timing event before and after each stage; ``host`` gets the host's
    stamp after each stage was queued."""
    stream, handle, plan = worker.stream, worker.stream.handle, worker.plan
    if events:
        events[0].record(stream)
    _cann.memcpy_uploads_async(uploads, handle)
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
    for data, dptr in downloads:  # into pageable memory: each copy waits for the run first (CANN 8.5)
        _cann.memcpy_async(data.ctypes.data, data.nbytes, dptr, data.nbytes, _cann.MEMCPY_DEVICE_TO_HOST, handle)
    if req.after:
        Transfers.enqueue(handle, req.after)
    if events:
        events[3].record(stream)
    host.append(time.perf_counter())


def _synchronize(stream, deadline: Optional[float]) -> None:
    """Wait for the stream: no limit without a deadline (the host NPU runs the work on this thread, as
    Worker._run_dynamic), else only until the deadline (at least 1 ms: a timed synchronize of 0 is refused)."""
    if deadline is None:
        with hooks.current().inline(stream.handle):
            stream.synchronize()
    else:
        stream.synchronize(max(0.001, deadline - time.perf_counter()))


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
