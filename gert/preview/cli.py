"""``gert check MODEL.onnx [--json] [--fix OUT.onnx]`` and ``gert precision MODEL.onnx ...`` (added to gert.tools.cli).

Exit codes of ``gert check``: 0 when a stock CANN 8.x ONNX parser would parse the model (after --fix: the written
model), 1 when it would refuse it (E13010), 2 for bad arguments or an unreadable model.
"""
from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np


def info_lines() -> list:
    """`gert info`'s lines on the NPU preview: the precision mode a load gets by default, the CANN op check mode."""
    from gert.preview import cann_ops, precision

    mode = os.environ.get(cann_ops.ENV) or "warn"
    table = cann_ops.table()
    return [f"precision mode: {precision.DEFAULT_MODE} (host NPU default: results equal ONNX Runtime's; "
            f"gert.load(precision_mode=...) emulates GE's modes)",
            f"CANN op check: cann_ops={mode} (GERT_CANN_OPS), table of {table.date}"]


def _read(path: str):
    from gert.tools.usage import UsageError
    from gert.preview.cann_ops import load_proto

    try:
        return load_proto(path)
    except Exception as e:  # noqa: BLE001 - onnx raises DecodeError, OSError, ...
        raise UsageError(f"gert: cannot read ONNX model {path!r}: {e}") from None


def cmd_check(args) -> int:
    from gert.preview import cann_ops, fix as fixer

    proto = _read(args.model)
    report = cann_ops.check_proto(proto)
    out: dict = {"model": args.model, "report": report.to_dict()}
    final = report
    if not args.json:
        print(report)
    if args.fix:
        result = fixer.fix(proto)
        out["fix"] = {"target_opset": result.target, "written": None, "max_abs_diff": result.max_abs_diff,
                      "error": result.error}
        if result.written:
            with open(args.fix, "wb") as f:
                f.write(result.model)
            out["fix"]["written"] = args.fix
            out["fix"]["report"] = result.report.to_dict()
            final = result.report
            if not args.json:
                diffs = ", ".join(f"{k} {v:.3g}" for k, v in result.max_abs_diff.items())
                print(f"\nfix: converted opset {report.opsets.get('ai.onnx')} -> {result.target} with ONNX's "
                      f"version_converter; ONNX Runtime on random inputs, max |d| per output: {diffs}; wrote "
                      f"{args.fix}")
                print(result.report)
                if not result.report.ok:
                    print("fix: could not fix the nodes still listed (no opset maps them; see the suggestions)")
        elif not args.json:
            print(f"\nfix: nothing written: {result.error}")
    if args.json:
        print(json.dumps(out, indent=2))
    elif not final.ok:
        print(f"\nE13010: a stock CANN 8.x ONNX parser would refuse this model ({len(final.unsupported)} node(s))",
              file=sys.stderr)
    return 0 if final.ok else 1


def _inputs(items) -> dict:
    from gert.tools.usage import UsageError

    out = {}
    for item in items or []:
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise UsageError(f"gert precision: --input {item!r} is not NAME=file.npy")
        try:
            out[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise UsageError(f"gert precision: --input {name}: cannot read {path!r}: {e}") from None
    return out


def cmd_precision(args) -> int:
    from gert.tools.usage import UsageError
    from gert.errors import GertError
    from gert.preview import compare

    proto = _read(args.model)
    feeds = _inputs(args.input)
    modes = [m.strip() for m in (args.modes or ",".join(compare.DEFAULT_MODES)).split(",") if m.strip()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", compare.RandomInputsWarning)
        try:
            table = compare.compare_precision(proto, feeds, modes)
        except GertError as e:
            raise UsageError(f"gert precision: {e}") from None
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    print(table)
    if args.plot:
        table.plot(args.plot)
        print(f"wrote {args.plot}")
    if args.keep_fp32_out:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", compare.RandomInputsWarning)
            result = compare.find_keep_fp32(proto, feeds, args.precision_mode, args.min_cosine)
        with open(args.keep_fp32_out, "w") as f:
            f.write(result.keep_dtype_file())
        print(result)
        print(f"wrote {args.keep_fp32_out} (ATC --keep_dtype format)")
        return 0 if result.met else 1
    return 0


def add_commands(sub) -> None:
    """Add ``check`` and ``precision`` to gert's subcommands."""
    c = sub.add_parser("check", help="would a stock CANN 8.x ONNX parser take MODEL.onnx? (exit 0 yes, 1 no)")
    c.add_argument("model")
    c.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    c.add_argument("--fix", metavar="OUT.onnx", help="convert a model above opset 18 down to the highest opset where "
                   "its ops map (ONNX's version_converter), verify it on ONNX Runtime, write it and check it again")
    c.set_defaults(func=cmd_check)
    p = sub.add_parser("precision", help="each GE precision mode's outputs against fp32 (emulated)")
    p.add_argument("model")
    p.add_argument("--input", action="append", help="NAME=file.npy (default: random values, with a warning)")
    p.add_argument("--modes", help="comma-separated precision modes (default: force_fp16, allow_mix_precision, "
                   "allow_fp32_to_fp16, must_keep_origin_dtype)")
    p.add_argument("--plot", metavar="OUT.png", help="a chart of 1 - cosine per mode and output (needs matplotlib)")
    p.add_argument("--keep-fp32-out", metavar="keep.txt", help="find nodes to keep in fp32 and write them in ATC's "
                   "--keep_dtype format")
    p.add_argument("--precision-mode", default="force_fp16", help="the mode --keep-fp32-out searches under")
    p.add_argument("--min-cosine", type=float, default=0.999)
    p.set_defaults(func=cmd_precision)
