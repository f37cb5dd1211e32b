"""The package layout shows the architecture (docs/architecture.md, "Layers" and "Module layout"), read from the
source with ast, nothing imported:

- no import cycle among gert's and gert_triton's modules at module level;
- gert/core/ (the runtime core) imports only itself, gert.errors, gert.dtypes and the binding gert._cann: no front
  door, no tool, no host NPU code (it reaches the host NPU through gert/core/hooks.py);
- gert never imports gert_triton (its CLI finds gert_triton's commands through entry points);
- the runtime imports no tool (gert/tools/) at import time;
- gert's own code imports modules by their new paths (the old ones are only aliases for others, gert/_moved.py);
- no class in gert/ over MAX_CLASS_LINES lines;
- no access to another module's private attribute: ``x._name`` where x is not self/cls and nothing in the same
  module defines ``_name``.
"""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass, field

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("gert", "gert_triton")
CORE_MAY_IMPORT = ("gert.core", "gert.errors", "gert.dtypes", "gert._cann")
# imports of the core from outside it that are right for now, and why
CORE_EXCEPTIONS = {
    (
        "gert.core.compile_cache",
        "gert.preview.precision",
    ): "gert's own keep_fp32 option leaves GE's options for the cache key (split_options) on every backend; the "
    "compile's settings reach the host NPU's provider through precision.compiling (a hook would be cleaner)",
}
# lines as ruff format lays them out (the cap was 350 before the code was formatted); issue 39 asks for 300
MAX_CLASS_LINES = 450
# modules of gert that exist only compiled (cbindings/)
COMPILED = {"gert._cann", "gert._hostnpu", "gert.core._hotpath"}
# x._name uses that are right, and why
PRIVATE_ALLOWED: dict = {}


@dataclass
class Module:
    name: str
    path: pathlib.Path
    tree: ast.Module
    top: set = field(default_factory=set)  # modules imported when this one is imported
    lazy: set = field(default_factory=set)  # modules imported inside functions


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _load() -> dict:
    modules = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            name = _module_name(path)
            modules[name] = Module(name, path, ast.parse(path.read_text(), str(path)))
    known = set(modules) | COMPILED
    for m in modules.values():
        package = m.name if m.path.name == "__init__.py" else m.name.rpartition(".")[0]

        def targets(node) -> list:
            if isinstance(node, ast.Import):
                return [a.name for a in node.names]
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # `from pkg import sub` imports the module pkg.sub; `from mod import name` imports mod
            return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]

        def visit(node, lazy: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if _is_type_checking(child):
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for t in targets(child):
                        if t.split(".")[0] in PACKAGES:
                            (m.lazy if lazy else m.top).add(t)
                else:
                    visit(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(m.tree, False)
    return modules


MODULES = _load()


def _cycles(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan), and modules that import themselves."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_no_import_cycle_at_module_level():
    assert _cycles({name: m.top for name, m in MODULES.items()}) == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_core_imports_no_front_door_tool_or_host_npu_code():
    wrong = {
        name: sorted(
            t for t in m.top | m.lazy if not t.startswith(CORE_MAY_IMPORT) and (name, t) not in CORE_EXCEPTIONS
        )
        for name, m in MODULES.items()
        if name.startswith("gert.core")
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def test_gert_never_imports_gert_triton():
    wrong = {
        name: sorted(t for t in m.top | m.lazy if t.split(".")[0] == "gert_triton")
        for name, m in MODULES.items()
        if name.split(".")[0] == "gert"
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def test_the_runtime_imports_no_tool_at_import_time():
    wrong = {
        name: sorted(t for t in m.top if t.startswith("gert.tools"))
        for name, m in MODULES.items()
        if not name.startswith("gert.tools") and name not in ("gert.__main__", "gert_triton.cli")
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def test_gert_imports_its_modules_by_their_paths():
    """Every gert module that gert and gert_triton import exists where it is named (old paths are aliases kept for
    others, gert/_moved.py)."""
    known = set(MODULES) | COMPILED
    wrong = {name: sorted(t for t in m.top | m.lazy if t not in known) for name, m in MODULES.items()}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_no_class_over_the_line_cap():
    long = [
        f"{m.path.relative_to(ROOT)}:{c.lineno} {c.name}: {c.end_lineno - c.lineno + 1} lines"
        for m in MODULES.values()
        if m.name.split(".")[0] == "gert"
        for c in ast.walk(m.tree)
        if isinstance(c, ast.ClassDef) and c.end_lineno - c.lineno + 1 > MAX_CLASS_LINES
    ]
    assert long == []


def _defined_private(tree: ast.Module) -> set:
    """Private names this module defines: methods and class attributes, and attributes it assigns (``x._n = ...``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {n for n in names if n.startswith("_")}


def _private_uses(m: Module) -> list:
    own = _defined_private(m.tree)
    uses = []
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
            receiver = node.value
            if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
                continue
        elif isinstance(node, ast.ImportFrom) and not node.level:
            for a in node.names:
                if (
                    a.name.startswith("_")
                    and not a.name.endswith("_")
                    and f"{node.module}.{a.name}" not in set(MODULES) | COMPILED
                ):
                    uses.append(f"{m.path.relative_to(ROOT)}:{node.lineno} from {node.module} import {a.name}")
            continue
        else:
            continue
        if not name.startswith("_") or name.endswith("_"):  # public, dunder, or sunder (ctypes' _fields_)
            continue
        if name in own:
            continue
        where = f"{m.path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}"
        if PRIVATE_ALLOWED.get((m.name, ast.unparse(node))) is None:
            uses.append(where)
    return uses


def test_no_private_attribute_of_another_module():
    assert [u for m in MODULES.values() for u in _private_uses(m)] == []


@pytest.mark.parametrize(
    "source, found",
    [
        ("def f(w):\n    return w._compile()\n", True),
        ("class A:\n    def _compile(self):\n        pass\n\ndef f(a):\n    return a._compile()\n", False),
        ("from gert.core.tiers import _private\n", True),
    ],
)
def test_the_private_check_finds_another_modules_private(source, found):
    m = Module("x", ROOT / "gert" / "x.py", ast.parse(source))
    assert bool(_private_uses(m)) is found


def test_old_module_paths_are_the_moved_modules():
    """gert/_moved.py: an old path gives the moved module itself, so a monkeypatch through it reaches the code."""
    import importlib

    from gert import _moved

    for old, new in _moved.MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old


def test_the_host_npu_reaches_the_core_through_its_hooks():
    """The core calls no host NPU code: gert.hostnpu registers what the core asks of it (gert/core/hooks.py)."""
    import gert
    from gert.core import hooks

    registered = hooks.current()
    assert registered.inline is gert.hostnpu.inline
    assert hooks.BindingHooks().compile_cache_result() is None  # a device: GE does not report cache hits
    with hooks.BindingHooks().inline(0):  # a device runs the stream's work whatever the thread does
        pass


def test_every_package_is_installed():
    """pyproject.toml lists every package of gert and gert_triton: a `pip install .` (not editable) ships them."""
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {name for name, m in MODULES.items() if m.path.name == "__init__.py"}
    assert packages - listed == set()
