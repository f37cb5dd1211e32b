"""The package layout shows the architecture (docs/architecture.md, "Layers" and "Module layout"), read from the
source with ast, nothing imported:

- no import cycle among gert's and gert_triton's modules, of any kind: module-level imports, imports inside
  functions (lazy) and under TYPE_CHECKING, the Cython sources' too (``.pyx`` and the ``.pxi`` files they include,
  read line by line: ``import`` / ``from ... import``, and ``from ... cimport`` of a compiled module of gert, whose
  .pxd it is: that imports the module too; not a ``cimport`` of C declarations), but for the edges listed in
  ALLOWED_EDGES (each with its reason);
- gert/core/ (the runtime core) imports only itself, gert.errors, gert.dtypes and the binding gert._cann: no front
  door, no tool, no host NPU code (it reaches the host NPU through gert/core/hooks.py);
- the binding (every ``.pyx`` / ``.pxi`` under cbindings/) imports nothing from gert, not even inside a function:
  what it needs from above is registered into it at import (gert/_binding.py);
- gert never imports gert_triton (its CLI finds gert_triton's commands through entry points);
- the runtime imports no tool (gert/tools/) at import time;
- gert's own code imports modules by their new paths (the old ones are only aliases for others, gert/_moved.py);
- no class in gert/ over MAX_CLASS_LINES lines;
- no access to another module's private attribute: ``x._name`` where x is not self/cls and nothing in the same
  module defines ``_name``;
- no module-level function reaching into another object's private attributes (``x._name`` where x is not
  self/cls, even where the module's own class defines ``_name``: that is a method of the class).
"""

from __future__ import annotations

import ast
import pathlib
import re
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
    (
        "gert.core.load_config",
        "gert.preview.precision",
    ): "LoadConfig checks precision_mode once, against GE's mode table (precision.normalise), where it is first "
    "needed: gert.load, gert_triton's parameters and gert bench all build a LoadConfig",
}
# lines as ruff format lays them out (issue 39: 300; Worker, Sequences and Engine split to reach it)
MAX_CLASS_LINES = 300
# modules of gert that exist only compiled: their Cython sources (each with the .pxi files it includes; gert._cann is
# built from _cann_hostnpu.pyx with the host NPU compiled in, else from _cann.pyx: both are read)
COMPILED = {
    "gert._cann": ("cbindings/_cann.pyx", "cbindings/_cann_hostnpu.pyx"),
    "gert._hostnpu": ("cbindings/_hostnpu.pyx",),
    "gert.core._hotpath": ("gert/core/_hotpath.pyx",),
    "gert.core._locks": ("gert/core/_locks.pyx",),
    "gert.core._free_streams": ("gert/core/_free_streams.pyx",),
    "gert.core._core_share": ("gert/core/_core_share.pyx",),
    "gert.core._split": ("gert/core/_split.pyx",),
    "gert.core._merge": ("gert/core/_merge.pyx",),
}
# the binding's Cython sources: none imports from gert (test_the_binding_imports_nothing_from_gert)
BINDING = ROOT / "cbindings"
# imports that close a cycle and are right for now, and why: (importer, imported) -> reason
ALLOWED_EDGES: dict = {}  # (importer, imported) -> why a cycle through it is right; none today
# x._name uses that are right, and why
PRIVATE_ALLOWED: dict = {}
# x._name uses of module-level functions that are right, and why: (module, "x._name") -> reason
FUNCTION_PRIVATE_ALLOWED = {
    ("gert.hostnpu.ort_provider", "io._gert_keep"): "gert's own attribute on ONNX Runtime's IOBinding: the bound "
    "zero-filled arrays live as long as the binding (it holds only their addresses)",
    ("gert.hostnpu.ort_provider", "sess._model_bytes"): "ONNX Runtime's session keeps its model's bytes there; "
    "dropped so that a process holds them once (issue 41)",
}


@dataclass
class Module:
    name: str
    path: pathlib.Path
    tree: ast.Module
    top: set = field(default_factory=set)  # modules imported when this one is imported
    lazy: set = field(default_factory=set)  # modules imported inside functions
    typing: set = field(default_factory=set)  # modules imported under TYPE_CHECKING

    @property
    def imports(self) -> set:
        """Every module this one imports, of any kind."""
        return self.top | self.lazy | self.typing


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
    known = set(modules) | set(COMPILED)
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

        def visit(node, kind: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for t in targets(child):
                        if t.split(".")[0] in PACKAGES:
                            getattr(m, kind).add(t)
                elif _is_type_checking(child):
                    visit(child, "typing")
                else:
                    function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                    visit(child, "lazy" if function and kind == "top" else kind)

        visit(m.tree, "top")
    for name, sources in COMPILED.items():
        m = Module(name, ROOT / sources[0], ast.parse(""))
        for source in sources:
            for path in _cython_files(ROOT / source):
                _cython_imports(path, m, known)
        modules[name] = m
    return modules


# a Cython function: def / cpdef, or a cdef with arguments that is not a class or an extern block
_CY_FUNCTION = re.compile(r"(async\s+)?def\s|cpdef\s|cdef\s+(?!class\b|extern\b)[^=]*\(")
_CY_IMPORT = re.compile(r"from\s+([\w.]+)\s+import\s+(.+)|import\s+(.+)")
_CY_CIMPORT = re.compile(r"from\s+([\w.]+)\s+cimport\s+(.+)")


def _cython_files(path: pathlib.Path, seen: list | None = None) -> list:
    """A .pyx and the .pxi files it includes (recursively), in order."""
    seen = [] if seen is None else seen
    if path not in seen:
        seen.append(path)
        for line in path.read_text().splitlines():
            found = re.match(r'\s*include\s+"([^"]+)"', line)
            if found:
                _cython_files(path.parent / found.group(1), seen)
    return seen


def _cython_imports(path: pathlib.Path, m: Module, known: set) -> None:
    """The Python imports of a Cython source into ``m``: lazy inside a function (by indentation), else top."""
    blocks: list = []  # (indentation, is a function) of the blocks the current line is in
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        while blocks and blocks[-1][0] >= indent:
            blocks.pop()
        found = _CY_CIMPORT.fullmatch(text)
        if found:  # a compiled module's .pxd: importing it imports the module (its types, its C functions' table)
            base = found.group(1)
            names = [n.strip().split(" as ")[0] for n in found.group(2).strip("()").split(",") if n.strip()]
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in COMPILED] or [base] * (base in COMPILED)
            for t in targets:
                (m.lazy if any(f for _, f in blocks) else m.top).add(t)
            continue
        found = _CY_IMPORT.fullmatch(text)
        if found:
            if found.group(1):
                names = [n.strip().split(" as ")[0] for n in found.group(2).strip("()").split(",") if n.strip()]
                base = found.group(1)
                targets = [f"{base}.{n}" if f"{base}.{n}" in known else base for n in names]
            else:
                targets = [n.strip().split(" as ")[0] for n in found.group(3).split(",")]
            for t in targets:
                if t.split(".")[0] in PACKAGES:
                    (m.lazy if any(f for _, f in blocks) else m.top).add(t)
            continue
        function = bool(_CY_FUNCTION.match(text))
        if function or text.endswith(":"):
            blocks.append((indent, function))


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


def test_no_import_cycle_of_any_kind():
    """Module-level, lazy (inside functions) and TYPE_CHECKING imports, of the Python and the Cython sources: no
    cycle but through an edge of ALLOWED_EDGES."""
    graph = {name: {t for t in m.imports if (name, t) not in ALLOWED_EDGES} for name, m in MODULES.items()}
    assert _cycles(graph) == []


def test_every_allowed_edge_is_still_an_import():
    """An ALLOWED_EDGES entry that is no longer imported is dropped from the list (it would hide a new one)."""
    assert [e for e in ALLOWED_EDGES if e[1] not in MODULES[e[0]].imports] == []


def test_the_cython_sources_are_read():
    """The Cython sources' imports are seen (the hot path's); the binding's are none (gert/_binding.py registers
    what it needs)."""
    assert MODULES["gert.core._hotpath"].top >= {
        "gert._cann",
        "gert.errors",
        "gert.core._locks",  # cimported (gert/core/_locks.pxd)
        "gert.core._free_streams",
        "gert.core._core_share",  # cimported (gert/core/_core_share.pxd): the launch's core share
        "gert.core._split",
        "gert.core._merge",  # cimported (gert/core/_merge.pxd): run(list)'s merge is Batcher.merge's
    }
    assert MODULES["gert._cann"].imports == set() and MODULES["gert._hostnpu"].imports == set()


_GERT = re.compile(r"gert(\.|$)")
_DYNAMIC_IMPORT = re.compile(r"""(__import__|import_module)\(\s*["']gert\b""")


def _gert_imports(source: str) -> list:
    """(line number, text) of each line of a Cython source that imports a gert module: ``import gert...`` or
    ``from gert... import``, at any indentation (inside functions too), or ``__import__`` / ``import_module`` of one;
    ``cimport`` (C declarations: backend, acl, ge) and comments are not imports of gert."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        text = line.strip()
        if text.startswith("#"):
            continue
        m = _CY_IMPORT.fullmatch(text)
        if m is None:
            modules = []
        elif m.group(1):
            modules = [m.group(1)]
        else:
            modules = [n.strip().split(" as ")[0] for n in m.group(3).split(",")]
        if any(_GERT.match(t) for t in modules) or _DYNAMIC_IMPORT.search(text):
            found.append((number, text))
    return found


def _binding_imports_of_gert(root: pathlib.Path) -> list:
    sources = sorted(root.rglob("*.pyx")) + sorted(root.rglob("*.pxi"))
    return [f"{p.relative_to(root.parent)}:{n}: {t}" for p in sources for n, t in _gert_imports(p.read_text())]


def test_the_binding_imports_nothing_from_gert():
    """gert._cann (and gert._hostnpu) is a 1:1 layer over CANN's API, as CuPy's runtime.pyx is over CUDA's: what it
    needs from above (gert's exception types, DeviceTensor, the dtype table, the op check, the host NPU's provider)
    is registered into it at import (gert/_binding.py), and policy stays above it (issue 39 step 4)."""
    assert _binding_imports_of_gert(BINDING) == []


@pytest.mark.parametrize(
    "source, lines",
    [
        ("from gert import errors as _errors\n", [1]),
        ("import os, gert.dtypes\n", [1]),
        ("def f():\n    if x:\n        from gert.core.tensor import DeviceTensor\n", [3]),
        ("cdef object f():\n    import gert\n    return gert.device_count()\n", [2]),
        ("m = importlib.import_module('gert.hostnpu.ort_provider')\n", [1]),
        ("from backend cimport gert_tls_context\ncimport gert\n# import gert\nimport gertrude\n", []),
    ],
)
def test_the_binding_import_check(source, lines):
    assert [n for n, _ in _gert_imports(source)] == lines


@pytest.mark.parametrize(
    "source, top, lazy",
    [
        ("import gert.errors\nfrom gert.core import tensor\n", {"gert.errors", "gert.core.tensor"}, set()),
        ("cdef class A:\n    def f(self):\n        from gert import dtypes\n", set(), {"gert.dtypes"}),
        (
            "cdef inline int f(int x) noexcept:\n    import gert\n    return x\nimport gert.model\n",
            {"gert.model"},
            {"gert"},
        ),
        ("from gert.core cimport x\ncimport gert\nfrom libc.stdint cimport int64_t\n", set(), set()),
        ("from gert.core._locks cimport HandOffLock\n", {"gert.core._locks"}, set()),
    ],
)
def test_the_cython_reader(tmp_path, source, top, lazy):
    path = tmp_path / "m.pyx"
    path.write_text(source)
    m = Module("x", path, ast.parse(""))
    _cython_imports(path, m, set(MODULES))
    assert (m.top, m.lazy) == (top, lazy)


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
    wrong = {name: sorted(t for t in m.imports if t not in MODULES) for name, m in MODULES.items()}
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
                if a.name.startswith("_") and not a.name.endswith("_") and f"{node.module}.{a.name}" not in MODULES:
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


def _function_private_uses(m: Module) -> list:
    """``x._name`` in the module-level functions of ``m`` (x not self / cls), but FUNCTION_PRIVATE_ALLOWED."""
    uses = []
    for fn in m.tree.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.endswith("_"):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if (m.name, ast.unparse(node)) not in FUNCTION_PRIVATE_ALLOWED:
                uses.append(f"{m.path.relative_to(ROOT)}:{node.lineno} {fn.name}: {ast.unparse(node)}")
    return uses


def test_no_module_level_function_reaches_into_an_objects_private_attributes():
    """What a function does with an object's private state is the object's method (the class that defines it)."""
    assert [u for m in MODULES.values() for u in _function_private_uses(m)] == []


@pytest.mark.parametrize(
    "source, found",
    [
        ("class A:\n    def __init__(self):\n        self._x = 1\n\ndef f(a):\n    return a._x\n", True),
        ("class A:\n    def f(self, other):\n        return other._x\n", False),
        ("def f(a):\n    return a.x + a.__class__.__name__.__len__()\n", False),
    ],
)
def test_the_function_private_check(source, found):
    m = Module("x", ROOT / "gert" / "x.py", ast.parse(source))
    assert bool(_function_private_uses(m)) is found


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
