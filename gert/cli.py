"""The gert command: ``gert info``, ``gert bench MODEL.onnx``, ``gert serve REPO``, ``gert repo init MODEL.onnx REPO``."""
from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Optional, Sequence

ENV_SETTINGS = ("GERT_BACKEND", "GERT_HOST_DEVICES", "GERT_HOST_DEVICE_MEMORY", "GERT_HOST_CUBE_CORES",
                "GERT_HOST_VECTOR_CORES", "GERT_HOST_SPIN_US", "GERT_TRITONSERVER", "GERT_CACHE_DIR",
                "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")


class UsageError(Exception):
    """Bad arguments: one line on stderr, exit code 2."""


def _version(pkg: str) -> Optional[str]:
    try:
        from importlib.metadata import version

        return version(pkg)
    except Exception:
        return None


# What a toolkit says about its version (CANN 8.5: version.info; older ones: <arch>-linux/ascend_toolkit_install.info)
_VERSION_FILES = ("version.info", "version.cfg", "ascend_toolkit_install.info")
_HOSTNPU_MARKER = "gert_hostnpu.info"  # written by cbindings/hostnpu/build_toolkit.py (setup.py reads it too)


def _toolkit_version(root: str) -> Optional[str]:
    for name in _VERSION_FILES:
        path = os.path.join(root, name)
        if os.path.isfile(path):
            with open(path, errors="replace") as f:
                for line in f:
                    key, sep, value = line.strip().partition("=")
                    if sep and key.strip().lower() == "version":
                        return f"{value.strip()} ({path})"
            return f"? ({path} has no Version= line)"
    return None


def _toolkit_line(root: str, host_features: bool) -> str:
    """Which toolkit gert was built against: its path, its version file, and whether it is the host NPU."""
    if not root:
        return "none: the host NPU is built into gert._cann"
    version = _toolkit_version(root) or "no version file"
    if os.path.isfile(os.path.join(root, _HOSTNPU_MARKER)):
        kind = "the host NPU packaged as a toolkit" + ("" if host_features else " (gert._hostnpu missing)")
    else:
        kind = "CANN" + (" (host NPU features present)" if host_features else "")
    return f"{root}, version {version}; {kind}"


def cmd_info(args) -> int:
    import gert
    from gert import _cann

    print(f"gert {gert.__version__}  backend: {gert.backend()}")
    print("toolkit: " + _toolkit_line(_cann.toolkit_root(), gert.hostnpu.available()))
    versions = {"python": platform.python_version(), "numpy": _version("numpy"), "onnxruntime": _version("onnxruntime")}
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    n = gert.device_count()
    print(f"devices: {n}")
    for d in range(n):
        cube = _cann.get_device_info(d, _cann.DEV_ATTR_CUBE_CORE_NUM)
        vec = _cann.get_device_info(d, _cann.DEV_ATTR_VECTOR_CORE_NUM)
        mem = gert.memory_info(d)
        print(f"  device {d}: {cube} cube cores, {vec} vector cores, memory {mem.total / 2**30:.1f} GiB "
              f"({mem.free / 2**30:.1f} GiB free)")
    settings = {k: os.environ[k] for k in ENV_SETTINGS if k in os.environ}
    print("settings: " + (", ".join(f"{k}={v}" for k, v in settings.items()) or "(none set; defaults)"))
    return 0


def cmd_bench(args) -> int:
    from gert.bench import BenchArgError, main as bench_main

    try:
        return bench_main(args)
    except BenchArgError as e:
        raise UsageError(f"gert bench: {e}") from None


def cmd_serve(args) -> int:
    from gert_triton.server import serve

    if not os.path.isdir(args.repo):
        raise UsageError(f"gert serve: model repository {args.repo!r} is not a directory")
    return serve(args.repo, args.http_port, args.grpc_port, args.metrics_port, args.tritonserver, args.server_args,
                 address=args.address)


def cmd_repo_init(args) -> int:
    from gert_triton.config import parse_parameters
    from gert_triton.repo import init_repo

    if not os.path.isfile(args.model):
        raise UsageError(f"gert repo init: {args.model!r} is not a file")
    params = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"gert repo init: --param {item!r} is not KEY=VALUE")
        params[key.strip()] = value
    parse_parameters(params)  # an unknown key or a bad value fails here, naming the key, not at model load
    sequence = None
    if args.state:
        state = {}
        for item in args.state:
            i, sep, o = item.partition("=")
            if not sep or not i.strip() or not o.strip():
                raise UsageError(f"gert repo init: --state {item!r} is not INPUT=OUTPUT (e.g. h=h_out)")
            state[i.strip()] = o.strip()
        from gert_triton.config import parse_batch_dim

        sequence = {"state": state, "strategy": args.sequence_strategy, "idle_us": args.max_sequence_idle_us,
                    "batch_dim": parse_batch_dim(args.batch_dim) if args.batch_dim else None}
    elif args.batch_dim:
        params["batch_dim"] = args.batch_dim
    target = init_repo(args.model, args.repo, args.name, args.max_batch_size, parameters=params,
                       overwrite=args.force, instances=args.instances, sequence=sequence, pre=args.pre, post=args.post)
    print(f"wrote {target}/config.pbtxt, {target}/1/model.onnx and {target}/1/model.py"
          + (f", and the ensemble {target}_ensemble around it ("
             + " and ".join(f"{target}_{k}" for k in ("pre", "post") if getattr(args, k)) + ")"
             if args.pre or args.post else "")
          + f"; serve it with: gert serve {args.repo}")
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gert", description="gert: ONNX models on Ascend NPUs (or the host NPU) via CANN GE")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("info", help="backend, devices, versions and settings").set_defaults(func=cmd_info)
    b = sub.add_parser("bench", help="sweep streams, core locks, batch and gears on an ONNX model")
    b.add_argument("model")
    b.add_argument("--streams", default="1", help="e.g. 1,2,4")
    b.add_argument("--cube-cores", help="e.g. 1,2 (default: no core lock)")
    b.add_argument("--vector-cores")
    b.add_argument("--batch", help="batch sizes, e.g. 1,8 (models with a batch axis)")
    b.add_argument("--shape", action="append", help="NAME=1x3x48x320: the shape of an input with dynamic dims")
    b.add_argument("--gears", action="append", help="e.g. batch:1,4,8;W:160,320")
    b.add_argument("--shape-policy", action="append", help="e.g. W:pad")
    b.add_argument("--devices", help="e.g. 0,1")
    b.add_argument("--concurrency", type=int, default=4, help="client threads (default 4)")
    b.add_argument("--duration", type=float, help="seconds per configuration (default 10)")
    b.add_argument("--iterations", type=int, help="requests per configuration, instead of --duration")
    b.add_argument("--warmup", type=int, default=3, help="warm-up requests per stream")
    b.add_argument("--input", action="append", help="NAME=file.npy: use this array instead of random data")
    b.add_argument("--cache-dir", help="GE compile cache: per configuration a cold load into an empty subdirectory "
                   "of this, then the measured load warm from it; reports compile seconds cold/warm")
    b.add_argument("--latency-budgets", help="p99 budgets in ms to mark the best configuration under, e.g. 10,50")
    b.add_argument("--json")
    b.add_argument("--csv")
    b.add_argument("--plot", help="PNG of throughput against p99 latency (needs matplotlib)")
    b.set_defaults(func=cmd_bench)
    s = sub.add_parser("serve", help="run tritonserver for a model repository",
                       usage="gert serve REPO [options] [-- TRITONSERVER_ARGS...]",
                       description="Run tritonserver for REPO; arguments after -- go to tritonserver as they are.")
    s.add_argument("repo")
    s.add_argument("--address", default="127.0.0.1",
                   help="address the HTTP, gRPC and metrics endpoints listen on (default 127.0.0.1, loopback only; "
                        "0.0.0.0 in a container)")
    s.add_argument("--http-port", type=int, default=8000)
    s.add_argument("--grpc-port", type=int, default=8001)
    s.add_argument("--metrics-port", type=int, default=8002)
    s.add_argument("--tritonserver", help="path of the tritonserver binary (default: the nvidia-pytriton wheel's)")
    # tritonserver's own arguments come after `--` (split off in main): an argparse.REMAINDER positional after REPO
    # would also swallow gert's options written after REPO (`gert serve REPO --http-port 9000`)
    s.set_defaults(func=cmd_serve, server_args=[])
    r = sub.add_parser("repo", help="model repository tools")
    rsub = r.add_subparsers(dest="repo_command", required=True, parser_class=_Parser)
    ri = rsub.add_parser("init", help="write a model repository entry that serves MODEL.onnx with gert")
    ri.add_argument("model")
    ri.add_argument("repo")
    ri.add_argument("--name")
    ri.add_argument("--max-batch-size", type=int)
    ri.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="a gert_triton config parameter, e.g. streams=1 or gears=batch:1,4,8 (repeatable)")
    ri.add_argument("--instances", type=int, default=1, help="instance_group count (default 1)")
    ri.add_argument("--force", action="store_true", help="overwrite an existing entry")
    ri.add_argument("--state", action="append", default=[], metavar="INPUT=OUTPUT",
                    help="a stateful model: the state input fed by OUTPUT at the next step, kept on the device per "
                         "sequence (repeatable); writes a sequence_batching block")
    ri.add_argument("--batch-dim", help="the batch axis where it is not axis 0: a dim name (N) or axes (x:1,h:1)")
    ri.add_argument("--sequence-strategy", choices=("oldest", "direct"), default="oldest")
    ri.add_argument("--max-sequence-idle-us", type=int, default=5_000_000,
                    help="an idle sequence's state is dropped after this long (default 5 s)")
    ri.add_argument("--pre", metavar="MODULE:FUNCTION",
                    help="also write NAME_pre (a Python model running this step function before the model) and the "
                         "ensemble NAME_ensemble; FILE.py:FUNCTION copies the file into the step's model")
    ri.add_argument("--post", metavar="MODULE:FUNCTION",
                    help="also write NAME_post (a Python model running this step function on the model's outputs) "
                         "and the ensemble NAME_ensemble")
    ri.set_defaults(func=cmd_repo_init)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    from gert.errors import GertError

    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        extra: list = []
        if "--" in argv and "serve" in argv[:argv.index("--")]:
            argv, extra = argv[:argv.index("--")], argv[argv.index("--") + 1:]
        args = build_parser().parse_args(argv)
        if args.command == "serve":
            args.server_args = extra
        return args.func(args)
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return 2
    except GertError as e:
        print(f"gert: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"gert: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
