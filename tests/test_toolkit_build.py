"""gert built in toolkit mode, end to end (issue 15): the host NPU packaged as a CANN toolkit
(cbindings/hostnpu/build_toolkit.py), ``ASCEND_HOME_PATH=DIR pip install .`` into a fresh venv, the linkage checked
with ldd/nm, and the quickstart and a representative part of the test suite run against that build (host-only tests
skip there, saying why: conftest.py).

One build per source digest (~2-3 minutes on 2 shared cores), kept between sessions in the test cache (the
``build`` fixture); deselect with ``-m "not toolkit_build"`` when iterating.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import os
import re
import shutil
import site
import subprocess
import sys
import time

import pytest

import gert

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = [
    pytest.mark.toolkit_build,
    pytest.mark.skipif(
        gert.backend() != "hostnpu", reason="already running against a toolkit-mode build (this module is what runs it)"
    ),
    pytest.mark.skipif(
        shutil.which("g++") is None or shutil.which("nm") is None or shutil.which("ldd") is None,
        reason="needs g++, nm and ldd",
    ),
]

# The suite run against the toolkit build (~2 minutes here): the runtime, GE graphs (ExecuteGraphWithStreamAsync and
# RunGraphWithStreamAsync), the Model executor, errors, the Triton adapter's unit tests, the CLI and the examples.
# Left out: what builds or serves (fidelity probes, the tritonserver e2e) and the slower ORT-facade / RapidOCR tests,
# which exercise the same bindings through gert.Model.
SUITE = [
    "test_memory.py",
    "test_streams_events.py",
    "test_host_buffer.py",
    "test_errors.py",
    "test_ge_graphs.py",
    "test_ge_errors.py",
    "test_run_graph_with_stream_async.py",
    "test_model.py",
    "test_examples.py",
    "test_triton_unit.py",
    "test_bench_cli.py",
    "test_hostnpu_accessor.py",
    "test_acl_rules.py",
]
# What a process linked against a toolkit may need besides the toolkit's own libraries.
SYSTEM_LIBS = {
    "linux-vdso.so.1",
    "libstdc++.so.6",
    "libgcc_s.so.1",
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
}


def _cann_libraries() -> list:
    """setup.py's CANN_LIBRARIES (read, not run)."""
    tree = ast.parse(open(os.path.join(REPO, "setup.py")).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CANN_LIBRARIES":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no CANN_LIBRARIES")


def _run(cmd, timeout=600, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    )
    return r


class Build:
    def __init__(self, base: str, src: str, run_dir: str):
        self.toolkit = os.path.join(base, "toolkit")
        self.src = src  # a clean copy of the checkout: what `pip install .` builds from
        self.run_dir = run_dir  # tests, examples, cbindings... without the gert packages (no shadowing)
        self.venv = os.path.join(base, "venv")
        self.python = os.path.join(self.venv, "bin", "python")

    def env(self, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GERT_", "ASCEND_", "PYTHON", "PYTEST_"))}
        env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
        return env

    def installed(self, name: str) -> str:
        code = f"import importlib.util as u; print(u.find_spec({name!r}).origin)"
        return _run([self.python, "-c", code], env=self.env(), cwd="/").stdout.strip()


# What the build copies of the checkout: not git, build outputs, caches or virtual environments (the CI's venv lives in
# the checkout: copying it cost minutes)
JUNK = (".git", "build", "*.so", "__pycache__", "*.egg-info", ".pytest_cache", ".hypothesis", ".venv*", ".benchmarks")


# What the toolkit and the installed gert are built from (tests, examples and docs are copied fresh every session)
BUILD_INPUTS = ("setup.py", "pyproject.toml", "setup.cfg", "MANIFEST.in", "cbindings", "gert", "gert_triton")


def _source_digest(src: str) -> str:
    """sha256 over the build inputs of the copied checkout (paths and contents), the Python that builds and the
    site-packages the venv is given: what the toolkit and the venv built from it depend on."""
    paths = []
    for name in BUILD_INPUTS:
        path = os.path.join(src, name)
        if os.path.isdir(path):
            paths.extend(os.path.join(top, f) for top, _, files in os.walk(path) for f in files)
        elif os.path.isfile(path):
            paths.append(path)
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(os.path.relpath(path, src).encode() + b"\0")
        if os.path.islink(path):
            h.update(os.readlink(path).encode())
        else:
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    h.update(
        repr((sys.version, os.path.realpath(sys.executable), site.getsitepackages(), shutil.which("g++"))).encode()
    )
    return h.hexdigest()[:20]


def _cache_root() -> str:
    """Where built toolkits and their venvs are kept between sessions: $GERT_TEST_CACHE_DIR, else
    $XDG_CACHE_HOME/gert-tests (~/.cache/gert-tests)."""
    root = os.environ.get("GERT_TEST_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gert-tests"
    )
    os.makedirs(root, exist_ok=True)
    return root


def _build_into(b: Build) -> None:
    _run([sys.executable, os.path.join(REPO, "cbindings", "hostnpu", "build_toolkit.py"), b.toolkit, "-j", "2"])
    _run([sys.executable, "-m", "venv", b.venv])
    # The new venv sees this one's packages (numpy, onnxruntime, pytest...) through a plain path entry: nothing is
    # downloaded but the build requirements (PyPI), and this venv's editable gert is not loaded (its .pth does not run).
    purelib = _run([b.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    with open(os.path.join(purelib, "_parent_venv.pth"), "w") as f:
        f.write("\n".join(site.getsitepackages()) + "\n")
    _run([b.python, "-m", "pip", "install", "-q", "."], cwd=b.src, env=b.env(ASCEND_HOME_PATH=b.toolkit))


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """The toolkit and gert installed against it in a venv: built once per source digest and kept in the test cache
    (_cache_root()), so a session whose checkout did not change since the last build reuses it; sessions building
    the same digest at once wait for each other (a lock file). The module is one xdist group (conftest.py): one
    build per session."""
    base = tmp_path_factory.mktemp("toolkit_build")
    src = str(base / "src")  # a clean copy of the checkout: what `pip install .` builds from
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(*JUNK))
    key = _source_digest(src)
    cached = os.path.join(_cache_root(), f"toolkit-{key}")
    b = Build(cached, src=src, run_dir=str(base / "run"))
    # tests, examples, cbindings... without the gert packages (no shadowing of the installed gert)
    shutil.copytree(src, b.run_dir, ignore=shutil.ignore_patterns("gert", "gert_triton"))
    done = os.path.join(cached, "complete")
    with open(cached + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not os.path.isfile(done):
            shutil.rmtree(cached, ignore_errors=True)  # a build that did not finish
            os.makedirs(cached)
            _build_into(b)
            with open(done, "w") as f:
                f.write(key + "\n")
    os.utime(done)  # in use: _prune_cache() leaves it alone
    _prune_cache(keep=cached)
    return b


def _prune_cache(keep: str, max_age_s: float = 3 * 86400) -> None:
    """Remove toolkit builds not used for max_age_s (other checkouts' or older sources'), unless another session
    holds their lock."""
    root = os.path.dirname(keep)
    for name in os.listdir(root):
        path = os.path.join(root, name)
        done = os.path.join(path, "complete")
        if not name.startswith("toolkit-") or name.endswith(".lock") or path == keep:
            continue
        try:
            if time.time() - os.path.getmtime(done if os.path.exists(done) else path) < max_age_s:
                continue
            with open(path + ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def _ldd(path: str) -> dict:
    out = {}
    for line in _run(["ldd", path]).stdout.splitlines():
        m = re.match(r"\s*(\S+)(?: => (\S+))?", line)
        if m:
            out[m.group(1)] = m.group(2) or ""
    return out


def _nm(path: str, *flags) -> str:
    return _run(["nm", "-D", *flags, path]).stdout


def test_toolkit_has_cann_layout_and_each_library_exports_what_its_namesake_does(build):
    lib64 = os.path.join(build.toolkit, "lib64")
    for name in _cann_libraries():
        assert os.path.isfile(os.path.join(lib64, f"lib{name}.so")), f"lib{name}.so missing (setup.py links it)"
    for d in ("acl", "ge", "graph", "parser", "exe_graph"):
        assert os.path.isdir(os.path.join(build.toolkit, "include", d)), d
    exports = {
        name: _nm(os.path.join(lib64, f"lib{name}.so"), "-C", "--defined-only")
        for name in ("ascendcl", "graph", "ge_runner", "fmk_onnx_parser")
    }
    expect = {
        "ascendcl": [" aclInit", " aclrtMalloc", " aclrtMemcpyAsync", " aclrtSynchronizeStreamWithTimeout"],
        "graph": [
            " ge::Graph::Graph(",
            " ge::AscendString::AscendString(",
            " ge::GetSizeInBytes(",
            " ge::Tensor::Tensor(",
        ],
        "ge_runner": [
            " ge::GEInitialize(",
            " ge::Session::Session(",
            " ge::Session::ExecuteGraphWithStreamAsync(",
            " ge::GEGetErrorMsgV2()",
        ],
        "fmk_onnx_parser": [" ge::aclgrphParseONNX(", " ge::aclgrphParseONNXFromMem("],
    }
    for lib, symbols in expect.items():
        for sym in symbols:
            assert sym in exports[lib], f"lib{lib}.so does not export {sym.strip()}"
    # ...and each name lives in one library only (the ACL runtime is not duplicated into GE, and so on)
    assert " aclrtMalloc" not in exports["ge_runner"] + exports["graph"]
    assert " ge::Session::Session(" not in exports["ascendcl"] + exports["graph"]
    # CANN's old C++ ABI (-D_GLIBCXX_USE_CXX11_ABI=0): no std::__cxx11 type in any exported symbol
    assert not [line for text in exports.values() for line in text.splitlines() if "__cxx11" in line]
    env = _run(
        [
            "bash",
            "-c",
            f"source {build.toolkit}/set_env.sh && echo $ASCEND_HOME_PATH $ASCEND_TOOLKIT_HOME $LD_LIBRARY_PATH",
        ]
    ).stdout.split()
    assert env[:2] == [build.toolkit, build.toolkit] and env[2].startswith(f"{build.toolkit}/lib64")


def test_extension_links_only_the_cann_libraries_and_needs_no_host_npu_symbol(build):
    cann = build.installed("gert._cann")
    assert cann.startswith(build.venv), cann
    libs = _ldd(cann)
    assert not [n for n, p in libs.items() if p == "not"], f"unresolved libraries: {libs}"
    toolkit_libs = {n for n, p in libs.items() if p.startswith(build.toolkit)}
    assert {"libascendcl.so", "libge_runner.so", "libgraph.so", "libfmk_onnx_parser.so"} <= toolkit_libs
    assert toolkit_libs <= {f"lib{n}.so" for n in _cann_libraries()}, toolkit_libs
    others = set(libs) - toolkit_libs - SYSTEM_LIBS - {n for n in libs if n.startswith("/")}
    assert not others, f"gert._cann links more than CANN's libraries and the C/C++ runtime: {others}"
    assert "gertHost" not in _nm(cann, "--undefined-only")
    # nothing of the host NPU's runtime is compiled in: only the ONNX I/O reader (hostnpu::onnx) is gert's own
    own = _run(["nm", "-C", "--defined-only", cann]).stdout
    assert not [s for s in own.splitlines() if "hostnpu::" in s and "hostnpu::onnx::" not in s]
    assert not re.search(r" [Tt] (acl|ge::)", own), "gert._cann defines CANN symbols itself"
    # the optional module is what links the host NPU's own API
    hostnpu = build.installed("gert._hostnpu")
    assert "gertHostSetGraphProvider" in _nm(hostnpu, "--undefined-only")


C_CLIENT = r"""
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"

#define CHECK(call, want) do { aclError e_ = (call); if (e_ != (want)) { \
    printf("FAIL %s: %d, want %d (%s)\n", #call, (int)e_, (int)(want), aclGetRecentErrMsg()); return 1; } } while (0)

int main(void) {
  aclrtStream s = NULL;
  void *dev = NULL;
  char host[64];
  CHECK(aclInit(NULL), ACL_SUCCESS);
  CHECK(aclrtSetDevice(0), ACL_SUCCESS);
  CHECK(aclrtCreateStream(&s), ACL_SUCCESS);
  if (aclGetRecentErrMsg() != NULL) { printf("FAIL: a message before any error\n"); return 1; }
  CHECK(aclrtLaunchHostFunc(s, NULL, NULL), ACL_ERROR_RT_PARAM_INVALID);   /* CANN 8.5: a null fn is 107000 */
  const char *m = aclGetRecentErrMsg();
  if (m == NULL || strstr(m, "aclrtLaunchHostFunc") == NULL) { printf("FAIL: message %s\n", m); return 1; }
  if (aclGetRecentErrMsg() != NULL) { printf("FAIL: the message was not cleared on read\n"); return 1; }
  CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  memset(host, 7, sizeof host);
  CHECK(aclrtMemcpyAsync(dev, 64, host, 64, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_SUCCESS);
  CHECK(aclrtMemcpyAsync(host, 64, host, 64, ACL_MEMCPY_HOST_TO_HOST, s), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  memset(host, 0, sizeof host);
  CHECK(aclrtMemcpy(host, 64, dev, 64, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  CHECK(aclrtSynchronizeStreamWithTimeout(s, 0), ACL_ERROR_RT_PARAM_INVALID);
  CHECK(aclrtSynchronizeStream(s), ACL_SUCCESS);
  CHECK(aclrtFree(dev), ACL_SUCCESS);
  CHECK(aclrtDestroyStream(s), ACL_SUCCESS);
  CHECK(aclrtResetDevice(0), ACL_SUCCESS);
  CHECK(aclFinalize(), ACL_SUCCESS);
  printf("ok %d\n", host[0]);
  return 0;
}
"""


def test_a_c_program_builds_and_runs_against_the_toolkit(build, tmp_path):
    """The toolkit serves a plain ACL client as CANN does (include/, lib64/ and set_env.sh), and the rules that only
    C can reach hold: aclrtLaunchHostFunc(NULL fn) is 107000, aclGetRecentErrMsg is NULL once read."""
    src = tmp_path / "client.c"
    src.write_text(C_CLIENT)
    exe = str(tmp_path / "client")
    _run(
        [
            "gcc",
            "-std=c11",
            "-Wall",
            "-Werror",
            "-I",
            f"{build.toolkit}/include",
            str(src),
            "-o",
            exe,
            "-L",
            f"{build.toolkit}/lib64",
            "-lascendcl",
        ]
    )
    r = _run(["bash", "-c", f"source {build.toolkit}/set_env.sh && {exe}"])
    assert r.stdout.strip() == "ok 7", r.stdout


def test_quickstart_runs_against_the_toolkit_build(build):
    r = _run(
        [build.python, os.path.join(build.run_dir, "examples", "quickstart.py")],
        env=build.env(),
        cwd=build.run_dir,
        timeout=300,
    )
    assert "max |gert - onnxruntime|: 0.0" in r.stdout and "futures agree: True" in r.stdout, r.stdout


def test_info_names_the_toolkit_and_host_features_come_from_the_optional_module(build):
    r = _run([build.python, "-m", "gert", "info"], env=build.env(), cwd="/")
    assert "backend: cann" in r.stdout
    assert (
        f"toolkit: {build.toolkit}, version 8.5.0 ({build.toolkit}/version.info); the host NPU packaged as a toolkit"
    ) in r.stdout, r.stdout
    code = (
        "import gert; print(gert.hostnpu._module.__name__, gert.hostnpu.available(), "
        "sorted(gert.host_counters())[0], type(gert.hostnpu.host_provider()).__name__, "
        "hasattr(gert._cann, 'host_counters'))"
    )
    out = _run([build.python, "-c", code], env=build.env(), cwd="/").stdout.split()
    assert out == ["gert._hostnpu", "True", "bytes_d2d", "OrtGraphProvider", "False"]


def test_suite_passes_against_the_toolkit_build(build):
    tests = [os.path.join(build.run_dir, "tests", t) for t in SUITE]
    # -n 2: the run's own xdist workers (this test's worker waits meanwhile)
    r = subprocess.run(
        [build.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "-n", "2", *tests],
        capture_output=True,
        text=True,
        timeout=900,
        env=build.env(),
        cwd=build.run_dir,
    )
    tail = r.stdout[-6000:]
    assert r.returncode == 0, f"the suite failed against the toolkit-mode build:\n{tail}\n{r.stderr[-2000:]}"
    summary = r.stdout.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary, tail
    # host-only tests are skipped there, and say why
    assert re.search(r"SKIPPED \[\d+\] .*host NPU only: needs gert.hostnpu's features", r.stdout), tail
