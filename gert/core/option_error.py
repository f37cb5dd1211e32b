"""The error of a bad load option, and the cann_ops mode check: apart from gert/core/load_config.py so that
gert/preview/cann_ops.py can use the check without importing LoadConfig (which reads gert.preview's precision
table: the two would import each other)."""

from __future__ import annotations

from typing import Any

from gert.errors import GertError

CANN_OPS_MODES = ("warn", "strict", "off")  # gert/preview/cann_ops.py applies them


class OptionError(GertError):
    """A bad value of one load option; ``option`` names it (gert_triton maps it to its config.pbtxt parameter)."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option

    def __reduce__(self) -> tuple:  # pickled with both arguments (errors cross process boundaries)
        return type(self), (self.option, str(self))


def cann_ops_mode(value: Any, source: str = "cann_ops") -> str:
    """``value`` as a cann_ops mode (case and spaces ignored); OptionError naming ``source`` otherwise."""
    mode = str(value).strip().lower()
    if mode not in CANN_OPS_MODES:
        raise OptionError("cann_ops", f"{source}: expected one of warn, strict, off, got {mode!r}")
    return mode
