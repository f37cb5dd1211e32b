"""``gert serve`` and ``gert repo init``: gert_triton's commands, which the ``gert`` command finds through the entry
point group ``gert.commands`` (pyproject.toml), so that gert never imports gert_triton (docs/architecture.md).

Each entry point is a function ``add(sub)`` (``sub``: the parser's subparsers, from ``add_subparsers``) that adds
its command's parser and sets ``func``; a command that
takes arguments for another program after ``--`` sets ``passthrough_args`` (they arrive in ``args.passthrough_args``).
Loading this module imports nothing heavy: the commands import the server and the repository writer when they run.
"""

from __future__ import annotations

import os

from gert.tools.usage import UsageError
from gert_triton.serve_policy import DRAIN_TIMEOUT_S


def cmd_serve(args) -> int:
    from gert_triton.serve_policy import Policy
    from gert_triton.supervisor import run_supervised

    if not os.path.isdir(args.repo):
        raise UsageError(f"gert serve: model repository {args.repo!r} is not a directory")
    if args.trace:  # every model instance writes its trace there (gert_triton/tracing.py)
        os.makedirs(args.trace, exist_ok=True)
        os.environ["GERT_TRACE"] = os.path.abspath(args.trace)
    for name in ("replica", "max_restarts", "max_reloads", "drain_timeout"):
        if getattr(args, name) < 0:
            raise UsageError(f"gert serve: --{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.drain_delay < 0:
        raise UsageError(f"gert serve: --drain-delay must be >= 0, got {args.drain_delay}")
    policy = Policy(
        max_restarts=args.max_restarts,
        max_reloads=args.max_reloads,
        drain_delay_s=args.drain_delay,
        drain_timeout_s=args.drain_timeout,
    )
    return run_supervised(
        args.repo,
        (args.http_port, args.grpc_port, args.metrics_port),
        args.tritonserver,
        args.passthrough_args,
        args.address,
        args.health_port,
        args.replica,
        policy,
    )


def _parse_params(items: list) -> dict:
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"gert repo init: --param {item!r} is not KEY=VALUE")
        params[key.strip()] = value
    return params


def _parse_state(items: list) -> dict:
    state = {}
    for item in items:
        i, sep, o = item.partition("=")
        if not sep or not i.strip() or not o.strip():
            raise UsageError(f"gert repo init: --state {item!r} is not INPUT=OUTPUT (e.g. h=h_out)")
        state[i.strip()] = o.strip()
    return state


def cmd_repo_init(args) -> int:
    from gert_triton.config import parse_batch_dim, parse_parameters
    from gert_triton.repo import init_repo

    if not os.path.isfile(args.model):
        raise UsageError(f"gert repo init: {args.model!r} is not a file")
    params = _parse_params(args.param)
    parse_parameters(params)  # an unknown key or a bad value fails here, naming the key, not at model load
    sequence = None
    if args.state:
        sequence = {
            "state": _parse_state(args.state),
            "strategy": args.sequence_strategy,
            "idle_us": args.max_sequence_idle_us,
            "batch_dim": parse_batch_dim(args.batch_dim) if args.batch_dim else None,
        }
    elif args.batch_dim:
        params["batch_dim"] = args.batch_dim
    target = init_repo(
        args.model,
        args.repo,
        args.name,
        args.max_batch_size,
        parameters=params,
        overwrite=args.force,
        instances=args.instances,
        sequence=sequence,
        pre=args.pre,
        post=args.post,
    )
    print(
        f"wrote {target}/config.pbtxt, {target}/1/model.onnx and {target}/1/model.py"
        + (
            f", and the ensemble {target}_ensemble around it ("
            + " and ".join(f"{target}_{k}" for k in ("pre", "post") if getattr(args, k))
            + ")"
            if args.pre or args.post
            else ""
        )
        + f"; serve it with: gert serve {args.repo}"
    )
    return 0


def add_serve(sub) -> None:
    """``gert serve REPO [options] [-- TRITONSERVER_ARGS...]``."""
    s = sub.add_parser(
        "serve",
        help="run tritonserver for a model repository",
        usage="gert serve REPO [options] [-- TRITONSERVER_ARGS...]",
        description="Run tritonserver for REPO under gert's supervision: an abnormal exit is "
        "restarted, a model whose Python stub died is reloaded, readiness on "
        "--health-port tells the truth, SIGTERM drains. Arguments after -- go to "
        "tritonserver as they are (your own --model-control-mode is respected).",
    )
    s.add_argument("repo")
    s.add_argument(
        "--address",
        default="127.0.0.1",
        help="address the HTTP, gRPC and metrics endpoints listen on (default 127.0.0.1, loopback only; "
        "0.0.0.0 in a container)",
    )
    s.add_argument("--http-port", type=int, help="default 8000 (+ 10 per --replica)")
    s.add_argument("--grpc-port", type=int, help="default 8001 (+ 10 per --replica)")
    s.add_argument("--metrics-port", type=int, help="default 8002 (+ 10 per --replica)")
    s.add_argument(
        "--health-port",
        type=int,
        help="gert serve's own /healthz, /readyz, /readyz/MODEL and /metrics (restarts, reloads), on "
        "--address (default: the metrics port + 1, 8003; 0: none)",
    )
    s.add_argument(
        "--replica",
        type=int,
        default=0,
        metavar="N",
        help="the Nth server on this host: default ports shifted by 10 * N (own shared-memory names "
        "are the default for every server)",
    )
    s.add_argument(
        "--max-restarts",
        type=int,
        default=5,
        help="tritonserver exiting abnormally is started again, at most this often in 10 minutes (default 5; 0: never)",
    )
    s.add_argument(
        "--max-reloads",
        type=int,
        default=5,
        help="a model whose Python stub died is reloaded, at most this often in 10 minutes (default 5)",
    )
    s.add_argument(
        "--drain-delay",
        type=float,
        default=0.0,
        metavar="S",
        help="on SIGTERM, readiness says 503 this long before tritonserver stops taking requests "
        "(time for a load balancer to notice; default 0)",
    )
    s.add_argument(
        "--drain-timeout",
        type=int,
        default=DRAIN_TIMEOUT_S,
        metavar="S",
        help="on SIGTERM, requests in flight get this long to finish and models to unload (tritonserver's "
        "--exit-timeout-secs unless given after --; default 30, as tritonserver's)",
    )
    s.add_argument("--tritonserver", help="path of the tritonserver binary (default: the nvidia-pytriton wheel's)")
    s.add_argument(
        "--trace",
        metavar="DIR",
        help="every model instance writes a Chrome trace-event JSON of its "
        "requests into DIR when it unloads (GERT_TRACE; open in ui.perfetto.dev)",
    )
    # tritonserver's own arguments come after `--` (split off by gert's main): an argparse.REMAINDER positional after
    # REPO would also swallow gert's options written after REPO (`gert serve REPO --http-port 9000`)
    s.set_defaults(func=cmd_serve, passthrough_args=[])


def add_repo(sub) -> None:
    """``gert repo init MODEL.onnx REPO [options]``."""
    r = sub.add_parser("repo", help="model repository tools")
    rsub = r.add_subparsers(dest="repo_command", required=True, parser_class=type(r))
    ri = rsub.add_parser("init", help="write a model repository entry that serves MODEL.onnx with gert")
    ri.add_argument("model")
    ri.add_argument("repo")
    ri.add_argument("--name")
    ri.add_argument("--max-batch-size", type=int)
    ri.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a gert_triton config parameter, e.g. streams=1 or gears=batch:1,4,8 (repeatable)",
    )
    ri.add_argument("--instances", type=int, default=1, help="instance_group count (default 1)")
    ri.add_argument("--force", action="store_true", help="overwrite an existing entry")
    ri.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="INPUT=OUTPUT",
        help="a stateful model: the state input fed by OUTPUT at the next step, kept on the device per "
        "sequence (repeatable); writes a sequence_batching block",
    )
    ri.add_argument("--batch-dim", help="the batch axis where it is not axis 0: a dim name (N) or axes (x:1,h:1)")
    ri.add_argument("--sequence-strategy", choices=("oldest", "direct"), default="oldest")
    ri.add_argument(
        "--max-sequence-idle-us",
        type=int,
        default=5_000_000,
        help="an idle sequence's state is dropped after this long (default 5 s)",
    )
    ri.add_argument(
        "--pre",
        metavar="MODULE:FUNCTION",
        help="also write NAME_pre (a Python model running this step function before the model) and the "
        "ensemble NAME_ensemble; FILE.py:FUNCTION copies the file into the step's model",
    )
    ri.add_argument(
        "--post",
        metavar="MODULE:FUNCTION",
        help="also write NAME_post (a Python model running this step function on the model's outputs) "
        "and the ensemble NAME_ensemble",
    )
    ri.set_defaults(func=cmd_repo_init)
