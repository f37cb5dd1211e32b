#!/usr/bin/env python3
"""Build the host NPU as a CANN-shaped toolkit, so gert can be built in toolkit mode against it.

    python cbindings/hostnpu/build_toolkit.py DIR [-j 2]
    ASCEND_HOME_PATH=DIR pip install .

DIR gets what a CANN 8.5 install has where gert looks (shared/docs/cann-api.md section 7):
- include/: the CANN headers gert uses (acl/, ge/, graph/, parser/, exe_graph/), plus gert_host/, the host NPU's own
  API (counters, compute provider), which only this toolkit has;
- lib64/: the host NPU split into CANN's libraries, each exporting what its namesake exports (libascendcl.so: acl*;
  libgraph.so: ge::Graph, AscendString, Tensor, GetSizeInBytes...; libge_runner.so: GEInitialize, ge::Session...;
  libfmk_onnx_parser.so: aclgrphParseONNX*), and empty ones where CANN has a library the host NPU needs nothing in;
  built with -D_GLIBCXX_USE_CXX11_ABI=0, like CANN;
- set_env.sh (ASCEND_TOOLKIT_HOME, ASCEND_HOME_PATH, LD_LIBRARY_PATH), version.info, and gert_hostnpu.info: the
  marker by which gert's setup.py knows the toolkit is the host NPU and builds gert._hostnpu too.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(os.path.dirname(HERE), "include")
HEADER_DIRS = ("acl", "ge", "graph", "parser", "exe_graph", "gert_host")
CANN_VERSION = "8.5.0"  # the CANN release whose API and behaviour the host NPU follows
MARKER = "gert_hostnpu.info"

# library -> (host NPU sources, libraries it links). Empty sources: CANN has the library (gert links it), the host
# NPU has nothing separate to put in it.
LIBRARIES: dict[str, tuple[list[str], list[str]]] = {
    "ascendcl": (["device.cpp", "errors.cpp", "faults.cpp", "host_cores.cpp", "memory.cpp", "stream.cpp"], []),
    "graph": (["ge_types.cpp", "ge_graph.cpp", "onnx_model.cpp", "sha256.cpp"], []),
    "ge_runner": (["ge_session.cpp", "ge_cache.cpp"], ["graph", "ascendcl"]),
    "fmk_onnx_parser": (["onnx_parser.cpp"], ["graph"]),
    "graph_base": ([], []),
    "ge_common": ([], []),
    "ge_common_base": ([], []),
    "ge_compiler": ([], []),
    "fmk_parser": ([], []),
}
CXXFLAGS = ["-std=c++17", "-O2", "-fPIC", "-pthread", "-D_GLIBCXX_USE_CXX11_ABI=0", "-Wno-unused-function"]


def _run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"build_toolkit: command failed ({r.returncode}): {shlex.join(cmd)}\n{r.stdout}")


def build(root: str, jobs: int = 2, cxx: str = "") -> str:
    """Write the toolkit into ``root`` (created; an existing lib64/include is replaced). Returns the absolute root."""
    root = os.path.abspath(root)
    cxx = cxx or os.environ.get("CXX", "g++")
    lib64, inc = os.path.join(root, "lib64"), os.path.join(root, "include")
    for d in (lib64, inc):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(lib64)
    for d in HEADER_DIRS:
        shutil.copytree(os.path.join(INCLUDE, d), os.path.join(inc, d))
    with tempfile.TemporaryDirectory(prefix="gert-toolkit-") as tmp:
        empty = os.path.join(tmp, "empty.cpp")
        with open(empty, "w") as f:
            f.write("// the host NPU has nothing separate in this library\n")
        sources = sorted({s for srcs, _ in LIBRARIES.values() for s in srcs})
        unplaced = sorted(set(n for n in os.listdir(HERE) if n.endswith(".cpp")) - set(sources))
        if unplaced:  # a new host NPU source must be put in the library its API belongs to
            raise SystemExit(f"build_toolkit: {unplaced} belong to no library in LIBRARIES")
        objects = {s: os.path.join(tmp, s.replace(".cpp", ".o")) for s in sources}
        objects["empty.cpp"] = os.path.join(tmp, "empty.o")

        def compile_one(src: str) -> None:
            path = empty if src == "empty.cpp" else os.path.join(HERE, src)
            _run([cxx, *CXXFLAGS, "-I", INCLUDE, "-I", HERE, "-c", path, "-o", objects[src]])

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            list(pool.map(compile_one, [*sources, "empty.cpp"]))
        # Link in dependency order (each library's own dependencies first), refusing undefined symbols.
        done: set = set()

        def link(name: str) -> None:
            if name in done:
                return
            srcs, deps = LIBRARIES[name]
            for d in deps:
                link(d)
            out = os.path.join(lib64, f"lib{name}.so")
            objs = [objects[s] for s in srcs] or [objects["empty.cpp"]]
            _run(
                [
                    cxx,
                    "-shared",
                    "-pthread",
                    "-o",
                    out,
                    *objs,
                    f"-Wl,-soname,lib{name}.so",
                    "-Wl,--no-undefined",
                    "-Wl,-rpath,$ORIGIN",
                    "-L",
                    lib64,
                    *[f"-l{d}" for d in deps],
                ]
            )
            done.add(name)

        for name in LIBRARIES:
            link(name)
    _write(os.path.join(root, "version.info"), f"Version={CANN_VERSION}\n")
    _write(
        os.path.join(root, MARKER),
        f"toolkit=gert host NPU\nfollows=CANN {CANN_VERSION}\nlibraries={' '.join(LIBRARIES)}\n",
    )
    q = shlex.quote(root)
    _write(
        os.path.join(root, "set_env.sh"),
        "# gert host NPU toolkit: the environment CANN's set_env.sh sets. Use: source set_env.sh\n"
        f"export ASCEND_TOOLKIT_HOME={q}\n"
        f"export ASCEND_HOME_PATH={q}\n"
        f"export LD_LIBRARY_PATH={q}/lib64${{LD_LIBRARY_PATH:+:${{LD_LIBRARY_PATH}}}}\n",
    )
    return root


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", help="where to write the toolkit (include/, lib64/, set_env.sh)")
    p.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="parallel compiles")
    args = p.parse_args(argv)
    root = build(args.dir, args.jobs)
    print(f"host NPU toolkit written to {root}\n  source {root}/set_env.sh && pip install .   (gert in toolkit mode)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
