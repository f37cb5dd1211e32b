"""The gert command: ``gert info``, ``gert bench MODEL.onnx``, ``gert check MODEL.onnx``, ``gert precision
MODEL.onnx`` (the last two: gert/preview/cli.py); ``gert serve REPO`` and ``gert repo init MODEL.onnx REPO`` come
from gert_triton (gert_triton/cli.py) through the entry point group ``gert.commands``."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Mapping, Sequence

from gert.tools.usage import UsageError  # raised here and by the commands it loads

ENV_SETTINGS = (
    "GERT_BACKEND",
    "GERT_HOST_DEVICES",
    "GERT_HOST_DEVICE_MEMORY",
    "GERT_HOST_CUBE_CORES",
    "GERT_HOST_VECTOR_CORES",
    "GERT_HOST_SPIN_US",
    "GERT_HOST_INLINE_LAUNCH",
    "GERT_HOST_SHARED_CORES",
    "GERT_TRITONSERVER",
    "GERT_CACHE_DIR",
    "GERT_CANN_OPS",
    "ASCEND_HOME_PATH",
    "ASCEND_TOOLKIT_HOME",
)


COMMANDS_GROUP = "gert.commands"  # entry points adding commands (gert_triton: serve, repo init)


def _version(pkg: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(pkg)
    except Exception:  # noqa: BLE001 - gert info prints what it can, whatever a package's metadata holds
        return None


# What a toolkit says about its version (CANN 8.5: version.info; older ones: <arch>-linux/ascend_toolkit_install.info)
_VERSION_FILES = ("version.info", "version.cfg", "ascend_toolkit_install.info")
_HOSTNPU_MARKER = "gert_hostnpu.info"  # written by cbindings/hostnpu/build_toolkit.py (setup.py reads it too)


def _toolkit_version(root: str) -> str | None:
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
        print(
            f"  device {d}: {cube} cube cores, {vec} vector cores, memory {mem.total / 2**30:.1f} GiB "
            f"({mem.free / 2**30:.1f} GiB free)"
        )
    settings = {k: os.environ[k] for k in ENV_SETTINGS if k in os.environ}
    print("settings: " + (", ".join(f"{k}={v}" for k, v in settings.items()) or "(none set; defaults)"))
    from gert.preview.cli import info_lines

    for line in info_lines():
        print(line)
    return 0


def cmd_bench(args) -> int:
    from gert.tools.bench import BenchArgError, main as bench_main

    try:
        return bench_main(args)
    except BenchArgError as e:
        raise UsageError(f"gert bench: {e}") from None


def _plugin_commands() -> list:
    """The entry points of the group ``gert.commands``: each a function ``add(subparsers)`` adding one command."""
    from importlib.metadata import entry_points

    found = entry_points()
    group = found.select(group=COMMANDS_GROUP) if hasattr(found, "select") else found.get(COMMANDS_GROUP, [])
    return sorted(group, key=lambda e: e.name)


def _passes_through(commands: Mapping[str, argparse.ArgumentParser], head: list) -> bool:
    """Whether the command in ``head`` (the arguments before ``--``) takes the rest for another program: its parser
    has a ``passthrough_args`` default (gert serve: tritonserver's arguments)."""
    for word in head:
        command = commands.get(word)
        if command is not None:
            return command.get_default("passthrough_args") is not None
    return False


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def _build() -> tuple:
    """The parser and its commands' parsers by name."""
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
    b.add_argument(
        "--cache-dir",
        help="GE compile cache: per configuration a cold load into an empty subdirectory "
        "of this, then the measured load warm from it; reports compile seconds cold/warm",
    )
    b.add_argument("--latency-budgets", help="p99 budgets in ms to mark the best configuration under, e.g. 10,50")
    b.add_argument(
        "--precision-mode",
        help="GE precision mode (force_fp16, allow_fp32_to_fp16, fp16, origin, ...), "
        "emulated on the host NPU (default must_keep_origin_dtype)",
    )
    b.add_argument("--json")
    b.add_argument("--csv")
    b.add_argument("--plot", help="PNG of throughput against p99 latency (needs matplotlib)")
    b.add_argument("--trace", help="trace-event JSON (Perfetto, chrome://tracing) of the best configuration")
    b.add_argument("--trace-all", help="a directory: the trace of every configuration")
    b.add_argument("--timeline", help="PNG: each configuration's streams over time, best first (needs matplotlib)")
    b.add_argument("--timeline-ms", type=float, default=200.0, help="the window of steady state shown (default 200)")
    b.set_defaults(func=cmd_bench)
    from gert.preview.cli import add_commands  # gert check, gert precision

    add_commands(sub)
    for command in _plugin_commands():  # gert serve, gert repo init: gert_triton's (pyproject.toml)
        command.load()(sub)
    return p, sub.choices


def main(argv: Sequence[str] | None = None) -> int:
    from gert.errors import GertError

    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        parser, commands = _build()
        extra = None
        if "--" in argv and _passes_through(commands, argv[: argv.index("--")]):
            argv, extra = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
        args = parser.parse_args(argv)
        if extra is not None:
            args.passthrough_args = extra
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
