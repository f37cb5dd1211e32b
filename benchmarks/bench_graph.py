"""GE graph execution through gert vs ONNX Runtime's own IOBinding, measured in one process.

    python benchmarks/bench_graph.py [--repeat N] [--json out.json]

Cases (issue 3): (a) a one-node Relu graph, (b) PP-OCR cls at 8x3x48x192 (needs
``pip install --no-deps rapidocr-onnxruntime==1.4.4``). gert: ``Session.execute_async`` on a stream with
device-resident inputs and caller-allocated outputs, then ``Stream.synchronize``. Baseline: an ONNX Runtime
session with the same intra-op thread count, inputs and outputs bound once, ``run_with_iobinding``.
Targets: (a) at most 10 us above ONNX Runtime; (b) ratio <= 1.03.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import interleaved, machine, ppocr_model  # noqa: E402

import gert  # noqa: E402


def relu_model() -> bytes:
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])
    m = oh.make_model(oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "relu", [x], [y]),
                      opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def case(name: str, model: bytes, feeds: dict, threads: int, repeat: int, inner: int) -> dict:
    input_shape = ";".join(f"{k}:{','.join(map(str, v.shape))}" for k, v in feeds.items())
    graph = gert.Graph.from_onnx(model, {"input_shape": input_shape})
    stream = gert.Stream()
    stream.cube_cores = threads
    session = gert.Session()
    session.add_graph(1, graph)
    session.compile_graph(1)
    summary = session.summary(1)
    session.load_graph(1, stream)
    inputs = [gert.DeviceTensor.from_numpy(v) for v in feeds.values()]
    outputs = [gert.DeviceTensor.empty(s, d) for s, d in zip(summary.output_shapes, summary.output_dtypes)]

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    io = sess.io_binding()
    for k, v in feeds.items():
        io.bind_cpu_input(k, v)
    host_out = [np.empty(s, d) for s, d in zip(summary.output_shapes, summary.output_dtypes)]
    for meta, arr in zip(sess.get_outputs(), host_out):
        io.bind_output(meta.name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)

    def run_gert():
        session.execute_async(1, stream, inputs, outputs)
        stream.synchronize()

    def run_ort():
        sess.run_with_iobinding(io)

    times = interleaved({"gert": run_gert, "ort": run_ort}, repeat, inner)
    got = [o.to_numpy() for o in outputs]
    run_ort()
    for a, b in zip(got, host_out):
        np.testing.assert_array_equal(a, b)  # same thread count: same result, bitwise
    session.close()
    stream.destroy()
    return {"case": name, "threads": threads, "gert_us": times["gert"], "ort_us": times["ort"],
            "overhead_us": times["gert"] - times["ort"], "ratio": times["gert"] / times["ort"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--json", help="write the rows as JSON to this file")
    args = ap.parse_args()
    rows = []
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    rows.append(case("one-node Relu 1x64", relu_model(), {"x": x}, 1, args.repeat, 2000))
    cls = ppocr_model("ch_ppocr_mobile_v2.0_cls_infer.onnx")
    if cls is None:
        print("PP-OCR cls skipped: pip install --no-deps rapidocr-onnxruntime==1.4.4", file=sys.stderr)
    else:
        with open(cls, "rb") as f:
            model = f.read()
        feeds = {"x": np.random.default_rng(1).standard_normal((8, 3, 48, 192)).astype(np.float32)}
        for threads in (1, 2):
            rows.append(case(f"PP-OCR cls 8x3x48x192", model, feeds, threads, args.repeat, 20))
    print(f"backend={gert.backend()} ({machine()})")
    print(f"{'case':<26} {'threads':>7} {'gert us':>10} {'ORT us':>10} {'gert-ORT us':>12} {'ratio':>6}")
    for r in rows:
        print(f"{r['case']:<26} {r['threads']:>7} {r['gert_us']:>10.1f} {r['ort_us']:>10.1f} "
              f"{r['overhead_us']:>12.1f} {r['ratio']:>6.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
