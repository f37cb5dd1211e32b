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


def readme_main_job_line() -> str:
    """The README's one-line main job (the block after "Set up and run the main job")."""
    m = re.search(r"Set up and run the main job.*?```bash\n(.*?)```", _read("README.md"), re.S)
    assert m, "README.md has no 'Set up and run the main job' bash block"
    lines = [ln.strip() for ln in m.group(1).splitlines() if ln.strip()]
    assert len(lines) == 1, f"the main job is one line, not {lines}"
    return lines[0]


def test_main_job_line_is_venv_first_and_ci_runs_it_in_a_fresh_clone():
    """PEP 668: a system Python marked EXTERNALLY-MANAGED (Debian 12, Ubuntu 23.04+) refuses `pip install` outside a
    venv, so the line makes one and uses its pip and python; CI runs it as written in a new clone of the commit."""
    line = readme_main_job_line()
    assert re.match(
        r"python3 -m venv (\S+) && \1/bin/pip install -e \. && \1/bin/python examples/quickstart\.py$", line
    ), line
    ci_lines = [ln.strip() for ln in _read(".ci", "run").splitlines()]
    assert line in ci_lines, f".ci/run does not run the README's main-job line {line!r}"
    clone = next(i for i, ln in enumerate(ci_lines) if re.match(r'git clone -q \S+ "?\$clone/gert"?$', ln))
    cd = next(i for i, ln in enumerate(ci_lines) if re.match(r'cd "?\$clone/gert"?$', ln))
    assert clone < cd < ci_lines.index(line), "the main-job line must run inside the fresh clone"
    text = _read("README.md")
    assert "python3-venv" in text, "README must say what Debian/Ubuntu need for `python3 -m venv`"


def test_ci_repeats_the_triton_fault_and_sequence_modules_in_random_orders():
    ci_lines = [ln.strip() for ln in _read(".ci", "run").splitlines()]
    assert ".ci/repeat 3" in ci_lines
    repeat = _read(".ci", "repeat")
    for module in ("test_triton_e2e.py", "test_triton_e2e_faults.py", "test_triton_sequences.py", "test_faults.py"):
        assert f"tests/{module}" in repeat, module
    assert "--randomly-seed=" in repeat


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
    for pkg in (
        "pytest",
        "hypothesis",
        "pytest-benchmark",
        "onnx",
        "onnxruntime",
        "Cython",
        "pytest-xdist",
        "pytest-randomly",
        "pytest-repeat",
    ):
        assert re.search(rf'"{re.escape(pkg)}[<>=!\[ "]', extra + " "), f"{pkg} is missing from the test extra"
