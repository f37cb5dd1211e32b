"""gert runtime in a few lines: pinned host memory, a stream, async copies, an event, a host function.

    python examples/runtime_quickstart.py
Runs on the host NPU when no Ascend toolkit is present.
"""

import numpy as np

import gert

print(f"backend: {gert.backend()}, devices: {gert.device_count()}")

with gert.Device(0) as dev, gert.Stream(dev) as stream:
    x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)

    staging = gert.HostBuffer(x.nbytes)  # pinned host memory
    staging.numpy(x.dtype, x.shape)[:] = x  # a numpy view of it, no copy
    device = gert.DeviceBuffer(x.nbytes, dev)  # device memory

    start, end = gert.Event(timing=True), gert.Event(timing=True)
    start.record(stream)
    device.copy_from(staging, stream)  # H2D, queued
    out = np.empty_like(x)
    device.copy_to(out, stream)  # D2H, queued after it
    end.record(stream)
    stream.launch_host_func(lambda: print("host function: copies done"))
    stream.synchronize()

    assert np.array_equal(out, x)
    print(f"round trip of {x.nbytes} bytes: {start.elapsed_ms(end):.3f} ms on the stream")
    print(f"device memory: {gert.memory_info(dev)}")
    if gert.backend() == "hostnpu":
        c = gert.host_counters()
        print(f"host NPU copied {c['bytes_h2d']} bytes H2D and {c['bytes_d2h']} bytes D2H")
