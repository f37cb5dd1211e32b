"""Host memory of a fresh process: gert against ONNX Runtime on the same work (issue 28).

    python benchmarks/bench_memory.py [--work rapidocr:24,rapidocr:96,det:90] [--pairs 1] [--json out.json]

Each (work, side) runs in its own fresh process, the sides alternating per pair: RapidOCR 1.4.4 unmodified over
``N`` generated text images (examples/rapidocr_on_gert.py: ``gert.patch_onnxruntime(when="always")`` against plain
ONNX Runtime), and PP-OCR det over ``N`` varied sizes (multiples of 32, each seen 4 times in a row so that gert's
tiers compile static graphs for them: the worst case for memory) through ``gert.InferenceSession`` against
``onnxruntime.InferenceSession``. Reported per process: wall time, peak RSS (VmHWM) and the RSS at the end (steady:
after the work, models still open), and for gert where the bytes go: the host NPU's ONNX Runtime sessions (by model
and by thread count; each holds its own optimized copy of the model's weights), the emulated device's memory (I/O
buffers), the heap and the other anonymous memory (ONNX Runtime's graphs and arenas, Python) from /proc/self/smaps,
and Python's own allocations from tracemalloc with ``--tracemalloc`` (slow). ONNX Runtime's Python API reports no
memory figures of a session.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))

MB = 1 << 20


def status() -> dict:
    """VmHWM, VmRSS, RssAnon, RssFile and Threads of this process (/proc/self/status), bytes (Threads: a count)."""
    out = {}
    with open("/proc/self/status") as f:
        for ln in f:
            key, _, value = ln.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
            elif key == "Threads":
                out[key] = int(value)
    return out


def smaps() -> dict:
    """Resident bytes by kind of mapping (/proc/self/smaps): the heap, the main thread's stack, other anonymous
    memory (mmap'd blocks of malloc and ONNX Runtime, the other threads' stacks) and files (libraries, the models)."""
    kinds = {"heap": 0, "anon": 0, "file": 0, "stack": 0}
    name = ""
    with open("/proc/self/smaps") as f:
        for ln in f:
            parts = ln.split()
            if not parts:
                continue
            if "-" in parts[0] and not parts[0].endswith(":"):
                name = parts[5] if len(parts) > 5 else ""
            elif parts[0] == "Rss:":
                rss = int(parts[1]) * 1024
                if name == "[heap]":
                    kinds["heap"] += rss
                elif name.startswith("[stack"):
                    kinds["stack"] += rss
                elif name == "" or name.startswith("["):
                    kinds["anon"] += rss
                else:
                    kinds["file"] += rss
    return kinds


def gert_breakdown() -> dict:
    """Where a gert process's bytes go, from the host NPU's provider and the emulated device (gert.hostnpu)."""
    try:
        from gert.hostnpu import memory_report
    except ImportError:  # a gert from before issue 28 (an A/B against an older checkout on PYTHONPATH)
        return {}
    return memory_report()


# ---- the work ------------------------------------------------------------------------------------------------------
def det_sizes(n: int) -> list:
    """``n`` distinct det input sizes (H, W), multiples of 32 in 96..640, in a fixed pseudo-random order."""
    import random

    all_sizes = [(h, w) for h in range(96, 641, 32) for w in range(96, 641, 32)]
    random.Random(28).shuffle(all_sizes)
    return all_sizes[:n]


def work_det(side: str, n: int) -> dict:
    """PP-OCR det over ``n`` sizes, each run 4 times in a row (gert's tiers turn a size hot after 4)."""
    import numpy as np
    from _common import DET, ppocr_model

    path = ppocr_model(DET)
    if side == "gert":
        import gert

        sess = gert.InferenceSession(path)
    else:
        import onnxruntime as ort

        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    rng = np.random.default_rng(0)
    for h, w in det_sizes(n):
        x = rng.random((1, 3, h, w), dtype=np.float32)
        for _ in range(4):
            sess.run(None, {name: x})
    if side == "gert":
        wait_idle(sess)
    return {"keep": sess}


def wait_idle(sess, timeout: float = 600.0) -> None:
    """Wait until gert's background compiles are done (the static graphs exist: their memory counts)."""
    model = getattr(sess, "model", None)
    stats = getattr(model, "stats", None)
    deadline = time.monotonic() + timeout
    while stats is not None and time.monotonic() < deadline:
        tiers = (stats() or {}).get("tiers") or {}
        if not tiers.get("pending"):
            return
        time.sleep(0.2)


def work_rapidocr(side: str, n: int) -> dict:
    import rapidocr_on_gert as ex

    if side == "gert":
        import gert

        gert.patch_onnxruntime(when="always")
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR()
    texts = []
    for im in ex.images(n):
        res, _ = engine(im)
        texts.append([t for _, t, _ in (res or [])])
    return {"keep": engine, "texts": texts}


def child(work: str, side: str, n: int, trace: bool) -> dict:
    if trace:
        import tracemalloc

        tracemalloc.start()
    t = time.perf_counter()
    kept = (work_det if work == "det" else work_rapidocr)(side, n)
    wall = time.perf_counter() - t
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    out = {"work": work, "side": side, "n": n, "wall_s": round(wall, 2), "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
           **status(), "smaps": smaps()}
    if trace:
        import tracemalloc

        cur, peak = tracemalloc.get_traced_memory()
        out["python_heap"], out["python_heap_peak"] = cur, peak
    if side == "gert":
        out["gert"] = gert_breakdown()
    if "texts" in kept:
        out["texts"] = kept["texts"]
    return out


# ---- the parent: fresh processes, alternating ---------------------------------------------------------------------
def run_child(work: str, side: str, n: int, trace: bool) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", f"{work}:{n}", "--side", side]
    if trace:
        cmd.append("--tracemalloc")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=REPO)
    if r.returncode != 0:
        raise SystemExit(f"{work}:{n} {side} failed:\n{r.stderr[-3000:]}")
    return json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])


def mb(v: float) -> str:
    return f"{v / MB:.0f}"


def table(results: dict) -> list:
    lines = ["| work | side | wall s | CPU s | peak RSS MB | end RSS MB | peak gert/ORT | wall gert/ORT | threads |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (work, n), sides in results.items():
        med = {s: {k: statistics.median(r.get(k, 0) for r in runs) for k in ("wall_s", "cpu_s", "VmHWM", "VmRSS")}
               for s, runs in sides.items()}
        for s in ("ort", "gert"):
            if s not in med:
                continue
            ratio = wall = ""
            if s == "gert" and "ort" in med:
                ratio = f"{med['gert']['VmHWM'] / med['ort']['VmHWM']:.2f}x"
                wall = f"{med['gert']['wall_s'] / med['ort']['wall_s']:.2f}x"
            lines.append(f"| {work} x{n} | {s} | {med[s]['wall_s']:.1f} | {med[s]['cpu_s']:.1f} | {mb(med[s]['VmHWM'])} | "
                         f"{mb(med[s]['VmRSS'])} | {ratio} | {wall} | {sides[s][-1].get('Threads', '')} |")
    return lines


def breakdown(results: dict) -> list:
    lines = []
    for (work, n), sides in results.items():
        for r in sides.get("gert", [])[-1:]:
            g, sm = r.get("gert", {}), r["smaps"]
            lines.append(f"\ngert, {work} x{n}: end RSS {mb(r['VmRSS'])} MB (anon {mb(r['RssAnon'])}, files "
                         f"{mb(r['RssFile'])}), peak {mb(r['VmHWM'])} MB, {r.get('Threads')} threads")
            lines.append(f"  heap {mb(sm['heap'])} MB, other anonymous {mb(sm['anon'])} MB, stacks (main) "
                         f"{mb(sm['stack'])} MB")
            for m in g.get("models", []):
                lines.append(f"  model {m['digest']} ({mb(m['model_bytes'])} MB): {m['sessions']} ONNX Runtime "
                             f"sessions by compute threads {m['by_threads']}, each its own optimized copy")
            parsed = g.get("parsed_models") or {}
            if parsed:
                lines.append("  ModelProtos kept for shape inference (skeletons): " + ", ".join(
                    f"{d} {v / 1024:.0f} KB" for d, v in parsed.items()))
            if g:
                lines.append(f"  emulated device memory: buffers {mb(g['device_in_use'])} MB in use (peak "
                             f"{mb(g['device_peak'])} MB), aclrtGetMemInfo used {mb(g['device_used'])} of "
                             f"{mb(g['device_total'])} MB (the buffers and the loaded models' weights)")
            if "python_heap" in r:
                lines.append(f"  Python (tracemalloc) {mb(r['python_heap'])} MB now, {mb(r['python_heap_peak'])} MB peak")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="rapidocr:24,rapidocr:96,det:90",
                    help="comma-separated work:count, work one of rapidocr, det")
    ap.add_argument("--pairs", type=int, default=1, help="alternating ort/gert process pairs per work")
    ap.add_argument("--sides", default="ort,gert")
    ap.add_argument("--tracemalloc", action="store_true", help="Python's allocations too (slows the runs)")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--side", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        work, n = args.child.split(":")
        print("RESULT " + json.dumps(child(work, args.side, int(n), args.tracemalloc)), flush=True)
        os._exit(0)  # the figures are out: skip the teardown
    results: dict = {}
    for item in args.work.split(","):
        work, n = item.split(":")
        for _ in range(args.pairs):
            for side in args.sides.split(","):
                r = run_child(work, side, int(n), args.tracemalloc)
                results.setdefault((work, int(n)), {}).setdefault(side, []).append(r)
                print(f"{work}:{n} {side}: wall {r['wall_s']} s, CPU {r.get('cpu_s')} s, peak {mb(r['VmHWM'])} MB, end {mb(r['VmRSS'])} MB",
                      file=sys.stderr, flush=True)
        sides = results[(work, int(n))]
        if "texts" in sides.get("ort", [{}])[-1] and "gert" in sides:
            same = sides["ort"][-1]["texts"] == sides["gert"][-1]["texts"]
            print(f"{work}:{n}: same texts from both: {same}", file=sys.stderr)
    print(f"# host memory, fresh processes ({args.pairs} pair(s), median)\n")
    print("\n".join(table(results) + breakdown(results)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{w}:{n}": v for (w, n), v in results.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
