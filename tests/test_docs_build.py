"""The docs site builds strictly: `mkdocs build --strict` (mkdocs.yml at the root) fails on a broken link or anchor,
a page left out of the nav, or an API reference that does not resolve; the reference renders gert._cann from its
stub. Run here rather than as a separate CI step, so the README's test command includes it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _mkdocs(config: pathlib.Path, site: pathlib.Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_strictly_and_renders_the_binding_from_its_stub(tmp_path):
    r = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}\n{r.stderr}"
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    for name in ("gert._cann", "memcpy_async", "set_stream_res_limit", "execute_async", "gert.Model", "run_async"):
        assert name in reference, f"the API reference does not show {name}"
    results = (tmp_path / "site" / "results" / "index.html").read_text()
    assert "gert benchmark results" in results, "benchmarks/RESULTS.md is not included in the results page"


def test_every_page_is_in_the_nav():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def files(entry):
        if isinstance(entry, str):
            return [entry]
        if isinstance(entry, list):
            return [f for e in entry for f in files(e)]
        return [f for v in entry.values() for f in files(v)]

    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages == set(files(nav)), pages ^ set(files(nav))


def test_a_broken_link_fails_the_strict_build(tmp_path):
    """The same validation settings as the real site, on a page that links to a missing one (and no -q: it would
    hide the warnings that --strict counts)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    small = {"site_name": "t", "docs_dir": "docs", "strict": True, "validation": config["validation"]}
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# t\n\nSee [the missing page](missing.md).\n")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(small))
    r = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert r.returncode != 0 and "missing.md" in r.stdout + r.stderr, r.stdout + r.stderr
