"""ACL API fidelity: gert's own ACL headers and Cython declarations agree with CANN's real headers.

gert builds against its own copy of the ACL API (cbindings/include/acl/) when no CANN toolkit is installed.
These tests show that this copy, cbindings/acl.pxd and CANN's real headers declare the same API:

- cbindings/probe/acl_probe.cpp states, as static_asserts, the exact prototype of every ACL function, the
  type and value of every constant and enumerator, and every typedef that acl.pxd declares (plus the rest of
  what our headers declare). It must compile against our headers (a) and against the real ones (b).
- The probe is checked against its sources: every acl.pxd declaration appears in it with the same types,
  and so does every declaration in our headers.
- The Cython-generated C++ of gert._cann compiles against the real headers, taking gert_backend.h's
  real-toolkit branch (c).
- The probe is not vacuous: one deliberately wrong expectation (-DGERT_PROBE_SELFTEST) breaks the build.

The real headers come from the torch-npu wheel (torch_npu/include/), fetched with pip into
$GERT_TORCH_NPU_CACHE (default ~/.cache/gert/torch-npu) when not there yet. Only torch_npu/include/** is
extracted, into a temporary directory; the headers are never copied into the repository. When the wheel
cannot be obtained, (b) and (c) skip, except under CI=true, where they fail.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CBINDINGS = ROOT / "cbindings"
OUR_INCLUDE = CBINDINGS / "include"
OUR_ACL = OUR_INCLUDE / "acl"
PROBE = CBINDINGS / "probe" / "acl_probe.cpp"
PXD = CBINDINGS / "acl.pxd"

TORCH_NPU_SPEC = "torch-npu==2.14.0"
TORCH_NPU_WHEELS = "torch_npu-2.14.0-*.whl"
WHEEL_HEADERS = "torch_npu/include/"
# Any torch-npu wheel carries the same headers; when pip finds no wheel for this interpreter/platform,
# fetch this one (the headers do not depend on the interpreter or platform).
FALLBACK_WHEEL = ["--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "--only-binary=:all:"]

CXXFLAGS = ["-std=c++17", "-fsyntax-only"]
COMPILE_TIMEOUT = 120
DOWNLOAD_TIMEOUT = 600


# ---------------------------------------------------------------------------------------------------------
# helpers


def _in_ci():
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _unavailable(reason):
    """A prerequisite is missing: skip locally, fail under CI=true."""
    if _in_ci():
        pytest.fail(f"{reason} (CI=true: this check must run in CI)", pytrace=False)
    pytest.skip(reason)


def _gxx():
    gxx = shutil.which("g++")
    if gxx is None:
        _unavailable("g++ not found on PATH")
    return gxx


def _run(cmd, timeout=COMPILE_TIMEOUT, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def _compile(sources_and_flags, include_dirs, defines=()):
    cmd = [_gxx(), *CXXFLAGS]
    cmd += [f"-D{d}" for d in defines]
    for inc in include_dirs:
        cmd += ["-I", inc]
    cmd += list(sources_and_flags)
    return _run(cmd, cwd=ROOT)


def _explain(result, limit=6000):
    text = (result.stdout + result.stderr).strip()
    return text if len(text) <= limit else text[:limit] + "\n... (truncated)"


# ---------------------------------------------------------------------------------------------------------
# the real headers, from the torch-npu wheel


def _cache_dir():
    return Path(os.environ.get("GERT_TORCH_NPU_CACHE") or "~/.cache/gert/torch-npu").expanduser()


def _cached_wheel(cache):
    for wheel in sorted(cache.glob(TORCH_NPU_WHEELS)):
        if zipfile.is_zipfile(wheel):
            return wheel
        wheel.unlink()  # a truncated download: pip would not fetch it again otherwise
    return None


def _download_wheel(cache):
    """pip download the wheel into cache; return (wheel or None, why not)."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return None, f"cannot create the cache directory: {e}"
    base = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--no-input",
        TORCH_NPU_SPEC,
        "-d",
        str(cache),
    ]
    errors = []
    for extra in ([], FALLBACK_WHEEL):
        try:
            result = _run(base + extra, timeout=DOWNLOAD_TIMEOUT)
        except subprocess.TimeoutExpired:
            errors.append(f"`pip download` timed out after {DOWNLOAD_TIMEOUT} s")
            continue
        wheel = _cached_wheel(cache)
        if result.returncode == 0 and wheel is not None:
            return wheel, None
        tail = [line for line in result.stderr.splitlines() if line.startswith("ERROR")] or result.stderr.splitlines()
        errors.append(f"$ {' '.join(base + extra)}\n" + "\n".join(tail[-3:]))
    return None, "\n".join(errors)


class RealHeaders:
    def __init__(self, include=None, wheel=None, problem=None):
        self.include, self.wheel, self.problem = include, wheel, problem

    def require(self):
        if self.problem:
            _unavailable(self.problem)
        return self.include


@pytest.fixture(scope="session")
def real_headers(tmp_path_factory):
    cache = _cache_dir()
    wheel = _cached_wheel(cache) if cache.is_dir() else None
    if wheel is None:
        wheel, why = _download_wheel(cache)
        if wheel is None:
            return RealHeaders(
                problem=f"cannot download {TORCH_NPU_SPEC} into {cache} "
                f"(set GERT_TORCH_NPU_CACHE to a directory holding the wheel):\n{why}"
            )
    dest = tmp_path_factory.mktemp("torch_npu_headers")
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if m.startswith(WHEEL_HEADERS) and not m.endswith("/")]
        for member in members:
            zf.extract(member, dest)  # extract() drops absolute and ".." parts
    include = dest / WHEEL_HEADERS
    # A wheel without the ACL headers is a real failure, not an unavailable prerequisite.
    assert (include / "acl" / "acl.h").is_file(), f"{wheel.name} has no {WHEEL_HEADERS}acl/acl.h"
    return RealHeaders(include=include, wheel=wheel)


# ---------------------------------------------------------------------------------------------------------
# (a), (b): the probe compiles against our headers and against CANN's


def test_probe_against_our_headers():
    result = _compile([PROBE], [OUR_INCLUDE])
    assert result.returncode == 0, f"our ACL headers differ from the probe:\n{_explain(result)}"


def test_probe_against_real_headers(real_headers):
    include = real_headers.require()
    result = _compile([PROBE], [include])
    assert result.returncode == 0, (
        f"CANN's ACL headers ({real_headers.wheel.name}) differ from the probe:\n{_explain(result)}"
    )


def test_probe_selftest_fails():
    """The probe can fail: one wrong expectation (aclrtMalloc taking an int policy) breaks the build."""
    result = _compile([PROBE], [OUR_INCLUDE], defines=["GERT_PROBE_SELFTEST"])
    assert result.returncode != 0, "the probe accepted a deliberately wrong prototype: it checks nothing"
    assert "static assert" in result.stderr and "prototype of aclrtMalloc" in result.stderr, (
        f"the self-test failed, but not on its static_assert:\n{_explain(result)}"
    )
    # ...and that was the only failure.
    assert result.stderr.count("error:") == 1, _explain(result)


# ---------------------------------------------------------------------------------------------------------
# (c): the Cython-generated C++ compiles against CANN's headers


def test_cython_cpp_against_real_headers(real_headers, tmp_path):
    include = real_headers.require()
    import numpy  # a dependency of gert: its headers are part of the build

    out = tmp_path / "_cann.cpp"
    result = _run(
        [sys.executable, "-m", "cython", "-3", "--cplus", "-I", "cbindings", "cbindings/_cann.pyx", "-o", out], cwd=ROOT
    )
    assert result.returncode == 0, f"cython failed:\n{_explain(result)}"
    generated = out.read_text()
    assert '#include "acl/acl.h"' in generated
    assert "aclrtMalloc(" in generated
    # The wheel's ACL headers are CANN's current ones, but its GE headers predate LoadGraph / ExecuteGraphWith-
    # StreamAsync and it has no parser/ or exe_graph/: take acl/ from the wheel and GE from ours (the GE probe,
    # tests/test_ge_api_fidelity.py, checks ours against the part of the wheel's ge_api.h that exists).
    acl_only = tmp_path / "real_acl_include"
    acl_only.mkdir()
    (acl_only / "acl").symlink_to(pathlib.Path(include) / "acl", target_is_directory=True)
    # No GERT_HOSTNPU: gert_backend.h takes its real-toolkit branch, as in a build against CANN.
    result = _compile(
        [out],
        [acl_only, OUR_INCLUDE, CBINDINGS, sysconfig.get_paths()["include"], numpy.get_include()],
        defines=["_GLIBCXX_USE_CXX11_ABI=0"],
    )
    assert result.returncode == 0, (
        f"gert._cann does not compile against CANN's ACL headers ({real_headers.wheel.name}):\n{_explain(result)}"
    )


# ---------------------------------------------------------------------------------------------------------
# the probe covers acl.pxd (with the same types) and our headers


def _norm(ctype):
    """A C type with all spacing removed."""
    return re.sub(r"\s+", "", ctype)


_C_TYPE_WORDS = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "const"}


def _param_type(param):
    """'const char* configPath' -> 'constchar*' (drop the parameter name when there is one)."""
    param = param.strip()
    m = re.match(r"^(.*?[\s*])(\w+)$", param)
    if m and m.group(1).strip() and m.group(2) not in _C_TYPE_WORDS:
        param = m.group(1)
    return _norm(param)


def _params(text):
    """The parameter types of a parameter list; '(void)' is '()'."""
    if _norm(text) in ("", "void"):
        return ()
    return tuple(_param_type(p) for p in text.split(","))


def _probe():
    text = PROBE.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"#ifdef GERT_PROBE_SELFTEST.*?#endif", "", text, flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    probe = {
        "fn": {
            n: (_norm(r), _params(p))
            for n, r, p in re.findall(r"GERT_EXPECT_FN\(\s*(\w+)\s*,\s*([^,]+?)\s*,\s*\((.*?)\)\s*\)\s*;", text)
        },
        "type": {n: _norm(t) for n, t in re.findall(r"GERT_EXPECT_TYPE\(\s*(\w+)\s*,\s*(.+?)\s*\)\s*;", text)},
        "const": {
            n: _norm(t)
            for n, t, _ in re.findall(r"GERT_EXPECT_CONST\(\s*(\w+)\s*,\s*([^,]+?)\s*,\s*(.+?)\s*\)\s*;", text)
        },
        "enum_type": set(re.findall(r"GERT_EXPECT_ENUM_TYPE\(\s*(\w+)\s*\)\s*;", text)),
        "enum": {n: e for e, n in re.findall(r"GERT_EXPECT_ENUM\(\s*(\w+)\s*,\s*(\w+)\s*,", text)},
    }
    assert probe["fn"] and probe["const"] and probe["enum"], "could not parse the probe"
    return probe


def _pxd():
    """The declarations of acl.pxd's `cdef extern from "acl/acl.h"` block."""
    lines, depth, buf = [], 0, ""
    for raw in PXD.read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        buf = f"{buf} {line.strip()}" if buf else line
        depth += line.count("(") - line.count(")")
        if depth == 0:
            lines.append(buf)
            buf = ""
    pxd = {"fn": {}, "type": {}, "const": {}, "enum_type": set(), "enum": {}}
    in_block, enum = False, None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        body = line.strip()
        if indent == 0:
            in_block = body.startswith('cdef extern from "acl/acl.h"')
            continue
        if not in_block:
            continue
        if enum and indent > enum[1]:
            pxd["enum"][body] = enum[0]
            continue
        enum = None
        if m := re.fullmatch(r"ctypedef enum (\w+):", body):
            enum = (m.group(1), indent)
            pxd["enum_type"].add(m.group(1))
        elif m := re.fullmatch(r"ctypedef (.+?)\(\*(\w+)\)\((.*)\)", body):
            pxd["type"][m.group(2)] = _norm(m.group(1)) + "(*)(" + ",".join(_params(m.group(3))) + ")"
        elif m := re.fullmatch(r"ctypedef (.+?)\s*\b(\w+)", body):
            pxd["type"][m.group(2)] = _norm(m.group(1))
        elif m := re.fullmatch(r"const (.+?)\s*\b(\w+)", body):
            pxd["const"][m.group(2)] = _norm(m.group(1))
        elif m := re.fullmatch(r"(.+?)\b(acl\w+)\s*\((.*)\)", body):
            pxd["fn"][m.group(2)] = (_norm(m.group(1)), _params(m.group(3)))
        else:
            raise AssertionError(f"acl.pxd: cannot parse {body!r}; teach tests/test_api_fidelity.py about it")
    return pxd


def test_probe_covers_pxd():
    probe, pxd = _probe(), _pxd()
    assert len(pxd["fn"]) >= 40 and len(pxd["const"]) >= 30 and len(pxd["enum"]) >= 15, "could not parse acl.pxd"
    problems = []
    for name, sig in pxd["fn"].items():
        if name not in probe["fn"]:
            problems.append(f"function {name}: not in the probe")
        elif probe["fn"][name] != sig:
            problems.append(f"function {name}: acl.pxd says {sig}, the probe says {probe['fn'][name]}")
    for name, ctype in pxd["type"].items():
        if probe["type"].get(name) != ctype:
            problems.append(f"typedef {name}: acl.pxd says {ctype!r}, the probe says {probe['type'].get(name)!r}")
    for name, ctype in pxd["const"].items():
        if probe["const"].get(name) != ctype:
            problems.append(f"constant {name}: acl.pxd says {ctype!r}, the probe says {probe['const'].get(name)!r}")
    for name in sorted(pxd["enum_type"] - probe["enum_type"]):
        problems.append(f"enum {name}: no GERT_EXPECT_ENUM_TYPE in the probe")
    for member, enum in pxd["enum"].items():
        if probe["enum"].get(member) != enum:
            problems.append(f"enumerator {member}: acl.pxd puts it in {enum}, the probe in {probe['enum'].get(member)}")
    assert not problems, "cbindings/probe/acl_probe.cpp does not match cbindings/acl.pxd:\n" + "\n".join(problems)


def _our_header_names():
    text = "\n".join(p.read_text() for p in sorted(OUR_ACL.rglob("*.h")))
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    defines = text
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    names = {
        "fn": set(re.findall(r"ACL_FUNC_VISIBILITY[^;(]*?\b(\w+)\s*\(", text)),
        "const": set(re.findall(r"^\s*#define\s+(ACL_\w+)\s+[-(\w]", defines, flags=re.M))
        | set(re.findall(r"static\s+const\s+\w+\s+(\w+)\s*=", text)),
        "type": set(re.findall(r"typedef\s+[^;{}()]+?\b(\w+)\s*;", text))
        | set(re.findall(r"typedef\s+[^;{}]*?\(\s*\*\s*(\w+)\s*\)", text)),
        "enum": {},
    }
    names["const"].discard("ACL_FUNC_VISIBILITY")
    for body, enum in re.findall(r"typedef\s+enum(?:\s+\w+)?\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        for member in re.findall(r"^\s*(\w+)", body, flags=re.M):
            names["enum"][member] = enum
    return names


def test_probe_covers_our_headers():
    probe, ours = _probe(), _our_header_names()
    assert len(ours["fn"]) >= 40 and len(ours["enum"]) >= 40, "could not parse cbindings/include/acl"
    problems = [f"function {n}" for n in sorted(ours["fn"] - set(probe["fn"]))]
    problems += [f"constant {n}" for n in sorted(ours["const"] - set(probe["const"]))]
    problems += [f"typedef {n}" for n in sorted(ours["type"] - set(probe["type"]) - set(ours["enum"].values()))]
    problems += [f"enum {e}" for e in sorted(set(ours["enum"].values()) - probe["enum_type"])]
    problems += [f"enumerator {m} of {e}" for m, e in sorted(ours["enum"].items()) if probe["enum"].get(m) != e]
    assert not problems, (
        "declared in cbindings/include/acl but not checked by cbindings/probe/acl_probe.cpp:\n" + "\n".join(problems)
    )
