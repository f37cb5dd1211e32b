"""Does a small pinned staging ring per stream pay, now that pageable copies are synchronous (CANN 8.5)?

    python benchmarks/bench_staging.py [--requests 40] [--repeat 5] [--mib 4]

One stream, a static graph (y = relu(x) * 2 + 1 on a [rows, 1024] float32 tensor), ``--requests`` requests
enqueued back to back from numpy arrays, two ways, alternated in one process:

- pageable: H2D from the numpy input, the graph, D2H into the numpy output. CANN 8.5 synchronizes the stream
  before each pageable copy, so request i+1's upload waits for request i's compute;
- staged: a ring of 2 pinned (HostBuffer) slots. The host copies the input into a slot, enqueues H2D from it, the
  graph and D2H into the slot's output, and records an event; the output is copied out once the event completed.
  The host stages request i+1 while the stream computes request i.

Prints the median wall time of each and staged / pageable (below 1: the ring pays).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnx
import onnx.helper as oh

import gert
from gert import _cann


def model(rows: int) -> bytes:
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [rows, 1024])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [rows, 1024])
    two = onnx.numpy_helper.from_array(np.array(2, np.float32), "two")
    one = onnx.numpy_helper.from_array(np.array(1, np.float32), "one")
    g = oh.make_graph(
        [
            oh.make_node("Relu", ["x"], ["r"]),
            oh.make_node("Mul", ["r", "two"], ["m"]),
            oh.make_node("Add", ["m", "one"], ["y"]),
        ],
        "staging",
        [x],
        [y],
        [two, one],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def pageable(session, gid, stream, dev_in, dev_out, inputs, outputs) -> None:
    n = inputs[0].nbytes
    for x, y in zip(inputs, outputs):
        _cann.memcpy_async(dev_in.buffer.ptr, n, x.ctypes.data, n, _cann.MEMCPY_HOST_TO_DEVICE, stream.handle)
        session.execute_async(gid, stream, [dev_in], [dev_out])
        _cann.memcpy_async(y.ctypes.data, n, dev_out.buffer.ptr, n, _cann.MEMCPY_DEVICE_TO_HOST, stream.handle)
    stream.synchronize()


def staged(session, gid, stream, slots, inputs, outputs) -> None:
    n = inputs[0].nbytes
    pending = [None] * len(slots)  # per slot: the request whose output is still in flight

    def drain(k):
        if pending[k] is not None:
            slots[k]["ev"].synchronize()
            np.copyto(outputs[pending[k]], slots[k]["out"])
            pending[k] = None

    for i, x in enumerate(inputs):
        k = i % len(slots)
        s = slots[k]
        drain(k)
        np.copyto(s["in"], x)
        _cann.memcpy_async(
            s["dev_in"].buffer.ptr, n, s["in"].ctypes.data, n, _cann.MEMCPY_HOST_TO_DEVICE, stream.handle
        )
        session.execute_async(gid, stream, [s["dev_in"]], [s["dev_out"]])
        _cann.memcpy_async(
            s["out"].ctypes.data, n, s["dev_out"].buffer.ptr, n, _cann.MEMCPY_DEVICE_TO_HOST, stream.handle
        )
        s["ev"].record(stream)
        pending[k] = i
    for k in range(len(slots)):
        drain(k)
    stream.synchronize()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--mib", type=int, default=4, help="input (and output) size per request")
    args = p.parse_args()
    rows = args.mib * 256
    with gert.Device(0) as device, gert.Session() as session, gert.Stream(device) as stream:
        gid = 1
        session.add_graph(gid, gert.Graph.from_onnx(model(rows)))
        session.compile_graph(gid)
        session.load_graph(gid, stream)
        shape = (rows, 1024)
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(shape).astype(np.float32) for _ in range(args.requests)]
        want = [np.maximum(x, 0) * 2 + 1 for x in inputs]
        dev_in, dev_out = gert.DeviceTensor.empty(shape, np.float32), gert.DeviceTensor.empty(shape, np.float32)
        slots = [
            {
                "in": gert.HostBuffer(inputs[0].nbytes).numpy(np.float32, shape),
                "out": gert.HostBuffer(inputs[0].nbytes).numpy(np.float32, shape),
                "dev_in": gert.DeviceTensor.empty(shape, np.float32),
                "dev_out": gert.DeviceTensor.empty(shape, np.float32),
                "ev": gert.Event(device=device),
            }
            for _ in range(2)
        ]
        times = {"pageable": [], "staged": []}
        for _ in range(args.repeat + 1):  # the first round warms up (ORT bindings, page faults) and is dropped
            for name in ("pageable", "staged"):
                outputs = [np.empty(shape, np.float32) for _ in inputs]
                t0 = time.perf_counter()
                if name == "pageable":
                    pageable(session, gid, stream, dev_in, dev_out, inputs, outputs)
                else:
                    staged(session, gid, stream, slots, inputs, outputs)
                times[name].append(time.perf_counter() - t0)
                for y, w in zip(outputs, want):
                    np.testing.assert_allclose(y, w, rtol=1e-6)
        med = {k: statistics.median(v[1:]) for k, v in times.items()}
        print(f"backend={gert.backend()} requests={args.requests} x {args.mib} MiB, median of {args.repeat}")
        for k, v in med.items():
            print(f"  {k:9s} {v * 1e3:8.1f} ms  ({v / args.requests * 1e3:.2f} ms/request)")
        print(f"  staged / pageable = {med['staged'] / med['pageable']:.3f}")


if __name__ == "__main__":
    main()
