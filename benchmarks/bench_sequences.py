"""Stateful serving: 32 concurrent GRU sequences through gert_triton vs two hand-written Python-backend models, on one
real tritonserver (issue 14).

    python benchmarks/bench_sequences.py [--duration 12] [--rounds 3] [--sequences 32] [--json out.json]

The model: one GRU step built with onnx.helper, x [1, N, 64], h [1, N, 256] -> y [1, N, 256], h_out [1, N, 256]
(the state's batch on axis 1). Three variants, each with max_batch_size 32 and one CPU instance:

- ``gert``: the one-line model.py as ``gert repo init --state h=h_out --batch-dim N`` writes it (Oldest sequence
  batcher, 1 ms queue delay, no control inputs, streams=1): the state stays in device memory per correlation id, one
  graph run per batch.
- ``ort_dict`` (a): what users write today: the same sequence batcher, a model.py keeping each sequence's state in a
  dict of numpy arrays and running ONNX Runtime once per request. It reads ``flags()`` and ``correlation_id()``, so
  its config declares no control inputs either (each would be one more tensor per request: START and END cost it
  ~10 us of stub CPU per step).
- ``client_state`` (b): stateless serving, the client sends h with every request and gets h_out back: dynamic
  batching (1 ms), a model.py that concatenates the batch on axis 1, runs ONNX Runtime once and splits.

Load: ``--sequences`` client threads in this process, each one sequence (gRPC, its own client): START, then steps
back to back; ``--rounds`` windows rotate through the variants (noise hits all alike). Reported: steps/s, p50/p99
latency, and gert's ratio to the better baseline. Then, in this process on the same model, the host NPU's copy
counters over one batched step of 32 sequences: bytes H2D / D2H per step against the step inputs and outputs (the
state's bytes must not appear).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import closed_loop, machine

INPUT, HIDDEN = 64, 256
MAX_BATCH = 32
ORT_THREADS = 1  # per run, in every variant (gert: cube_cores=1): the 2 cores are shared with the clients
VARIANTS = ("ort_dict", "client_state", "gert")
GEARS = "batch:8,16,24,32"  # gert's batch gears (--gears)


def ort_dict_config() -> str:
    return f"""name: "ort_dict"
backend: "python"
max_batch_size: {MAX_BATCH}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 1, {INPUT} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 1, {HIDDEN} ] }} ]
sequence_batching {{
  max_sequence_idle_microseconds: 5000000
  oldest {{ max_candidate_sequences: {4 * MAX_BATCH} preferred_batch_size: [ {MAX_BATCH} ]
           max_queue_delay_microseconds: 1000 }}
}}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


def client_state_config() -> str:
    return f"""name: "client_state"
backend: "python"
max_batch_size: {MAX_BATCH}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 1, {INPUT} ] }},
        {{ name: "h" data_type: TYPE_FP32 dims: [ 1, {HIDDEN} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 1, {HIDDEN} ] }},
         {{ name: "h_out" data_type: TYPE_FP32 dims: [ 1, {HIDDEN} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


def _model_py(doc: str) -> str:
    """The start of a hand-written model.py: ONNX Runtime on the CPU with ORT_THREADS intra-op threads."""
    return f'''"""{doc}"""
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        so = ort.SessionOptions()
        so.intra_op_num_threads = {ORT_THREADS}
        so.inter_op_num_threads = 1
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.state = {{}}
'''


def ort_dict_py() -> str:
    doc = "Hand-written: each sequence's state in a dict of numpy arrays, ONNX Runtime once per request."
    return (
        _model_py(doc)
        + f"""

    def execute(self, requests):
        out = []
        for r in requests:
            key = r.correlation_id()
            flags = r.flags()
            if flags & 1 or key not in self.state:
                self.state[key] = np.zeros((1, 1, {HIDDEN}), np.float32)
            x = np.moveaxis(pb_utils.get_input_tensor_by_name(r, "x").as_numpy(), 0, 1)
            y, h = self.sess.run(["y", "h_out"], {{"x": x, "h": self.state[key]}})
            self.state[key] = h
            if flags & 2:
                del self.state[key]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", np.ascontiguousarray(np.moveaxis(y, 1, 0)))]))
        return out
"""
    )


def client_state_py() -> str:
    return (
        _model_py(
            "Hand-written stateless serving: the client sends h, gets h_out; one ONNX Runtime run per batch (axis 1)."
        )
        + """

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "x").as_numpy() for r in requests]
        hs = [pb_utils.get_input_tensor_by_name(r, "h").as_numpy() for r in requests]
        x = np.concatenate([np.moveaxis(a, 0, 1) for a in xs], axis=1)
        h = np.concatenate([np.moveaxis(a, 0, 1) for a in hs], axis=1)
        y, h_out = self.sess.run(["y", "h_out"], {"x": x, "h": h})
        out = []
        for i in range(len(requests)):
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("y", np.ascontiguousarray(np.moveaxis(y[:, i:i + 1], 1, 0))),
                pb_utils.Tensor("h_out", np.ascontiguousarray(np.moveaxis(h_out[:, i:i + 1], 1, 0)))]))
        return out
"""
    )


def gru_bytes(seed: int = 0) -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((1, 3 * HIDDEN, INPUT)) * 0.1).astype(np.float32)
    r = (rng.standard_normal((1, 3 * HIDDEN, HIDDEN)) * 0.05).astype(np.float32)
    b = (rng.standard_normal((1, 6 * HIDDEN)) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("GRU", ["x", "W", "R", "B", "", "h"], ["Y", "h_out"], hidden_size=HIDDEN),
        helper.make_node("Tanh", ["h_out"], ["y"]),
    ]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        nodes,
        "gru",
        [vi("x", TensorProto.FLOAT, [1, "N", INPUT]), vi("h", TensorProto.FLOAT, [1, "N", HIDDEN])],
        [vi("y", TensorProto.FLOAT, [1, "N", HIDDEN]), vi("h_out", TensorProto.FLOAT, [1, "N", HIDDEN])],
        initializer=[numpy_helper.from_array(a, n) for a, n in ((w, "W"), (r, "R"), (b, "B"))],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def build_repo(root: str) -> str:
    from gert_triton.repo import init_repo

    path = os.path.join(root, "gru.onnx")
    with open(path, "wb") as f:
        f.write(gru_bytes())
    repo = os.path.join(root, "repo")
    init_repo(
        path,
        repo,
        name="gert",
        max_batch_size=MAX_BATCH,
        parameters={"streams": "1", "cube_cores": "1", "gears": GEARS},
        sequence={"state": {"h": "h_out"}, "batch_dim": "N", "strategy": "oldest", "idle_us": 5_000_000},
    )
    for name, config, code in (
        ("ort_dict", ort_dict_config(), ort_dict_py()),
        ("client_state", client_state_config(), client_state_py()),
    ):
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copyfile(path, os.path.join(repo, name, "1", "model.onnx"))
        with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
            f.write(code)
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config)
    return repo


def load(url: str, model: str, sequences: int, seconds: float, first_id: int) -> dict:
    """``sequences`` clients, one sequence each, steps back to back for ``seconds`` (then each sends its END)."""
    import tritonclient.grpc as grpcclient

    def setup(t: int) -> tuple:
        client = grpcclient.InferenceServerClient(url)
        x = grpcclient.InferInput("x", [1, 1, INPUT], "FP32")
        x.set_data_from_numpy(np.random.default_rng(t).standard_normal((1, 1, INPUT)).astype(np.float32))
        h_in = grpcclient.InferInput("h", [1, 1, HIDDEN], "FP32")
        state = {"h": np.zeros((1, 1, HIDDEN), np.float32), "step": 0}
        key = first_id + t

        def step(last: bool = False) -> None:
            if model == "client_state":
                h_in.set_data_from_numpy(state["h"])
                state["h"] = client.infer(model, [x, h_in], client_timeout=30).as_numpy("h_out")
            else:
                client.infer(
                    model, [x], sequence_id=key, sequence_start=state["step"] == 0, sequence_end=last, client_timeout=30
                )
            state["step"] += 1

        def finish() -> None:
            try:
                step(last=True)
            finally:
                client.close()

        return step, finish

    return closed_loop(sequences, setup, seconds, model)


def copy_counters(sequences: int) -> dict:
    """In this process, the same model: bytes copied per batched step of ``sequences`` sequences."""
    import gert

    with gert.load(gru_bytes(), state={"h": "h_out"}, batch_dim="N", gears={"batch": [1, 8, MAX_BATCH]}) as model:
        seqs = [model.sequence() for _ in range(sequences)]
        x = np.ones((1, 1, INPUT), np.float32)
        model.step([(s, {"x": x}) for s in seqs])  # compile
        c0 = gert.host_counters()
        outs = model.step([(s, {"x": x}) for s in seqs])
        c1 = gert.host_counters()
        padded = model.plan.batch.resolve(sequences, "bench")
        return {
            "h2d": c1["bytes_h2d"] - c0["bytes_h2d"],
            "d2h": c1["bytes_d2h"] - c0["bytes_d2h"],
            "d2d": c1["bytes_d2d"] - c0["bytes_d2d"],
            "x_bytes": padded * x.nbytes,
            "y_bytes": padded * outs[0]["y"].nbytes,
            "state_bytes": sequences * HIDDEN * 4,
            "batch": padded,
        }


def main() -> int:
    global INPUT, HIDDEN, GEARS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=12.0, help="seconds of load per variant, in all")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sequences", type=int, default=32)
    ap.add_argument("--input", type=int, default=64, help="GRU input size")
    ap.add_argument("--hidden", type=int, default=256, help="GRU hidden (state) size")
    ap.add_argument("--gears", default=GEARS, help="gert's gears parameter (default %(default)s)")
    ap.add_argument("--json")
    args = ap.parse_args()
    INPUT, HIDDEN, GEARS = args.input, args.hidden, args.gears
    from gert_triton.server import TritonServer, pytriton_root

    if pytriton_root() is None:
        print("bench_sequences: skipped, needs nvidia-pytriton (pip install -e '.[triton]')", file=sys.stderr)
        return 0
    root = tempfile.mkdtemp(prefix="gert-bench-seq-")
    rows = []
    try:
        repo = build_repo(root)
        srv = TritonServer(repo, log_path=os.path.join(root, "server.log"), extra_args=["--exit-timeout-secs=5"])
        srv.start()
        try:
            srv.wait_ready(120)
            url = srv.url("grpc")
            windows: dict = {v: [] for v in VARIANTS}
            for v in VARIANTS:  # warm-up: connections, graphs, ORT sessions
                load(url, v, args.sequences, 1.0, 10_000)
            for r in range(args.rounds):
                for v in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
                    windows[v].append(
                        load(
                            url,
                            v,
                            args.sequences,
                            args.duration / args.rounds,
                            100_000 * (r + 1) + 1000 * VARIANTS.index(v),
                        )
                    )
                print(
                    f"  round {r + 1}/{args.rounds}: "
                    + ", ".join(
                        f"{v} {windows[v][-1]['latencies'].size / windows[v][-1]['seconds']:.0f}" for v in VARIANTS
                    )
                    + " steps/s",
                    file=sys.stderr,
                )
        except BaseException:  # the server's side of a failure, before its directory goes
            log = os.path.join(root, "server.log")
            if os.path.exists(log):
                with open(log, errors="replace") as f:
                    print(f.read()[-4000:], file=sys.stderr)
            raise
        finally:
            srv.stop(timeout=20)
        for v in VARIANTS:
            lat = np.concatenate([w["latencies"] for w in windows[v]])
            seconds = sum(w["seconds"] for w in windows[v])
            rows.append(
                {
                    "variant": v,
                    "steps": int(lat.size),
                    "steps_per_s": lat.size / seconds,
                    "p50_ms": float(np.percentile(lat, 50)),
                    "p99_ms": float(np.percentile(lat, 99)),
                }
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    counters = copy_counters(args.sequences)
    by = {r["variant"]: r for r in rows}
    best = max((by["ort_dict"], by["client_state"]), key=lambda r: r["steps_per_s"])
    print(machine())
    print(
        f"{args.sequences} concurrent GRU sequences (x {INPUT}, h {HIDDEN}), gRPC, {args.duration:g} s per variant "
        f"in {args.rounds} rounds"
    )
    print(f"{'variant':<14} {'steps/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'steps':>8}")
    for r in rows:
        print(f"{r['variant']:<14} {r['steps_per_s']:>9.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['steps']:>8}")
    print(
        f"gert / better baseline ({best['variant']}): {by['gert']['steps_per_s'] / best['steps_per_s']:.2f}x "
        f"steps/s, p99 {by['gert']['p99_ms']:.2f} vs {best['p99_ms']:.2f} ms"
    )
    c = counters
    print(
        f"one batched step of {args.sequences} sequences (graph batch {c['batch']}), in process: H2D {c['h2d']} B "
        f"(x: {c['x_bytes']}), D2H {c['d2h']} B (y: {c['y_bytes']}), D2D {c['d2d']} B; state bytes host-device: "
        f"{c['h2d'] - c['x_bytes'] + c['d2h'] - c['y_bytes']} (the state, {c['state_bytes']} B, moves D2D only)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "counters": counters}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
