"""Docs that run: every fenced ```python block of README.md and docs/**/*.md is executed here, so an example that
stops working fails the tests. The blocks of one page run in order in one namespace (a later block may use what an
earlier one made), in a working directory that holds the example models: cls.onnx, det.onnx and rec.onnx (PP-OCR's,
from the rapidocr-onnxruntime wheel), gru.onnx (built with onnx.helper) and a link to the repository's examples/.
They are made by the block of docs/getting-started.md marked ``<!-- example-models -->``, which a reader runs too.

A block that cannot run here says why in an HTML comment on the line before it: ``<!-- not-run: REASON -->``
(a reason of at least two words: "needs tritonserver", "fragment of a step function").
"""

from __future__ import annotations

import os
import pathlib
import re
import traceback
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
MODELS_PAGE = ROOT / "docs" / "getting-started.md"
MODELS_MARK = "<!-- example-models -->"
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)\s*$")


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    before: str  # the last non-blank line before the fence ("" at the top of a page)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def not_run(self) -> str | None:
        """The reason given for not running it, or None when it runs."""
        m = NOT_RUN.search(self.before)
        return m.group(1) if m else None


def blocks(text: str, page: str = "<page>") -> list[Block]:
    """The fenced code blocks of a Markdown text, indented ones (in lists) too, with their indent removed."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start, body, i = i, [], i + 1
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        if i == len(lines):
            raise AssertionError(f"{page}:{start + 1}: a code fence {fence!r} is never closed")
        before = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
        found.append(Block(page, start + 1, lang, "\n".join(body) + "\n", before))
        i += 1
    return found


def python_blocks(path: pathlib.Path) -> list[Block]:
    rel = str(path.relative_to(ROOT))
    return [b for b in blocks(path.read_text(), rel) if b.lang in ("python", "py")]


def run_blocks(page_blocks: list[Block], cwd: pathlib.Path) -> None:
    """Run the runnable blocks in order in one namespace, in cwd; an error names the page and the block's line.
    gert Models the page left open are closed afterwards (their streams' threads would outlive the page)."""
    namespace: dict = {"__name__": "__docs__"}
    old = os.getcwd()
    os.chdir(cwd)
    try:
        for b in page_blocks:
            if b.not_run is not None:
                continue
            try:
                exec(compile(b.code, b.where, "exec"), namespace)  # noqa: S102 - the docs' own examples
            except BaseException as e:  # reported with the block's place (re-raised: no blind except)
                raise AssertionError(f"the example at {b.where} fails:\n{b.code}\n{traceback.format_exc()}") from e
    finally:
        os.chdir(old)
        _close_models(namespace)


def _close_models(namespace: dict) -> None:
    import gert

    for value in list(namespace.values()):
        model = value if isinstance(value, gert.Model) else getattr(value, "model", None)
        if isinstance(model, gert.Model):  # a gert.InferenceSession's (None where ONNX Runtime runs it all)
            model.close()


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory) -> pathlib.Path:
    """A directory with the example models, made by the page's own block (so what a reader runs is tested)."""
    d = tmp_path_factory.mktemp("docs")
    (d / "examples").symlink_to(ROOT / "examples")
    marked = [b for b in python_blocks(MODELS_PAGE) if b.before == MODELS_MARK]
    assert len(marked) == 1, f"{MODELS_PAGE.name} must have one python block after {MODELS_MARK}"
    run_blocks(marked, d)
    for name in ("cls.onnx", "det.onnx", "rec.onnx", "gru.onnx"):
        assert (d / name).is_file(), f"the example-models block made no {name}"
    return d


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_python_examples_of_the_page_run(page, models_dir):
    run_blocks(python_blocks(page), models_dir)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_block_that_does_not_run_says_why(page):
    for b in python_blocks(page):
        reason = b.not_run
        assert reason is None or len(reason.split()) >= 2, (
            f"{b.where}: `<!-- not-run: ... -->` must give a reason of a few words, got {reason!r}"
        )
    for b in blocks(page.read_text(), page.name):
        if b.not_run is not None:
            assert b.lang in ("python", "py"), f"{b.where}: not-run marks a {b.lang or 'plain'} block, which never runs"


def test_the_docs_have_python_examples_and_most_run():
    """The collection is not empty by accident (a renamed fence, a broken parser)."""
    every = [b for page in PAGES for b in python_blocks(page)]
    running = [b for b in every if b.not_run is None]
    assert len(running) >= 10 and len(running) >= len(every) // 2, (len(running), len(every))


TOY = """# t
<!-- not-run: needs a real NPU -->
```python
raise RuntimeError("never runs")
```

```python
value = 41
```

- a list item

  ```python
  value += 1
  ```
"""


def test_blocks_share_one_namespace_and_a_marked_block_is_skipped(tmp_path):
    found = blocks(TOY)
    assert [(b.line, b.not_run) for b in found] == [(3, "needs a real NPU"), (7, None), (13, None)]
    assert found[2].code == "value += 1\n"
    run_blocks(found, tmp_path)  # the marked block's error would fail this


def test_a_failing_example_fails_naming_its_line(tmp_path):
    broken = TOY.replace("<!-- not-run: needs a real NPU -->", "")
    with pytest.raises(AssertionError, match=r"<page>:3 fails"):
        run_blocks(blocks(broken), tmp_path)


def test_an_unclosed_fence_is_an_error():
    with pytest.raises(AssertionError, match="never closed"):
        blocks("```python\nx = 1\n")
