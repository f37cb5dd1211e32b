"""One version everywhere: pyproject.toml's (what an install records), ``gert.__version__`` (kept by gert/core, part
of every compile cache key), what ``gert info`` prints, and a CHANGELOG.md section saying what changed in it."""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys

import pytest

import gert

ROOT = pathlib.Path(__file__).resolve().parent.parent


def pyproject_version() -> str:
    """[project] version of pyproject.toml (read as text: tomllib is Python 3.11+)."""
    project = re.search(r"^\[project\]\n(.*?)(?=^\[)", (ROOT / "pyproject.toml").read_text(), re.S | re.M)
    assert project, "pyproject.toml has no [project] table"
    m = re.search(r'^version\s*=\s*"([^"]+)"', project.group(1), re.M)
    assert m, "pyproject.toml's [project] has no static version"
    return m.group(1)


def info_version(command: list) -> str:
    """The version on `gert info`'s first line ('gert X  backend: ...')."""
    p = subprocess.run(command + ["info"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    m = re.match(r"gert (\S+)  backend: ", p.stdout)
    assert m, f"gert info's first line is not 'gert VERSION  backend: ...': {p.stdout[:200]!r}"
    return m.group(1)


def test_pyproject_and_gert_version_agree():
    assert gert.__version__ == pyproject_version(), (
        f"gert.__version__ is {gert.__version__}, pyproject.toml says {pyproject_version()}: change both "
        "(gert/core/__init__.py and pyproject.toml)"
    )
    assert re.fullmatch(r"\d+\.\d+\.\d+", gert.__version__), gert.__version__


def test_installed_metadata_has_this_version():
    """What pip recorded at install time (an editable install records it once: reinstall after a version bump)."""
    try:
        installed = importlib.metadata.version("gert")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("gert is not installed (run from the source tree)")
    assert installed == gert.__version__, (
        f"the installed gert's metadata says {installed}, the source {gert.__version__}: run `pip install -e .` again"
    )


def test_gert_info_prints_gert_version():
    assert info_version([sys.executable, "-m", "gert"]) == gert.__version__
    script = os.path.join(os.path.dirname(sys.executable), "gert")
    if os.path.isfile(script):  # the console script pip installed (pyproject [project.scripts])
        assert info_version([script]) == gert.__version__


def test_changelog_has_a_section_for_this_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(gert.__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.M), (
        f"CHANGELOG.md has no '## [{gert.__version__}] - YYYY-MM-DD' section"
    )
    assert "## [Unreleased]" in text
