"""Lint and type checks (issue 42): ``ruff check`` passes over the tree (config: pyproject.toml [tool.ruff]), and
mypy over gert/ and gert_triton/ (config: [tool.mypy]) finds no error beyond tests/mypy_baseline.txt, the errors
accepted when mypy came in, each as file, message and error code (line numbers do not matter, so code may move).

After fixing baselined errors, or to accept an error on purpose (say why in the commit), rewrite the baseline:

    python tests/test_lint.py --update-mypy-baseline

mypy's cache lives in the test cache directory ($GERT_TEST_CACHE_DIR, else ~/.cache/gert-tests), so a warm run takes
seconds; ``GERT_CI_COLD=1 .ci/run`` starts it cold like the rest.
"""

from __future__ import annotations

import collections
import os
import pathlib
import re
import subprocess
import sys
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tests" / "mypy_baseline.txt"
UPDATE = "python tests/test_lint.py --update-mypy-baseline"
TIMEOUT = 900  # seconds: a cold mypy run on a loaded 2-core machine takes about a minute
# path:line[:col]: error: message  [code]  (mypy --no-pretty; notes and summaries are other lines)
ERROR = re.compile(r"^(?P<path>[^:\s]+\.pyi?):\d+(?::\d+)?: error: (?P<message>.*?)\s+\[(?P<code>[a-z0-9-]+)\]$")


def _need(module: str) -> None:
    """ruff and mypy come with the test extra; only where one is not installed does its check skip."""
    try:
        __import__(module)
    except ImportError:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")


def cache_dir() -> str:
    """mypy's cache, kept between runs in the test cache directory (tests/test_toolkit_build.py keeps its builds
    there too)."""
    root = os.environ.get("GERT_TEST_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gert-tests"
    )
    path = os.path.join(root, "mypy")
    os.makedirs(path, exist_ok=True)
    return path


def run_mypy(*targets: str) -> subprocess.CompletedProcess:
    """mypy with pyproject.toml's config: over its ``files`` (gert/, gert_triton/), or over ``targets``."""
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        cache_dir(),
        "--no-pretty",
        "--no-error-summary",
        "--hide-error-context",
        "--no-color-output",
        "--show-error-codes",
        *targets,
    ]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    if p.returncode not in (0, 1):  # 2: mypy itself failed (bad config, crash): not a type error
        raise AssertionError(f"mypy failed (exit {p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    return p


def normalize(path: str, message: str, code: str) -> str:
    """One baseline line: the file, the message with any line number in it dropped, and the error code."""
    message = re.sub(r"line \d+", "line N", message)
    return f"{path}: {message}  [{code}]"


def errors_of(output: str) -> list[tuple[str, str]]:
    """(baseline key, the line as mypy printed it) for every error in mypy's output."""
    found = []
    for line in output.splitlines():
        m = ERROR.match(line.strip())
        if m:
            found.append((normalize(m["path"].replace(os.sep, "/"), m["message"], m["code"]), line.strip()))
    return found


def read_baseline(path: pathlib.Path = BASELINE) -> collections.Counter:
    lines = path.read_text().splitlines() if path.exists() else []
    return collections.Counter(line for line in lines if line.strip() and not line.startswith("#"))


def new_errors(found: list[tuple[str, str]], baseline: collections.Counter) -> list[str]:
    """The errors beyond the baseline: a key found more often than the baseline holds it is new (which of its
    occurrences is unknowable without line numbers, so all of them are listed)."""
    counts = collections.Counter(key for key, _ in found)
    over = {key for key, n in counts.items() if n > baseline[key]}
    return [line for key, line in found if key in over]


def stale_entries(found: list[tuple[str, str]], baseline: collections.Counter) -> list[str]:
    counts = collections.Counter(key for key, _ in found)
    return sorted(key for key, n in baseline.items() if counts[key] < n)


def check_against_baseline(output: str, baseline: collections.Counter) -> str | None:
    """None when mypy's output has no error beyond the baseline, else the message a failing test shows."""
    new = new_errors(errors_of(output), baseline)
    if not new:
        return None
    return (
        f"mypy: {len(new)} error(s) not in {BASELINE.relative_to(ROOT)} (fix them; to accept one on purpose, "
        f"run `{UPDATE}` and say why in the commit):\n" + "\n".join(new)
    )


def write_baseline(path: pathlib.Path = BASELINE) -> int:
    found = errors_of(run_mypy().stdout)
    header = (
        "# mypy errors accepted when mypy came in (issue 42); tests/test_lint.py fails on any other.\n"
        "# One line per error: file: message  [code], line numbers dropped. Regenerate after fixing some:\n"
        f"#     {UPDATE}\n"
    )
    path.write_text(header + "".join(f"{key}\n" for key in sorted(key for key, _ in found)))
    return len(found)


def test_ruff_check_passes():
    _need("ruff")
    p = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-fix", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert p.returncode == 0, (
        f"ruff check found problems (many fix with `ruff check --fix`):\n{p.stdout[-6000:]}{p.stderr[-2000:]}"
    )


def test_ruff_reports_a_new_violation():
    """The ruff check can fail: an unused import in a new file under gert/ is reported, by the project's config."""
    _need("ruff")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-fix",
            "--output-format",
            "concise",
            "--stdin-filename",
            "gert/lint_probe.py",
            "-",
        ],
        input="import os\n",
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert p.returncode == 1 and "F401" in p.stdout and "gert/lint_probe.py" in p.stdout, p.stdout + p.stderr


def test_mypy_finds_no_error_beyond_the_baseline():
    _need("mypy")
    p = run_mypy()
    baseline = read_baseline()
    found = errors_of(p.stdout)
    stale = stale_entries(found, baseline)
    if stale:
        warnings.warn(
            f"{len(stale)} baselined mypy error(s) are gone: run `{UPDATE}` to drop them from the "
            f"baseline:\n" + "\n".join(stale[:20]),
            stacklevel=1,
        )
    message = check_against_baseline(p.stdout, baseline)
    assert message is None, message


def test_mypy_reports_an_error_the_baseline_does_not_hold(tmp_path):
    """The check can fail: a module with a deliberate type error, checked with the project's config and compared with
    the committed baseline, is reported by file and message, with how to update the baseline."""
    _need("mypy")
    probe = tmp_path / "lint_probe.py"
    probe.write_text('def half(n: int) -> int:\n    return n // 2\n\n\nhalf("four")\n')
    p = run_mypy(str(probe))
    message = check_against_baseline(p.stdout, read_baseline())
    assert message is not None, p.stdout + p.stderr
    assert 'lint_probe.py:5: error: Argument 1 to "half" has incompatible type "str"' in message, message
    assert "[arg-type]" in message and UPDATE in message, message


def test_the_baseline_ignores_line_numbers():
    """An accepted error that moves to another line stays accepted; a second one like it is new."""
    out = 'gert/x.py:10: error: Item "None" of "int | None" has no attribute "real"  [union-attr]\n'
    baseline = collections.Counter(key for key, _ in errors_of(out))
    moved = out.replace(":10:", ":42:")
    assert check_against_baseline(moved, baseline) is None
    message = check_against_baseline(moved + out, baseline)
    assert message is not None and "gert/x.py:42" in message and "gert/x.py:10" in message, message
    defined = 'gert/x.py:9: error: Name "f" already defined on line 3  [no-redef]\n'
    assert (
        check_against_baseline(
            defined.replace("line 3", "line 5"), collections.Counter(key for key, _ in errors_of(defined))
        )
        is None
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--update-mypy-baseline"]:
        print(f"{BASELINE.relative_to(ROOT)}: {write_baseline()} error(s)")
    else:
        sys.exit(f"usage: {UPDATE}")
