"""Old module paths of modules that moved into gert/core/, gert/hostnpu/ and gert/tools/ (docs/architecture.md,
"Module layout"): ``import gert.rows`` gives the module ``gert.core.rows`` itself, so code written against the old
paths (tests, users, a binding compiled before the move) keeps working, monkeypatching included.

A finder, not a file per old path: a file at the old path would turn each move into an edit for git, and edits made
in parallel to the moved module would no longer follow it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from types import ModuleType

# only the old paths that are in use: tests, examples and the README (users), and a binding compiled before the move
# (it imports gert.tensor and gert._ort_provider)
MOVED = {
    **{
        f"gert.{m}": f"gert.core.{m}"
        for m in (
            "executor",
            "dispatch",
            "tiers",
            "recovery",
            "compile_cache",
            "rows",
            "tensor",
            "cache_trust",
            "cache_entry",
        )
    },
    "gert.handoff": "gert.core._locks",  # gert/core/handoff.py, then compiled (HandOffLock, issue 39)
    "gert._ort_provider": "gert.hostnpu.ort_provider",
    **{f"gert.{m}": f"gert.tools.{m}" for m in ("cli", "bench", "display", "progress")},
}


class _Alias:  # an importlib.abc.Loader (not subclassed: importlib.abc imports importlib.resources, tempfile, ...)
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing: the module is the target, already executed."""


class MovedFinder:  # an importlib.abc.MetaPathFinder
    """Finds each old path in MOVED as an alias of its new module."""

    def find_spec(self, fullname: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))  # type: ignore[arg-type]  # a Loader by protocol


def install() -> None:
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
