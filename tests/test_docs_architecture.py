"""docs/architecture.md stays true of the tree (issue 42, "docs kept true"): its file table (``| path | what |``)
names every tracked module of gert/, gert/core/, gert/hostnpu/, gert/preview/, gert/tools/ and gert_triton/ by its
file name, in its package's row; a new module without a line fails here, naming it."""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("gert/", "gert/core/", "gert/hostnpu/", "gert/preview/", "gert/tools/", "gert_triton/")
SUFFIXES = (".py", ".pyx")


def file_table(text: str) -> dict:
    """The rows of the ``| path | what |`` table: the first cell's path (backquotes stripped) -> the row's text."""
    rows: dict = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("| path | what |"):
            inside = True
            continue
        if inside and not line.startswith("|"):
            break
        if inside and not line.startswith("|---"):
            cells = line.split("|")
            rows[cells[1].strip().strip("`")] = line
    return rows


def named(row: str, file_name: str) -> bool:
    """Whether ``row`` names ``file_name`` on its own (``model.py``, not inside ``cpu_model.py`` or a path)."""
    return re.search(rf"(?<![\w./]){re.escape(file_name)}(?![\w])", row) is not None


def tracked_modules() -> list:
    """The tracked Python and Cython modules directly under each package of PACKAGES."""
    out = subprocess.run(
        ["git", "ls-files", *PACKAGES], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return sorted(
        p for p in out if p.endswith(SUFFIXES) and any(p == pkg + pathlib.PurePosixPath(p).name for pkg in PACKAGES)
    )


def unnamed(modules: list, rows: dict) -> list:
    """The modules whose package row is missing or does not name them."""
    missing = []
    for path in modules:
        package, name = path.rsplit("/", 1)
        row = rows.get(package + "/")
        if row is None or not named(row, name):
            missing.append(path)
    return missing


def test_the_file_table_has_a_row_per_package():
    rows = file_table(DOC.read_text())
    assert [p for p in PACKAGES if p not in rows] == []


def test_the_file_table_names_every_module():
    modules = tracked_modules()
    assert "gert/core/pool.py" in modules and "gert_triton/model.py" in modules  # the listing itself works
    assert unnamed(modules, file_table(DOC.read_text())) == [], "add a line for each to docs/architecture.md's files"


def test_a_module_the_table_does_not_name_fails():
    rows = file_table(DOC.read_text())
    assert unnamed(["gert/core/not_a_module.py", "gert/core/pool.py"], rows) == ["gert/core/not_a_module.py"]
    assert unnamed(["gert/nowhere/pool.py"], rows) == ["gert/nowhere/pool.py"]  # a package without a row


@pytest.mark.parametrize(
    "row, name, found",
    [
        ("| `gert/` | `model.py` (Model) |", "model.py", True),
        ("| `gert/` | `cpu_model.py` (gert.load) |", "model.py", False),
        ("| `gert/` | see `gert/core/pool.py` |", "pool.py", False),
        ("| `gert/core/` | `pool.pyx` |", "pool.py", False),
    ],
)
def test_a_name_counts_only_on_its_own(row, name, found):
    assert named(row, name) is found
