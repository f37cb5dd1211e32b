"""The options that feed a model on gert's command line, parsed in one place for every command that takes them
(gert bench, gert precision, gert check --fix): ``--input NAME=FILE.npy`` (an array) and ``--shape NAME=D0xD1x...``
(a shape for random values). Bad ones are a UsageError naming the command, the option and the value."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gert.tools.usage import UsageError


def parse_shape(text: str, command: str) -> tuple:
    """'x=1x3x48x320' -> ('x', (1, 3, 48, 320))."""
    name, sep, dims = text.partition("=")
    if not sep or not name:
        raise UsageError(f"{command}: --shape: {text!r} is not NAME=D0xD1x...")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        raise UsageError(
            f"{command}: --shape: dims of {name!r} must be integers separated by 'x', got {dims!r}"
        ) from None
    if any(d < 0 for d in shape):
        raise UsageError(f"{command}: --shape: dims of {name!r} must be >= 0, got {dims!r}")
    return name, shape


def input_shapes(items: Iterable[str] | None, command: str) -> dict:
    """The --shape options given: input name -> dims."""
    return dict(parse_shape(text, command) for text in items or [])


def input_files(items: Iterable[str] | None, command: str) -> dict:
    """The --input options given: input name -> the array read from its .npy file."""
    out = {}
    for item in items or []:
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise UsageError(f"{command}: --input: {item!r} is not NAME=file.npy")
        try:
            out[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise UsageError(f"{command}: --input {name}: cannot read {path!r}: {e}") from None
    return out
