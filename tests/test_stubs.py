"""Types for the compiled modules: gert/_cann.pyi and gert/core's .pyi stubs match the built modules (mypy's stubtest:
every public name, its kind, its parameters and defaults; tests/stubtest_allowlist.txt lists what Cython adds that
is no API, each with its reason), and an install ships them with PEP 561's py.typed in gert and gert_triton."""

from __future__ import annotations

import fnmatch
import os
import pathlib
import subprocess
import sys

import pytest

from gert import _cann

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUBBED = (
    "gert._cann",
    "gert.core._hotpath",
    "gert.core._locks",
    "gert.core._free_streams",
    "gert.core._split",
    "gert.core._merge",
)
ALLOWLIST = ROOT / "tests" / "stubtest_allowlist.txt"


def _need_stubtest() -> None:
    """stubtest comes with mypy (the test extra); CI must have it, elsewhere its absence skips."""
    try:
        import mypy.stubtest  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("mypy is not installed (pip install -e '.[test]')")


def run_stubtest(tmp_path: pathlib.Path, modules=STUBBED) -> subprocess.CompletedProcess:
    """stubtest over ``modules`` from the checkout (stubs found beside the built .so files), with a mypy config of
    its own: the rest of gert is read but not reported on (this test checks the stubs, not the code base), and its
    cache stays in tmp_path."""
    config = tmp_path / "mypy.ini"
    config.write_text(
        f"[mypy]\nfollow_imports = silent\nignore_missing_imports = True\ncache_dir = {tmp_path / 'cache'}\n"
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            "--mypy-config-file",
            str(config),
            "--allowlist",
            str(ALLOWLIST),
            *modules,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(
    _cann.backend() != "hostnpu",
    reason="the stub describes the host NPU build; a toolkit build has no host_* functions",
)
def test_stubs_match_the_built_modules(tmp_path):
    _need_stubtest()
    p = run_stubtest(tmp_path)
    assert p.returncode == 0, (p.stdout + p.stderr)[-6000:]
    assert f"Success: no issues found in {len(STUBBED)} modules" in p.stdout, p.stdout[-2000:]


@pytest.mark.skipif(_cann.backend() != "hostnpu", reason="as above")
def test_stubtest_sees_a_stub_that_drifted(tmp_path):
    """The check can fail: a public function of the built module the stub leaves out is reported, by name."""
    _need_stubtest()
    stub = ROOT / "gert" / "core" / "_hotpath.pyi"
    drifted = tmp_path / "stubs" / "gert" / "core"
    drifted.mkdir(parents=True)
    (drifted.parent / "__init__.pyi").write_text("")
    (drifted / "__init__.pyi").write_text("")
    text = stub.read_text()
    assert "    def flush(self) -> None: ...\n" in text
    (drifted / "_hotpath.pyi").write_text(text.replace("    def flush(self) -> None: ...\n", ""))
    config = tmp_path / "mypy.ini"
    config.write_text(
        f"[mypy]\nfollow_imports = silent\nignore_missing_imports = True\n"
        f"mypy_path = {tmp_path / 'stubs'}\ncache_dir = {tmp_path / 'cache'}\n"
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            "--mypy-config-file",
            str(config),
            "--allowlist",
            str(ALLOWLIST),
            "--ignore-unused-allowlist",
            "gert.core._hotpath",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode != 0 and "gert.core._hotpath.HotPath.flush is not present in stub" in p.stdout, (
        p.stdout + p.stderr
    )[-3000:]


def test_every_stubbed_module_is_compiled_and_has_its_stub():
    for module in STUBBED:
        parts = module.split(".")
        folder = ROOT.joinpath(*parts[:-1])
        assert (folder / f"{parts[-1]}.pyi").is_file(), f"{module} has no stub"
        assert list(folder.glob(f"{parts[-1]}.*.so")) or list(folder.glob(f"{parts[-1]}.*.pyd")), (
            f"{module} is not built in place (python setup.py build_ext --inplace)"
        )


def _package_data() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"].get("package-data", {})


def test_an_install_ships_py_typed_and_the_stubs():
    """pyproject's package data takes every py.typed and .pyi in gert and gert_triton (a non-editable install
    copies only what it lists)."""
    data = _package_data()
    typed = [ROOT / "gert" / "py.typed", ROOT / "gert_triton" / "py.typed"]
    for marker in typed:
        assert marker.is_file(), f"{marker.relative_to(ROOT)} is missing (PEP 561)"
    files = typed + sorted(ROOT.joinpath("gert").rglob("*.pyi")) + sorted(ROOT.joinpath("gert_triton").rglob("*.pyi"))
    assert len(files) >= 4, files
    for path in files:
        rel = path.relative_to(ROOT)
        package = ".".join(rel.parent.parts)
        patterns = data.get(package, [])
        assert any(fnmatch.fnmatch(path.name, pat) for pat in patterns), (
            f"{rel} is not in pyproject's [tool.setuptools.package-data] for {package!r} ({patterns}): an install "
            "would not ship it"
        )
