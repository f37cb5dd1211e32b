"""``gert check MODEL.onnx [--json] [--fix OUT.onnx [--input NAME=FILE.npy] [--shape NAME=DxD...]]`` and
``gert precision MODEL.onnx ...`` (added to gert.tools.cli).

Exit codes of ``gert check``: 0 when a stock CANN 8.x ONNX parser would parse the model (after --fix: the written
model), 1 when it would refuse it (E13010), 2 for bad arguments or an unreadable model.
"""

from __future__ import annotations

import json
import os
import sys
import warnings


def info_lines() -> list:
    """`gert info`'s lines on the NPU preview: the precision mode a load gets by default, the CANN op check mode."""
    from gert.preview import cann_ops, precision

    mode = os.environ.get(cann_ops.ENV) or "warn"
    table = cann_ops.table()
    return [
        f"precision mode: {precision.DEFAULT_MODE} (host NPU default: results equal ONNX Runtime's; "
        f"gert.load(precision_mode=...) emulates GE's modes)",
        f"CANN op check: cann_ops={mode} (GERT_CANN_OPS), table of {table.date}",
    ]


def _read(path: str):
    from gert.preview.cann_ops import load_proto
    from gert.tools.usage import UsageError

    try:
        return load_proto(path)
    except Exception as e:  # noqa: BLE001 - onnx raises DecodeError, OSError, ...
        raise UsageError(f"gert: cannot read ONNX model {path!r}: {e}") from None


def cmd_check(args) -> int:
    from gert.errors import GertError
    from gert.preview import cann_ops, fix as fixer
    from gert.tools.input_options import input_files, input_shapes
    from gert.tools.usage import UsageError

    files, shapes = input_files(args.input, "gert check"), input_shapes(args.shape, "gert check")
    if (files or shapes) and not args.fix:
        raise UsageError("gert check: --input and --shape feed the comparison of --fix OUT.onnx; give --fix")
    proto = _read(args.model)
    report = cann_ops.check_proto(proto)
    out: dict = {"model": args.model, "report": report.to_dict()}
    final = report
    result = None
    if args.fix:  # first: an input given that does not fit the model is a usage error, before any report
        try:
            result = fixer.fix(proto, inputs=files, shapes=shapes, hint=lambda i: i.cli_hint())
        except GertError as e:
            raise UsageError(f"gert check: {e}") from None
    if not args.json:
        print(report)
    if result is not None:
        if result.written:
            fixer.write(result, args.fix)
            final = result.report
        out["fix"] = result.to_dict()
        if not args.json:
            _print_fix(report, result)
    if args.json:
        print(json.dumps(out, indent=2))
    elif not final.ok:
        print(
            f"\nE13010: a stock CANN 8.x ONNX parser would refuse this model ({len(final.unsupported)} node(s))",
            file=sys.stderr,
        )
    return 0 if final.ok else 1


_ORIGIN = {
    "shape": " from --shape",
    "example": " (the model's example shape)",
    "static": "",
    "declared": " (dynamic dims as 1)",
}


def _print_fix(report, result) -> None:
    """--fix's lines: what was converted and written, on which inputs it was verified, or why nothing was."""
    if not result.written:
        print(f"\nfix: nothing written: {result.error}")
        return
    diffs = ", ".join(f"{k} {v:.3g}" for k, v in result.max_abs_diff.items())
    made = {i.name: i for i in result.invented}
    on = "; ".join(
        f"{name}: random {made[name].shape}{_ORIGIN[made[name].origin]}" if name in made else f"{name}: given"
        for name in result.inputs
    )
    print(
        f"\nfix: converted opset {report.opsets.get('ai.onnx')} -> {result.target} with ONNX's version_converter; "
        f"ONNX Runtime, inputs [{on}]: max |d| per output: {diffs}; wrote {result.path}"
    )
    print(result.report)
    if not result.report.ok:
        print("fix: could not fix the nodes still listed (no opset maps them; see the suggestions)")


def cmd_precision(args) -> int:
    from gert.errors import GertError
    from gert.preview import compare
    from gert.tools.input_options import input_files
    from gert.tools.usage import UsageError

    proto = _read(args.model)
    feeds = input_files(args.input, "gert precision")
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
    c.add_argument(
        "--fix",
        metavar="OUT.onnx",
        help="convert a model above opset 18 down to the highest opset where "
        "its ops map (ONNX's version_converter), verify it on ONNX Runtime, write it and check it again",
    )
    c.add_argument(
        "--input",
        action="append",
        metavar="NAME=FILE.npy",
        help="an input --fix verifies the converted "
        "model on (default: random values in the model's example or declared shape)",
    )
    c.add_argument(
        "--shape",
        action="append",
        metavar="NAME=D0xD1x...",
        help="the shape of an input --fix fills "
        "with random values (for an input whose dynamic dims need a real size, e.g. audio=1x512)",
    )
    c.set_defaults(func=cmd_check)
    p = sub.add_parser("precision", help="each GE precision mode's outputs against fp32 (emulated)")
    p.add_argument("model")
    p.add_argument("--input", action="append", help="NAME=file.npy (default: random values, with a warning)")
    p.add_argument(
        "--modes",
        help="comma-separated precision modes (default: force_fp16, allow_mix_precision, "
        "allow_fp32_to_fp16, must_keep_origin_dtype)",
    )
    p.add_argument("--plot", metavar="OUT.png", help="a chart of 1 - cosine per mode and output (needs matplotlib)")
    p.add_argument(
        "--keep-fp32-out",
        metavar="keep.txt",
        help="find nodes to keep in fp32 and write them in ATC's --keep_dtype format",
    )
    p.add_argument("--precision-mode", default="force_fp16", help="the mode --keep-fp32-out searches under")
    p.add_argument("--min-cosine", type=float, default=0.999)
    p.set_defaults(func=cmd_precision)
