"""`gert bench MODEL.onnx`: sweep streams x core locks x batch (x gears) on any ONNX model and report which
configuration is fastest, and which is best under each latency budget.

Each configuration loads the model with gert.load(), warms it up, then ``--concurrency`` threads call run() in a
loop for ``--duration`` seconds (or ``--iterations`` requests in all). Reported: inferences/s, samples/s, latency
p50/p90/p99, each stream's busy share, compile time and device memory peak.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from gert.core.load_config import LoadConfig
from gert.core.tiers import HOT_AFTER
from gert.errors import GertError
from gert.tools.input_options import input_files, input_shapes
from gert.tools.progress import Progress

DEFAULT_BUDGETS_MS = "5,10,20,50,100,200,500,1000"


class BenchArgError(GertError):
    """A bad `gert bench` argument: reported as one line on stderr, exit code 2."""


@dataclass
class BenchConfig:
    streams: int
    cube_cores: int | None
    vector_cores: int | None
    batch: int | None


@dataclass
class BenchResult:
    streams: int
    cube_cores: int | None
    vector_cores: int | None
    batch: int | None
    requests: int
    seconds: float
    inferences_per_s: float
    samples_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    stream_busy: list = field(default_factory=list)
    compile_s: float = 0.0
    memory_peak_mb: float = 0.0
    best_under_ms: list = field(default_factory=list)
    static_share: float = 0.0  # of the measured requests, the share served by static graphs
    compile_s_cold: float | None = None  # with a cache dir: compile seconds of a first load into an empty cache
    cache_hits: int = 0  # with a cache dir: compiles of the measured (warm) load served by the cache

    def label(self) -> str:
        return (
            f"streams={self.streams} cube={self.cube_cores or '-'} vector={self.vector_cores or '-'} "
            f"batch={self.batch or '-'}"
        )


def parse_int_list(text: str | None, what: str) -> list:
    if text is None:
        return [None]
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchArgError(f"--{what}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise BenchArgError(f"--{what}: expected positive integers, got {text!r}")
    return vals


def parse_dim_lists(items: list | None, what: str, value_parser) -> dict:
    """['W:160,320', 'batch:1,8'] -> {'W': ..., 'batch': ...} (a dim name may itself contain ':')."""
    out = {}
    for item in items or []:
        for part in filter(None, item.split(";")):
            name, sep, rest = part.rpartition(":")
            if not sep or not name:
                raise BenchArgError(f"--{what}: {part!r} is not 'dim:value'")
            out[name] = value_parser(rest, name)
    return out


def make_inputs(model, shapes: dict, files: dict, batch: int | None, rng: np.random.Generator) -> dict:
    """One request: arrays from --input files, else random data of the model's dtypes and --shape shapes."""
    plan = model.plan
    names = {t.name for t in plan.inputs}
    for n in list(shapes) + list(files):
        if n not in names:
            raise BenchArgError(f"unknown input '{n}'; the model's inputs are {sorted(names)}")
    out = {}
    for t in plan.inputs:
        if t.name in files:
            a = files[t.name]
        else:
            if t.name in shapes:
                shape = list(shapes[t.name])
                if len(shape) != len(t.shape):
                    raise BenchArgError(f"--shape {t.name}: rank {len(shape)}, the model's input has shape {t.shape}")
            else:
                shape = list(t.shape)
            for axis, d in enumerate(shape):
                if plan.input_axes.get((t.name, axis)) == "batch" and batch is not None:
                    shape[axis] = batch
                elif not isinstance(d, int):
                    raise BenchArgError(
                        f"input '{t.name}' has a dynamic dim at axis {axis} ({d}); give "
                        f"--shape {t.name}=" + "x".join(str(x) if isinstance(x, int) else "N" for x in t.shape)
                    )
            if np.issubdtype(t.dtype, np.floating):
                a = rng.standard_normal(shape).astype(t.dtype)
            elif t.dtype == np.bool_:
                a = rng.integers(0, 2, shape).astype(np.bool_)
            else:
                a = rng.integers(0, 4, shape).astype(t.dtype)
        out[t.name] = a
    try:
        model.validate(out)
    except GertError as e:
        raise BenchArgError(f"the model cannot take these inputs: {e}") from None
    return out


def settle(model, timeout: float = 120.0) -> None:
    """Shape policy auto: wait until the static graphs of the shapes just run (hot by now) are compiled, so that the
    measurement sees the steady state, not the dynamic graph and a compile running beside it."""
    deadline = time.monotonic() + timeout
    while model.stats().get("tiers", {}).get("pending") and time.monotonic() < deadline:
        time.sleep(0.02)


def _load_and_prime(
    model_bytes: bytes, cfg: BenchConfig, load: LoadConfig, shapes: dict, files: dict, warmup: int
) -> tuple:
    """Load, then the warm-up requests that compile what the configuration runs; (model, inputs)."""
    import gert

    model = gert.load(
        model_bytes,
        config=load.replace(streams=cfg.streams, cube_cores=cfg.cube_cores, vector_cores=cfg.vector_cores),
    )
    try:
        inputs = make_inputs(model, shapes, files, cfg.batch, np.random.default_rng(0))
        primed = _prime_every_stream(model, inputs, max(warmup, 1))
        for _ in range(HOT_AFTER - primed):
            model.run(inputs)
        settle(model)
    except BaseException:
        model.close()
        raise
    return model, inputs


def _prime_every_stream(model, inputs: dict, runs: int) -> int:
    """``runs`` runs of ``inputs`` on each stream of ``model``, the others held meanwhile (a lone caller stays on one
    stream): each compiles what the measured runs need and prepares its hot path. How many runs that was."""
    queue, workers = model.pool.queue, list(model.pool.workers)
    for w in workers:
        held = [queue.acquire([o]) for o in workers if o is not w]
        try:
            for _ in range(runs):
                model.run(inputs)
        finally:
            for o in held:
                queue.release(o)
    return runs * len(workers)


def _compile_seconds(model) -> float:
    return sum(s["compile_seconds"] for s in model.stats()["streams"])


def run_config(
    model_bytes: bytes,
    cfg: BenchConfig,
    load: LoadConfig | dict,
    shapes: dict,
    files: dict,
    concurrency: int,
    duration: float | None,
    iterations: int | None,
    warmup: int,
    cache_dir: str | None = None,
    traces: list | None = None,
) -> BenchResult:
    """One configuration. With ``cache_dir``: first a cold load (and its warm-up) into an empty subdirectory of it
    (removed afterwards), then the measured load, warm from that cache: compile seconds cold vs warm. ``load``: the
    LoadConfig (or gert.load's keywords) each configuration's streams and core limits replace."""
    import gert

    if not isinstance(load, LoadConfig):
        load = LoadConfig.from_kwargs(**load)
    cold_s, fresh = None, None
    if cache_dir is not None:
        os.makedirs(cache_dir, exist_ok=True)
        fresh = tempfile.mkdtemp(prefix="gert-bench-", dir=cache_dir)
        load = load.replace(cache_dir=fresh)
        cold, _ = _load_and_prime(model_bytes, cfg, load, shapes, files, warmup)
        cold_s = _compile_seconds(cold)
        cold.close()
    try:
        model, inputs = _load_and_prime(model_bytes, cfg, load, shapes, files, warmup)
    except BaseException:
        if fresh:
            shutil.rmtree(fresh, ignore_errors=True)
        raise
    try:
        batch = next((a.shape[0] for n, a in inputs.items() if model.plan.has_batch), 1)
        if gert.hostnpu.available():
            gert.reset_host_counters()
        base = model.stats()
        latencies: list = []
        lock = threading.Lock()
        stop_at = time.perf_counter() + duration if duration else None
        remaining = [iterations or 0]

        def client():
            mine = []
            while True:
                if stop_at is not None:
                    if time.perf_counter() >= stop_at:
                        break
                else:
                    with lock:
                        if remaining[0] <= 0:
                            break
                        remaining[0] -= 1
                t0 = time.perf_counter()
                model.run(inputs)
                mine.append(time.perf_counter() - t0)
            with lock:
                latencies.extend(mine)

        recording = gert.trace().start() if traces is not None else None  # the measured phase only
        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, name=f"client {i}") for i in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        if recording is not None:
            traces.append(recording.stop())
        stats = model.stats()
        busy = [
            round((s["busy_seconds"] - b["busy_seconds"]) / wall, 3) for s, b in zip(stats["streams"], base["streams"])
        ]
        if gert.hostnpu.available():
            peak = gert.host_counters()["device_memory_peak"] / 2**20
        else:
            peak = max((m["used"] for m in stats["device_memory"].values()), default=0) / 2**20
        lat = np.array(latencies) * 1e3 if latencies else np.zeros(1)
        n = len(latencies)
        static = stats["static_hits"] - base["static_hits"]
        served = static + stats["dynamic_hits"] - base["dynamic_hits"]
        return BenchResult(
            cfg.streams,
            cfg.cube_cores,
            cfg.vector_cores,
            cfg.batch,
            n,
            wall,
            n / wall,
            n * batch / wall,
            float(np.percentile(lat, 50)),
            float(np.percentile(lat, 90)),
            float(np.percentile(lat, 99)),
            busy,
            sum(s["compile_seconds"] for s in stats["streams"]),
            peak,
            static_share=round(static / served, 4) if served else 0.0,
            compile_s_cold=cold_s,
            cache_hits=stats["cache_hits"],
        )
    finally:
        model.close()
        if fresh:
            shutil.rmtree(fresh, ignore_errors=True)


def mark_budgets(results: list, budgets_ms: list) -> None:
    for b in budgets_ms:
        ok = [r for r in results if r.p99_ms <= b]
        if ok:
            max(ok, key=lambda r: r.inferences_per_s * (r.batch or 1)).best_under_ms.append(b)


def table(results: list) -> str:
    head = (
        f"{'streams':>7} {'cube':>5} {'vector':>6} {'batch':>5} {'infer/s':>9} {'samples/s':>10} {'p50 ms':>8} "
        f"{'p90 ms':>8} {'p99 ms':>8} {'busy':>14} {'compile s':>9} {'mem MB':>8}  best under"
    )
    cached = any(r.compile_s_cold is not None for r in results)
    if cached:  # compile seconds of a load into an empty cache / of the measured load from that cache
        head = head.replace(f"{'compile s':>9}", f"{'compile s cold/warm':>19}")
    lines = [head]
    for r in sorted(results, key=lambda r: -r.samples_per_s):
        busy = "/".join(f"{b:.2f}" for b in r.stream_busy)
        best = " ".join(f"p99<={b:g}ms" for b in r.best_under_ms)
        comp = f"{r.compile_s:>9.2f}"
        if cached:
            cold = "-" if r.compile_s_cold is None else f"{r.compile_s_cold:.2f}"
            comp = f"{cold + '/' + f'{r.compile_s:.2f}':>19}"
        lines.append(
            f"{r.streams:>7} {r.cube_cores or '-':>5} {r.vector_cores or '-':>6} {r.batch or '-':>5} "
            f"{r.inferences_per_s:>9.1f} {r.samples_per_s:>10.1f} {r.p50_ms:>8.2f} {r.p90_ms:>8.2f} "
            f"{r.p99_ms:>8.2f} {busy:>14} {comp} {r.memory_peak_mb:>8.1f}  {best}"
        )
    return "\n".join(lines)


def write_csv(path: str, results: list) -> None:
    rows = [asdict(r) for r in results]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            row = dict(
                row,
                stream_busy=" ".join(str(x) for x in row["stream_busy"]),
                best_under_ms=" ".join(str(x) for x in row["best_under_ms"]),
            )
            w.writerow(row)


def figure(results: list):
    """A matplotlib Figure of samples/s against p99 latency, one labelled point per configuration. Built without
    pyplot, so it neither needs nor changes a GUI backend (in a notebook: ``display(figure(results))``, or save it)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise BenchArgError("plotting needs matplotlib: pip install 'gert[plot]'") from None
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for r in results:
        ax.scatter(r.p99_ms, r.samples_per_s, s=40)
        ax.annotate(
            r.label().replace(" vector=-", ""),
            (r.p99_ms, r.samples_per_s),
            fontsize=7,
            xytext=(4, 3),
            textcoords="offset points",
        )
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("samples / s")
    ax.set_title("gert bench: throughput vs p99 latency")
    ax.grid(alpha=0.3)
    ax.margins(x=0.25, y=0.15)
    fig.tight_layout()
    return fig


def plot(path: str, results: list) -> None:
    """Save figure(results) as a PNG."""
    figure(results).savefig(path, dpi=120)


def _check_cores(devices: tuple, cubes: list, vectors: list) -> None:
    import gert
    from gert import _cann

    n_dev = gert.device_count()
    for d in devices:
        if d >= n_dev:
            raise BenchArgError(f"--devices: device {d} does not exist; there are {n_dev}")
        for c in cubes:
            have = _cann.get_device_info(d, _cann.DEV_ATTR_CUBE_CORE_NUM)
            if c is not None and c > have:
                raise BenchArgError(f"--cube-cores {c}: device {d} has {have} cube cores")
        for v in vectors:
            have = _cann.get_device_info(d, _cann.DEV_ATTR_VECTOR_CORE_NUM)
            if v is not None and v > have:
                raise BenchArgError(f"--vector-cores {v}: device {d} has {have} vector cores")


def load_config(
    devices=(0,),
    gears: dict | None = None,
    shape_policy: dict | None = None,
    batch=(None,),
    precision_mode: str | None = None,
) -> LoadConfig:
    """The gert.LoadConfig `gert bench` loads the model with (each configuration replaces streams and core limits):
    the largest ``batch`` is the batch gear unless ``gears`` names the batch's. GertError naming a bad option."""
    top_batch = max((b for b in batch if b is not None), default=None)
    return LoadConfig.from_kwargs(
        devices=tuple(devices),
        gears=dict(gears) if gears else None,
        shape_policy=dict(shape_policy) if shape_policy else None,
        max_batch=top_batch if top_batch and "batch" not in (gears or {}) else None,
        precision_mode=precision_mode,  # GE's precision mode, emulated on the host NPU (gert/preview/precision.py)
    )


def sweep(
    model,
    *,
    streams=(1,),
    cube_cores=(None,),
    vector_cores=(None,),
    batch=(None,),
    shapes: dict | None = None,
    inputs: dict | None = None,
    gears: dict | None = None,
    shape_policy: dict | None = None,
    devices=(0,),
    concurrency: int = 4,
    duration: float | None = None,
    iterations: int | None = None,
    warmup: int = 3,
    latency_budgets_ms=DEFAULT_BUDGETS_MS,
    progress: bool = False,
    cache_dir: str | None = None,
    precision_mode: str | None = None,
    traces: list | None = None,
) -> list:
    """`gert bench` from Python: every combination of streams x cube_cores x vector_cores x batch, each run by
    ``concurrency`` threads for ``duration`` seconds (or ``iterations`` requests); returns BenchResults with
    ``best_under_ms`` marked. ``model``: a path or the ONNX bytes; ``shapes``: input name -> shape for dynamic
    dims; ``inputs``: input name -> array to use instead of random data. ``progress=True`` shows a bar (tqdm
    when installed, else one line per configuration) on stderr; nothing is printed otherwise. ``cache_dir``: measure
    compile seconds cold vs warm through GE's compile cache (``compile_s_cold`` / ``compile_s``). ``traces``: a list
    that gets each configuration's gert.Trace of its measured phase (in the order of the results)."""
    import gert

    if isinstance(model, (bytes, bytearray)):
        model_bytes = bytes(model)
    else:
        if not os.path.isfile(model) or not os.access(model, os.R_OK):
            raise BenchArgError(f"cannot read model file {model!r}")
        with open(model, "rb") as f:
            model_bytes = f.read()
    streams, cube_cores, vector_cores, batch = (list(x) for x in (streams, cube_cores, vector_cores, batch))
    devices = tuple(devices)
    _check_cores(devices, cube_cores, vector_cores)
    shapes, files = dict(shapes or {}), dict(inputs or {})
    try:
        load = load_config(devices, gears, shape_policy, batch, precision_mode)
    except GertError as e:
        raise BenchArgError(f"cannot load the model with these settings: {e}") from None
    if duration is None and iterations is None:
        duration = 10.0
    if isinstance(latency_budgets_ms, str):
        try:
            budgets = [float(x) for x in latency_budgets_ms.split(",") if x.strip()]
        except ValueError:
            raise BenchArgError(f"--latency-budgets: expected numbers in ms, got {latency_budgets_ms!r}") from None
    else:
        budgets = [float(x) for x in latency_budgets_ms]
    configs = [BenchConfig(s, c, v, b) for s, c, v, b in itertools.product(streams, cube_cores, vector_cores, batch)]
    # Fail fast on inputs the model cannot take, before the sweep starts.
    try:
        probe = gert.load(model_bytes, config=load)
    except GertError as e:
        raise BenchArgError(f"cannot load the model with these settings: {e}") from None
    try:
        for b in batch:
            make_inputs(probe, shapes, files, b, np.random.default_rng(0))
    finally:
        probe.close()
    results = []
    with Progress(len(configs), "gert bench", enabled=progress) as bar:
        for cfg in configs:
            r = run_config(
                model_bytes,
                cfg,
                load,
                shapes,
                files,
                concurrency,
                duration,
                iterations,
                warmup,
                cache_dir,
                traces,
            )
            results.append(r)
            bar.step(f"{r.label()}: {r.samples_per_s:.1f} samples/s, p99 {r.p99_ms:.2f} ms")
    mark_budgets(results, budgets)
    return results


def main(args) -> int:
    """Run the sweep for parsed `gert bench` arguments (see gert.tools.cli), with progress on stderr."""
    import gert

    streams = parse_int_list(args.streams, "streams")
    cubes = parse_int_list(args.cube_cores, "cube-cores")
    vectors = parse_int_list(args.vector_cores, "vector-cores")
    batches = parse_int_list(args.batch, "batch")
    devices = tuple(parse_int_list(args.devices, "devices")) if args.devices else (0,)
    shapes = input_shapes(args.shape, "gert bench")  # --shape, --input: parsed as gert check and precision do
    files = input_files(args.input, "gert bench")

    def gear_values(text, dim):
        try:
            return [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise BenchArgError(f"--gears: sizes for '{dim}' must be integers, got {text!r}") from None

    gears = parse_dim_lists(args.gears, "gears", gear_values)
    policy = parse_dim_lists(args.shape_policy, "shape-policy", lambda t, d: t)
    wants_trace = args.trace or args.trace_all or args.timeline
    traces: list | None = [] if wants_trace else None
    results = sweep(
        args.model,
        streams=streams,
        cube_cores=cubes,
        vector_cores=vectors,
        batch=batches,
        shapes=shapes,
        inputs=files,
        gears=gears,
        shape_policy=policy,
        devices=devices,
        concurrency=args.concurrency,
        duration=args.duration,
        iterations=args.iterations,
        warmup=args.warmup,
        latency_budgets_ms=args.latency_budgets or DEFAULT_BUDGETS_MS,
        progress=True,
        cache_dir=args.cache_dir,
        precision_mode=getattr(args, "precision_mode", None),
        traces=traces,
    )
    print(f"gert bench {os.path.basename(args.model)} on {gert.backend()}, concurrency {args.concurrency}")
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "model": args.model,
                    "backend": gert.backend(),
                    "concurrency": args.concurrency,
                    "results": [asdict(r) for r in results],
                },
                f,
                indent=2,
            )
    if args.csv:
        write_csv(args.csv, results)
    if args.plot:
        plot(args.plot, results)
    if traces:
        write_traces(args, results, traces)
    return 0


def write_traces(args, results: list, traces: list) -> None:
    """--trace: the best configuration's trace (most samples/s); --trace-all DIR: each one's; --timeline: a Gantt
    picture of the streams, one panel per configuration, best first (gert/tools/timeline.py)."""
    best = max(range(len(results)), key=lambda i: results[i].samples_per_s)
    if args.trace:
        traces[best].write(args.trace)
    if args.trace_all:
        os.makedirs(args.trace_all, exist_ok=True)
        for r, t in zip(results, traces):
            t.write(os.path.join(args.trace_all, r.label().replace(" ", "_").replace("=", "") + ".json"))
    if args.timeline:
        from gert.tools import timeline

        order = sorted(range(len(results)), key=lambda i: -results[i].samples_per_s)
        timeline.save(
            args.timeline,
            [
                (
                    f"{os.path.basename(args.model)}: {results[i].label().replace(' vector=-', '')}"
                    f" - {results[i].samples_per_s:.0f} samples/s, p99 {results[i].p99_ms:.1f} ms",
                    traces[i].events,
                )
                for i in order
            ],
            width_ms=args.timeline_ms,
        )
