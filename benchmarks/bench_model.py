"""gert.Model vs ONNX Runtime, measured in one process (issue 4).

    python benchmarks/bench_model.py [--quick] [--seconds S] [--json out.json]

(a) Throughput, PP-OCR det 1x3x640x640 and cls 8x3x48x192, for streams 1, 2, 4 x cube cores 1, 2.
    gert: ``gert.load(model, streams=S, cube_cores=C)``, S Python threads calling ``Model.run`` in a loop (one
    request in flight per stream). Baseline, same total threads (S x C): S Python threads, each with its OWN
    ONNX Runtime InferenceSession of intra_op_num_threads=C, calling ``run()`` in a loop -- the structure a
    multi-session ORT server would have. gert and ORT alternate in 3 short rounds per configuration, in the same
    process; each side's median round is reported. S x C above the 2 cores oversubscribes: both sides degrade.
(b) ``Model.run`` overhead on a one-node graph (Relu, 1x64): median over rounds of the mean per call, minus
    ONNX Runtime ``InferenceSession.run()`` on the same graph (1 thread each); target <= 15 us. A second row uses a
    symbolic batch (3 rows padded to gear 4, sliced back).
(c) PP-OCR rec 1x3x48xW, widths drawn from 100..1000: policies pad (gears 320/640/1000), exact, dynamic, auto; one
    stream, 2 cube cores. First pass (includes compiles) and second pass throughput, compiles, padding ratio.

Needs ``pip install --no-deps rapidocr-onnxruntime==1.4.4`` for (a) and (c). On this 2-core machine the default
run takes about 2-3 minutes; --quick about 40 s.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import interleaved, machine, ppocr_model  # noqa: E402

import gert  # noqa: E402

DET = "ch_PP-OCRv4_det_infer.onnx"
CLS = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
REC = "ch_PP-OCRv4_rec_infer.onnx"
REC_W = "p2o.DynamicDimension.1"
ROUNDS = 3  # alternating gert / ORT rounds per throughput point; the median of each side is reported


def ort_session(model, threads: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def relu_model(batch) -> bytes:
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 64])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch, 64])
    m = oh.make_model(oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "relu", [x], [y]),
                      opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def images(n: int, h: int, w: int, seed: int) -> np.ndarray:
    """Synthetic text-like pages (dark boxes on a light page), normalized, NCHW float32."""
    rng = np.random.default_rng(seed)
    img = np.full((n, 3, h, w), 0.9, np.float32) + rng.normal(0, 0.02, (n, 3, h, w)).astype(np.float32)
    for b in range(n):
        for _ in range(max(1, h * w // 2000)):
            y, x = int(rng.integers(0, h - 8)), int(rng.integers(0, w - 8))
            img[b, :, y:y + 8, x:x + int(rng.integers(3, 8))] = 0.1
    return ((img - 0.5) / 0.5).astype(np.float32)


def throughput(calls: list, seconds: float) -> float:
    """Run each callable in its own thread, in a loop, for ``seconds``; completed calls per second (all threads)."""
    for c in calls:  # warm every session / stream once
        c()
    counts = [0] * len(calls)
    start = threading.Barrier(len(calls) + 1)
    deadline = [0.0]

    def loop(i):
        start.wait()
        n, fn = 0, calls[i]
        while time.perf_counter() < deadline[0]:
            fn()
            n += 1
        counts[i] = n

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    deadline[0] = t0 + seconds
    start.wait()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def bench_throughput(name: str, path: str, x: np.ndarray, seconds: float, configs) -> list:
    with open(path, "rb") as f:
        model = f.read()
    rows = []
    for streams, cores in configs:
        with gert.load(model, streams=streams, cube_cores=cores, gears={"batch": [x.shape[0]]}) as m:
            out_name = m.outputs[0].name
            sessions = [ort_session(model, cores) for _ in range(streams)]
            got = m.run({"x": x})[out_name]
            ref = sessions[0].run(None, {"x": x})[0]
            same = got.tobytes() == ref.tobytes()  # same thread count: bitwise, unless shapes specialize kernels
            gert_calls = [lambda: m.run({"x": x})] * streams
            ort_calls = [(lambda s=s: s.run(None, {"x": x})) for s in sessions]
            gs, os_ = [], []
            for r in range(ROUNDS):  # short alternating rounds, so that background load hits both sides alike
                first, second = (gert_calls, ort_calls) if r % 2 == 0 else (ort_calls, gert_calls)
                a, b = throughput(first, seconds / ROUNDS), throughput(second, seconds / ROUNDS)
                gs.append(a if r % 2 == 0 else b)
                os_.append(b if r % 2 == 0 else a)
            g, o = statistics.median(gs), statistics.median(os_)
            compiles = m.stats()["compiles"]
        rows.append({"case": name, "streams": streams, "cube": cores, "threads": streams * cores,
                     "gert_rps": g, "ort_rps": o, "ratio": g / o, "items_per_req": x.shape[0],
                     "bitwise": same, "compiles": compiles})
        print(f"  {name} streams={streams} cube={cores}: gert {g:.2f} req/s, ORT {o:.2f} req/s", file=sys.stderr)
    return rows


def bench_overhead(repeat: int, inner: int) -> list:
    rows = []
    for label, batch, rows_in in (("Relu 1x64 (static)", 1, 1), ("Relu [batch]x64, 3 rows -> gear 4", "batch", 3)):
        model = relu_model(batch)
        x = np.random.default_rng(0).standard_normal((rows_in, 64)).astype(np.float32)
        sess = ort_session(model, 1)
        with gert.load(model, cube_cores=1, gears={"batch": [1, 2, 4]} if batch == "batch" else None) as m:
            feeds = {"x": x}
            np.testing.assert_array_equal(m.run(feeds)["y"], sess.run(None, feeds)[0])
            samples = {"gert": [], "ort": []}
            for _ in range(3):  # medians over independent interleaved series
                t = interleaved({"gert": lambda: m.run(feeds), "ort": lambda: sess.run(None, feeds)}, repeat, inner)
                for k in t:
                    samples[k].append(t[k])
        g, o = statistics.median(samples["gert"]), statistics.median(samples["ort"])
        rows.append({"case": label, "gert_us": g, "ort_us": o, "overhead_us": g - o})
    return rows


def bench_rec(path: str, widths: list) -> list:
    with open(path, "rb") as f:
        model = f.read()
    xs = [images(1, 48, int(w), seed=int(w)) for w in widths]
    configs = {
        # H ("?", always 48) exact as before auto became the default; "auto" is gert's default for both
        "pad": dict(gears={"batch": [1], REC_W: [320, 640, 1000]}, shape_policy={REC_W: "pad", "?": "exact"}),
        "exact": dict(gears={"batch": [1]}, shape_policy={REC_W: "exact", "?": "exact"}),
        "dynamic": dict(gears={"batch": [1]}, shape_policy={REC_W: "dynamic", "?": "exact"}),
        "auto": dict(gears={"batch": [1]}),
    }
    rows = []
    for policy, kw in configs.items():
        with gert.load(model, cube_cores=2, **kw) as m:
            t0 = time.perf_counter()
            for x in xs:
                m.run({"x": x})
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            for x in xs:
                m.run({"x": x})
            second = time.perf_counter() - t0
            st = m.stats()
        real = padded = 0.0
        for label, g in st["gears"].items():  # e.g. "?=48,batch=1,p2o.DynamicDimension.1=640"
            sizes = [int(kv.rsplit("=", 1)[1]) for kv in label.split(",")]
            per_hit = 3 * float(np.prod([v for v in sizes if v > 0]))  # padded elements of one request at this gear
            padded += g["hits"] * per_hit
            real += g["hits"] * per_hit * (1 - g["padding_ratio"])
        rows.append({"policy": policy, "first_rps": len(xs) / first, "steady_rps": len(xs) / second,
                     "compiles": st["compiles"], "padding_ratio": 1 - real / padded if padded else 0.0,
                     "compile_s": sum(s["compile_seconds"] for s in st["streams"])})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter windows, fewer configurations and widths")
    ap.add_argument("--seconds", type=float, help="measuring window per throughput point (default 3, quick 0.6)")
    ap.add_argument("--json", help="write every row as JSON to this file")
    args = ap.parse_args()
    seconds = args.seconds or (0.6 if args.quick else 3.0)
    configs = [(s, c) for s in (1, 2, 4) for c in (1, 2)]
    if args.quick:
        configs = [(1, 2), (2, 1), (4, 1)]
    out = {"machine": machine(), "backend": gert.backend()}

    t_all = time.perf_counter()
    det, cls, rec = ppocr_model(DET), ppocr_model(CLS), ppocr_model(REC)
    thr = []
    if det is None:
        print("PP-OCR models skipped: pip install --no-deps rapidocr-onnxruntime==1.4.4", file=sys.stderr)
    else:
        thr += bench_throughput("det 1x3x640x640", det, images(1, 640, 640, 1), seconds, configs)
        thr += bench_throughput("cls 8x3x48x192", cls, images(8, 48, 192, 2), seconds, configs)
    over = bench_overhead(repeat=7 if args.quick else 15, inner=500 if args.quick else 1000)
    widths = np.random.default_rng(3).integers(100, 1001, 6 if args.quick else 12).tolist()
    recs = bench_rec(rec, widths) if rec is not None else []
    out.update(throughput=thr, overhead=over, rec=recs, rec_widths=widths, seconds=seconds)

    print(f"backend={gert.backend()} ({machine()}); window {seconds:.1f} s per point; "
          f"total {time.perf_counter() - t_all:.0f} s")
    if thr:
        print("\n(a) throughput, requests/s (cls: x8 images). ORT: S threads x own session(intra_op=C)")
        print(f"{'case':<18} {'streams':>7} {'cube':>4} {'threads':>7} {'gert req/s':>11} {'ORT req/s':>10} "
              f"{'gert/ORT':>8} {'bitwise':>7}")
        for r in thr:
            print(f"{r['case']:<18} {r['streams']:>7} {r['cube']:>4} {r['threads']:>7} {r['gert_rps']:>11.2f} "
                  f"{r['ort_rps']:>10.2f} {r['ratio']:>8.3f} {str(r['bitwise']):>7}")
    print("\n(b) Model.run overhead over InferenceSession.run(), 1 thread each (target <= 15 us)")
    print(f"{'case':<36} {'gert us':>9} {'ORT us':>9} {'overhead us':>12}")
    for r in over:
        print(f"{r['case']:<36} {r['gert_us']:>9.1f} {r['ort_us']:>9.1f} {r['overhead_us']:>12.1f}")
    if recs:
        print(f"\n(c) rec 1x3x48xW, {len(widths)} widths from 100..1000 ({sorted(widths)}), 1 stream x 2 cube cores")
        print(f"{'policy':<8} {'1st pass req/s':>14} {'2nd pass req/s':>14} {'compiles':>8} {'compile s':>9} "
              f"{'padding':>8}")
        for r in recs:
            print(f"{r['policy']:<8} {r['first_rps']:>14.2f} {r['steady_rps']:>14.2f} {r['compiles']:>8} "
                  f"{r['compile_s']:>9.2f} {r['padding_ratio']:>8.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
