"""Soak: many requests with injected device faults and bad requests mixed in; only those fail, everything else is
correct, and memory, threads and file descriptors stay flat.

    python benchmarks/soak.py [--requests 200000] [--duration 600] [--clients 16] [--fault-every 100]
                              [--bad-every 100] [--short] [--json out.json]

Two parts, each bounded by --requests and --duration (whichever comes first):

- ``triton``: one real tritonserver (nvidia-pytriton's, on free loopback ports) serving the generated ``seq`` model
  through gert_triton (one instance, one stream, max_batch_size 0: one request is one kernel launch). The server's
  environment carries GERT_HOST_FAULTS=execute:every=N, so the stub's host NPU fails every N-th launch with
  ACL_ERROR_RT_AICORE_EXCEPTION. --clients gRPC clients send requests back to back; every --bad-every-th request of a
  client has a wrong dtype. Checks: each bad request is answered INVALID_ARGUMENT; each failed good request is
  INTERNAL with the injected fault's message, each injected fault fails exactly one request (fault numbers distinct
  and contiguous); every other response equals the expected result (all against NumPy; one in 100 also against ONNX
  Runtime); the stub's RSS, threads and fds at the end are within 5% of their level after warmup.
- ``model``: the same in process on gert.Model with 2 streams (gert.inject_fault("execute", every=N)), bad requests
  with a wrong shape; the process's RSS, threads and fds.

--short runs a few seconds per part (the CI test tests/test_soak.py). Exit code 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from _common import machine  # noqa: E402
from triton_models import SEQ_OUTPUTS, seq_expected, seq_inputs, seq_model  # noqa: E402

FAULT_RE = re.compile(r"injected execute fault (\d+) of")
FLAT = 0.05  # resources may differ from their post-warmup level by this fraction


def proc_resources(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    return {
        "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
        "threads": int(status["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def settled_resources(pid: int, before: dict, timeout: float = 3.0) -> dict:
    """The process's resources once they are flat against ``before``, or after ``timeout`` seconds: a stream reopened
    after a device fault joins its old worker thread, and a joined thread can stay listed in /proc for a moment
    (a leak stays; a thread on its way out does not count)."""
    deadline = time.monotonic() + timeout
    while True:
        now = proc_resources(pid)
        if all(flat(before, now).values()) or time.monotonic() >= deadline:
            return now
        time.sleep(0.05)


def flat(before: dict, after: dict) -> dict:
    """Per resource: within FLAT of the warmed-up level (fds and threads: at most one more, for small counts)."""
    out = {}
    for k, b in before.items():
        slack = max(b * FLAT, 1 if k != "rss_mib" else 2.0)
        out[k] = after[k] <= b + slack
    return out


class Tally:
    """What the clients saw, and what is wrong with it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok = self.bad_rejected = self.faulted = self.ort_checked = 0
        self.fault_numbers: list = []
        self.problems: list = []

    def count(self, field: str) -> None:
        with self.lock:
            setattr(self, field, getattr(self, field) + 1)

    def fault(self, message: str) -> bool:
        """Counts the injected fault ``message`` reports; False if it reports none."""
        m = FAULT_RE.search(message)
        if not m or "507015" not in message:
            return False
        with self.lock:
            self.faulted += 1
            self.fault_numbers.append(int(m.group(1)))
        return True

    def problem(self, text: str) -> None:
        with self.lock:
            if len(self.problems) < 20:
                self.problems.append(text)

    def summary(self, seconds: float, sent: int, fault_every: int) -> dict:
        nums = sorted(self.fault_numbers)
        contiguous = nums == list(range(nums[0], nums[0] + len(nums))) if nums else True
        return {
            "requests": sent,
            "seconds": round(seconds, 1),
            "requests_per_s": round(sent / seconds, 1),
            "ok": self.ok,
            "bad_rejected": self.bad_rejected,
            "faulted": self.faulted,
            "fault_numbers_distinct_contiguous": contiguous and len(set(nums)) == len(nums),
            "fault_rate": round(self.faulted / max(1, sent - self.bad_rejected), 4),
            "expected_fault_rate": round(1 / fault_every, 4),
            "ort_checked": self.ort_checked,
            "problems": self.problems,
        }


def run_clients(clients: int, deadline: float, budget: int, one, tally: Tally) -> int:
    """``clients`` threads calling one(client_index, request_index) until the budget or the deadline is spent."""
    counter = iter(range(budget))
    lock = threading.Lock()
    sent = [0]

    def loop(c: int) -> None:
        while time.monotonic() < deadline:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            try:
                one(c, i)
            except Exception as e:  # noqa: BLE001 - a client-side failure is a finding, not a crash
                tally.problem(f"client {c} request {i}: {type(e).__name__}: {e}")
            with lock:
                sent[0] += 1

    threads = [threading.Thread(target=loop, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 60)
    return sent[0]


def ort_reference():
    import onnxruntime as ort

    sess = ort.InferenceSession(seq_model(), providers=["CPUExecutionProvider"])
    return lambda r: dict(zip(SEQ_OUTPUTS, sess.run(list(SEQ_OUTPUTS), r)))


def check_result(tally: Tally, r: dict, out: dict, i: int, ort) -> bool:
    exp = seq_expected(r)
    if not all(np.array_equal(out[k], exp[k]) for k in SEQ_OUTPUTS):
        tally.problem(f"request {i}: wrong result")
        return False
    if i % 100 == 0:
        ref = ort(r)
        if not all(np.allclose(out[k], ref[k], rtol=1e-5, atol=1e-6) for k in SEQ_OUTPUTS):
            tally.problem(f"request {i}: differs from ONNX Runtime")
            return False
        with tally.lock:
            tally.ort_checked += 1
    return True


def soak_triton(args) -> dict:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype

    from gert_triton.repo import init_repo
    from gert_triton.server import TritonServer

    root = tempfile.mkdtemp(prefix="gert-soak-")
    onnx = os.path.join(root, "seq.onnx")
    with open(onnx, "wb") as f:
        f.write(seq_model())
    repo = os.path.join(root, "repo")
    # max_batch_size 0: Triton never merges requests, so one request is one kernel launch and one injected fault
    # fails exactly one request (in a merged batch it would fail all of the batch's requests)
    init_repo(onnx, repo, name="seq", max_batch_size=0, parameters={"streams": "1"})
    env_before = os.environ.get("GERT_HOST_FAULTS")
    os.environ["GERT_HOST_FAULTS"] = f"execute:after={args.fault_every - 1}:every={args.fault_every}:count=1000000000"
    srv = TritonServer(
        repo,
        log_path=os.path.join(root, "server.log"),
        extra_args=["--model-control-mode=explicit", "--load-model=seq", "--exit-timeout-secs=5"],
    )
    try:
        srv.start()
        srv.wait_ready(120)
    finally:
        if env_before is None:
            os.environ.pop("GERT_HOST_FAULTS", None)
        else:
            os.environ["GERT_HOST_FAULTS"] = env_before
    tally, ort = Tally(), ort_reference()
    try:
        clients = [grpcclient.InferenceServerClient(srv.url("grpc")) for _ in range(args.clients)]

        def inputs(arrays: dict) -> list:
            out = []
            for k, v in arrays.items():
                i = grpcclient.InferInput(k, list(v.shape), np_to_triton_dtype(v.dtype))
                i.set_data_from_numpy(v)
                out.append(i)
            return out

        def one(c: int, i: int) -> None:
            r = seq_inputs(1 + i % 3, 3 + i % 5, i % 60000)  # uid < 2**16: float32 stays float32 in NumPy 1.x
            bad = i % args.bad_every == args.bad_every - 1
            if bad:
                r = dict(r, a=r["a"].astype(np.float64))
            try:
                res = clients[c].infer("seq", inputs(r), client_timeout=60)
            except InferenceServerException as e:
                status, msg = str(e.status()), e.message() or ""
                if bad and status == "StatusCode.INVALID_ARGUMENT":
                    tally.count("bad_rejected")
                elif bad or status != "StatusCode.INTERNAL" or not tally.fault(msg):
                    tally.problem(f"request {i}: {status} {msg[:200]}")
                return
            if bad:
                tally.problem(f"request {i}: a bad request was served")
            elif check_result(tally, r, {k: res.as_numpy(k) for k in SEQ_OUTPUTS}, i, ort):
                tally.count("ok")

        warm = run_clients(args.clients, time.monotonic() + args.warmup, 10**9, one, Tally())
        stub = [p for p in _children(srv.process.pid) if _is_stub(p)]
        before = proc_resources(stub[0])
        tally = Tally()  # count from here on
        t0 = time.monotonic()
        sent = run_clients(args.clients, t0 + args.duration, args.requests, one, tally)
        seconds = time.monotonic() - t0
        after = settled_resources(stub[0], before)
        for c in clients:
            c.close()
        out = tally.summary(seconds, sent, args.fault_every)
        out.update(warmup_requests=warm, stub_before=before, stub_after=after, stub_flat=flat(before, after))
        return out
    finally:
        srv.stop(timeout=20)


def _children(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _is_stub(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"/seq/1/model.py" in f.read()
    except OSError:
        return False


def soak_model(args) -> dict:
    import gert

    # one request per execute: the soak's accounting is one failed request per fired fault (numbered and contiguous);
    # with in-process batching a fault of a merged batch is retried request by request (tests/test_inproc_batching.py
    # covers that), so the client threads' requests are not merged here
    model = gert.load(
        seq_model(),
        streams=2,
        gears={"batch": [1, 2, 4], "S": [4, 8]},
        shape_policy={"S": "pad"},
        dynamic_batching=False,
    )
    model.warmup()
    tally, ort = Tally(), ort_reference()

    def one(c: int, i: int) -> None:
        r = seq_inputs(1 + i % 3, 3 + i % 5, i % 60000)  # uid < 2**16: float32 stays float32 in NumPy 1.x
        bad = i % args.bad_every == args.bad_every - 1
        if bad:
            r = dict(r, a=r["a"][..., :3].copy())  # a wrong fixed dim
        try:
            out = model.run(r)
        except gert.AclError as e:
            if bad or not tally.fault(str(e)):
                tally.problem(f"request {i}: {e}")
            return
        except gert.GertError as e:
            if bad and "'a'" in str(e):
                tally.count("bad_rejected")
            else:
                tally.problem(f"request {i}: {e}")
            return
        if bad:
            tally.problem(f"request {i}: a bad request was served")
        elif check_result(tally, r, out, i, ort):
            tally.count("ok")

    try:
        warm = run_clients(args.clients, time.monotonic() + args.warmup, 10**9, one, Tally())
        gert.inject_fault("execute", every=args.fault_every, after=args.fault_every - 1, count=10**9)
        tally = Tally()  # count from here on
        fired0 = gert.host_counters()["faults"]["execute"]
        before = proc_resources(os.getpid())
        t0 = time.monotonic()
        sent = run_clients(args.clients, t0 + args.duration, args.requests, one, tally)
        seconds = time.monotonic() - t0
        after = settled_resources(os.getpid(), before)
        gert.clear_faults()
        out = tally.summary(seconds, sent, args.fault_every)
        out["faults_fired"] = gert.host_counters()["faults"]["execute"] - fired0  # the host NPU's count
        st = model.stats()
        out.update(
            warmup_requests=warm,
            process_before=before,
            process_after=after,
            process_flat=flat(before, after),
            failed_tasks=st["failed_tasks"],
            recoveries=st["recoveries"],
        )
        return out
    finally:
        model.close()


def passed(part: dict, fault_every: int) -> bool:
    """No wrong or unexplained answer; each fault failed one request, one launch in ``fault_every`` failed (+-2),
    every bad request was refused; resources flat."""
    flat_key = "stub_flat" if "stub_flat" in part else "process_flat"
    launches = part["ok"] + part["faulted"]
    return (
        not part["problems"]
        and part["fault_numbers_distinct_contiguous"]
        and part["faulted"] > 0
        and abs(part["faulted"] - launches / fault_every) <= 2
        and part["ok"] + part["faulted"] + part["bad_rejected"] == part["requests"]
        and part.get("faults_fired", part["faulted"]) == part["faulted"]
        and part["bad_rejected"] > 0
        and all(part[flat_key].values())
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=200_000, help="requests per part (at most)")
    p.add_argument("--duration", type=float, default=600.0, help="seconds per part (at most)")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of traffic before the resources are measured")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--fault-every", type=int, default=100, help="an injected execute fault every N launches (1%%)")
    p.add_argument("--bad-every", type=int, default=100, help="every N-th request of the stream is malformed (1%%)")
    p.add_argument("--parts", default="triton,model")
    p.add_argument("--short", action="store_true", help="a few seconds per part (CI)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    if args.short:
        args.duration, args.warmup, args.requests = 6.0, 2.0, min(args.requests, 20_000)
        args.fault_every = args.bad_every = 20  # enough of both in a few seconds
    results = {"machine": machine(), "args": vars(args)}
    parts = {"triton": soak_triton, "model": soak_model}
    for name in args.parts.split(","):
        results[name] = parts[name](args)
        results[name]["passed"] = passed(results[name], args.fault_every)
        print(name, json.dumps(results[name], indent=1), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(results[n]["passed"] for n in args.parts.split(",")) else 1


if __name__ == "__main__":
    sys.exit(main())
