"""The README's set-up and test commands are what CI runs, in a fresh venv (so a missing dependency fails CI first)."""
from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


def readme_test_commands() -> list:
    """The commands of the README's "Set up and test" block, the venv creation left out."""
    text = _read("README.md")
    m = re.search(r"Set up and test.*?```bash\n(.*?)```", text, re.S)
    assert m, "README.md has no 'Set up and test' bash block"
    lines = [ln.strip() for ln in m.group(1).splitlines() if ln.strip()]
    assert lines[0].startswith("python3 -m venv "), lines
    return lines[1:]


def test_ci_runs_the_readme_commands_in_a_fresh_venv():
    ci = _read(".ci", "run")
    ci_lines = [ln.strip() for ln in ci.splitlines()]
    commands = readme_test_commands()
    assert any("pytest" in c for c in commands) and any(c.startswith("pip install") for c in commands), commands
    for command in commands:
        assert command in ci_lines, f".ci/run does not run the README command {command!r}"
    venv = next(i for i, ln in enumerate(ci_lines) if ln.startswith("python3 -m venv "))
    activate = next(i for i, ln in enumerate(ci_lines) if re.match(r"(\.|source) \S+/bin/activate$", ln))
    first = min(ci_lines.index(c) for c in commands)
    assert venv < activate < first, "the venv must be made and activated before the README commands run"
    assert re.search(r"rm -rf (\S+)\n.*python3 -m venv \1", ci), "each CI run must start from a new venv"


def test_test_extra_holds_the_tools_the_tests_run():
    """Tests run `python -m cython` (API fidelity) and import these: the test extra must bring them."""
    extra = re.search(r"^test = \[(.*?)\]", _read("pyproject.toml"), re.S | re.M).group(1)
    for pkg in ("pytest", "hypothesis", "pytest-benchmark", "onnx", "onnxruntime", "Cython"):
        assert re.search(rf'"{re.escape(pkg)}[<>=!\[ "]', extra + " "), f"{pkg} is missing from the test extra"
