"""The graph-level calls against ONNX Runtime's IOBinding, in one process (issue 23: "graph call <= ORT IOBinding +
2 us").

    python benchmarks/bench_graph_call.py [--rounds 5] [--calls 5000] [--json out.json]

One-node Relu graph on [1, 64], one compute thread each side. Sides, timed in interleaved rounds (every side once
per round, so that noise from the other processes on the machine hits all alike):

- ``ort_iobinding``: ``InferenceSession.run_with_iobinding`` on inputs and outputs bound once (the target's base);
- ``ort_run``: ``InferenceSession.run()`` (numpy in, numpy out);
- ``execute_sync``: ``Session.execute_async`` on device tensors + ``Stream.synchronize`` (the host NPU's inline
  launch: the run goes ahead on the launching thread when the stream is idle);
- ``execute_sync_worker``: the same with the inline launch off (``gert.hostnpu.host_inline_launch(False)``): the
  stream's worker thread runs it, as before issue 23's third round;
- ``run_fused``: the executor's call, ``Session.run_fused`` with no copies;
- ``run_graph``: GE's RunGraph, ``Session.run_graph`` with numpy arrays in and out.

Reported: the median over the rounds of each side's mean time per call, and its excess over ``ort_iobinding``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gert
from _common import machine, ort_session, per_call, relu_model
from gert.dtypes import ge_dtype


def measure(rounds: int, calls: int) -> dict:
    model = relu_model()
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    sess = ort_session(model, 1)
    io = sess.io_binding()
    io.bind_cpu_input("x", x)
    want = np.empty((1, 64), np.float32)
    io.bind_output(sess.get_outputs()[0].name, "cpu", 0, want.dtype, list(want.shape), want.ctypes.data)
    inline_was = gert.hostnpu.host_inline_launch()
    with gert.Stream() as stream, gert.Session() as session:
        stream.cube_cores = 1
        session.add_graph(1, gert.Graph.from_onnx(model, {"input_shape": "x:1,64"}))
        session.compile_graph(1)
        session.load_graph(1, stream)
        inputs = [gert.DeviceTensor.from_numpy(x)]
        outputs = [gert.DeviceTensor.empty((1, 64), np.float32)]
        ins = [(t.ptr, t.nbytes, ge_dtype(t.dtype), t.shape) for t in inputs]
        outs = [(t.ptr, t.nbytes, ge_dtype(t.dtype), t.shape) for t in outputs]
        feeds, arrays = {"x": x}, [x]

        def execute_sync():
            session.execute_async(1, stream, inputs, outputs)
            stream.synchronize()

        def execute_sync_worker():
            gert.hostnpu.host_inline_launch(False)
            try:
                for _ in range(calls):
                    execute_sync()
            finally:
                gert.hostnpu.host_inline_launch(inline_was)

        sides = {
            "ort_iobinding": lambda: sess.run_with_iobinding(io),
            "ort_run": lambda: sess.run(None, feeds),
            "execute_sync": execute_sync,
            "execute_sync_worker": None,  # timed as a whole loop (the knob set once per round)
            "run_fused": lambda: session.run_fused(1, stream, [], [], ins, outs, []),
            "run_graph": lambda: session.run_graph(1, arrays),
        }
        times: dict = {name: [] for name in sides}
        for fn in sides.values():  # warm
            if fn is not None:
                per_call(fn, calls // 4)
        for _ in range(rounds):
            for name, fn in sides.items():
                if fn is None:
                    t = time.perf_counter()
                    execute_sync_worker()
                    times[name].append((time.perf_counter() - t) / calls)
                else:
                    times[name].append(per_call(fn, calls))
        sess.run_with_iobinding(io)
        execute_sync()
        np.testing.assert_array_equal(outputs[0].to_numpy(), want)
        np.testing.assert_array_equal(session.run_graph(1, arrays)[0], want)
    base = statistics.median(times["ort_iobinding"])
    return {
        name: {
            "us": statistics.median(t) * 1e6,
            "over_iobinding_us": (statistics.median(t) - base) * 1e6,
            "rounds_us": [v * 1e6 for v in t],
        }
        for name, t in times.items()
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)
    result = measure(args.rounds, args.calls)
    print(f"# {machine()}; median of {args.rounds} interleaved rounds of {args.calls} calls")
    print(f"{'side':<20} {'us':>7} {'over IOBinding us':>18}")
    for name, r in result.items():
        print(f"{name:<20} {r['us']:>7.2f} {r['over_iobinding_us']:>+18.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "rounds": args.rounds, "calls": args.calls, "sides": result}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
