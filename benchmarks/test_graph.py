"""GE graph execution through gert vs ONNX Runtime's own IOBinding, in one process.

Cases (issue 3): a one-node Relu graph (1x64), and PP-OCR cls at 8x3x48x192 with 1 and 2 threads. gert:
``Session.execute_async`` on a stream with device-resident inputs and caller-allocated outputs, then
``Stream.synchronize`` (on an idle stream the host NPU runs the graph on the launching thread: its inline launch);
``gert_fused``: the executor's call, ``Session.run_fused`` with no copies (the graph runs on the calling thread,
stream inline); ``gert_run_graph`` (Relu only): GE's RunGraph, ``Session.run_graph`` with numpy arrays in and out.
Baseline: an ONNX Runtime session with the same intra-op thread count, inputs and outputs bound once,
``run_with_iobinding``. All give the same result, bitwise. Targets (issue 23): the graph call at most ONNX Runtime's
IOBinding + 2 us; cls ratio <= 1.03.
"""

from __future__ import annotations

import numpy as np
import pytest

import gert
from _common import CLS, ort_session, read_ppocr, relu_model, tag, warm
from gert.dtypes import ge_dtype

CASES = {
    "relu-1x64": (1, (1, 64)),
    "cls-8x3x48x192-t1": (1, (8, 3, 48, 192)),
    "cls-8x3x48x192-t2": (2, (8, 3, 48, 192)),
}


def _feeds(case: str) -> tuple:
    threads, shape = CASES[case]
    model = relu_model() if case.startswith("relu") else read_ppocr(CLS)
    return model, {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}, threads


def _ort(model: bytes, feeds: dict, threads: int, out_shapes: list, out_dtypes: list) -> tuple:
    sess = ort_session(model, threads)
    io = sess.io_binding()
    for k, v in feeds.items():
        io.bind_cpu_input(k, v)
    outs = [np.empty(s, d) for s, d in zip(out_shapes, out_dtypes)]
    for meta, arr in zip(sess.get_outputs(), outs):
        io.bind_output(meta.name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
    return sess, io, outs


# a group's runs back to back
@pytest.mark.parametrize("kind", ["ort_iobinding", "gert", "gert_fused", "gert_run_graph"])
@pytest.mark.parametrize("case", list(CASES))
def test_graph_call(benchmark, measuring, case, kind):
    if kind == "gert_run_graph" and not case.startswith("relu"):
        pytest.skip("RunGraph computes with the session's cores, not the stream's: compared on the one-node graph")
    model, feeds, threads = _feeds(case)
    tag(benchmark, f"graph call {case}", "baseline" if kind == "ort_iobinding" else "gert", threads=threads)
    input_shape = ";".join(f"{k}:{','.join(map(str, v.shape))}" for k, v in feeds.items())
    graph = gert.Graph.from_onnx(model, {"input_shape": input_shape})
    with gert.Stream() as stream:
        stream.cube_cores = threads
        session = gert.Session()
        try:
            session.add_graph(1, graph)
            session.compile_graph(1)
            summary = session.summary(1)
            sess, io, host_out = _ort(model, feeds, threads, summary.output_shapes, summary.output_dtypes)
            if kind == "ort_iobinding":
                warm(lambda: sess.run_with_iobinding(io), measuring)
                benchmark(sess.run_with_iobinding, io)
                return
            session.load_graph(1, stream)
            inputs = [gert.DeviceTensor.from_numpy(v) for v in feeds.values()]
            outputs = [gert.DeviceTensor.empty(s, d) for s, d in zip(summary.output_shapes, summary.output_dtypes)]

            def call():
                session.execute_async(1, stream, inputs, outputs)
                stream.synchronize()

            if kind == "gert_run_graph":
                arrays = list(feeds.values())

                def call():  # numpy in, numpy out (GE stages them on the device)
                    session.run_graph(1, arrays)

                warm(call, measuring)
                benchmark(call)
                sess.run_with_iobinding(io)
                for got, want in zip(session.run_graph(1, arrays), host_out):
                    np.testing.assert_array_equal(got, want)
                return
            if kind == "gert_fused":
                ins = [(t.ptr, t.nbytes, ge_dtype(t.dtype), t.shape) for t in inputs]
                outs = [(t.ptr, t.nbytes, ge_dtype(t.dtype), t.shape) for t in outputs]

                def call():  # the executor's call: inline on this thread, synchronized
                    session.run_fused(1, stream, [], [], ins, outs, [])

            warm(call, measuring)
            benchmark(call)
            sess.run_with_iobinding(io)
            for got, want in zip(outputs, host_out):
                np.testing.assert_array_equal(got.to_numpy(), want)  # same thread count: same result, bitwise
        finally:
            session.close()
