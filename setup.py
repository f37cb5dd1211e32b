"""Build gert._cann: Cython bindings linked against a CANN toolkit, or with the host NPU built in.

Backend selection (shared/docs/design.md):
- GERT_BACKEND=hostnpu forces the host NPU;
- otherwise, ASCEND_HOME_PATH or ASCEND_TOOLKIT_HOME pointing at a toolkit links CANN's libraries (toolkit mode:
  _cann.pyx, CANN's API only); when that toolkit is the host NPU packaged as one (cbindings/hostnpu/build_toolkit.py,
  marker file gert_hostnpu.info), gert._hostnpu is built too: the host NPU's own features, linked to the toolkit;
- otherwise the host NPU (cbindings/hostnpu/) is compiled into the extension (_cann_hostnpu.pyx).
"""

import glob
import json
import os
from concurrent.futures import ThreadPoolExecutor

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
CB = "cbindings"


def toolkit_root():
    """The toolkit's root (the folder holding include/acl and lib64), or None for the host NPU."""
    if os.environ.get("GERT_BACKEND", "").lower() == "hostnpu":
        return None
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        root = os.environ.get(var)
        if not root:
            continue
        # CANN 8.5: <root>/include; older toolkits: <root>/<arch>-linux/include
        for cand in (root, *sorted(glob.glob(os.path.join(root, "*-linux")))):
            if os.path.isdir(os.path.join(cand, "include", "acl")):
                return os.path.abspath(cand)
    return None


# written by cbindings/hostnpu/build_toolkit.py: the toolkit is the host NPU
HOSTNPU_MARKER = "gert_hostnpu.info"


# cann-api.md section 7: GE, the ONNX parser and ACL (as GE's examples/recommendation links them)
CANN_LIBRARIES = [
    "ascendcl",
    "ge_runner",
    "graph",
    "graph_base",
    "ge_common",
    "ge_common_base",
    "fmk_parser",
    "fmk_onnx_parser",
]


def core_extensions(common: dict) -> list:
    """The runtime core's compiled modules, on every backend (no link to CANN): gert.core._locks (a StreamQueue's
    Lock, a stream's HandOffLock), gert.core._free_streams (a StreamQueue's take and give-back), gert.core._core_share
    (a stream's core limits shared by load), gert.core._split
    (a batch's outputs split into its requests' rows), gert.core._merge (requests' rows merged into one batch: Rows)
    and gert.core._hotpath (the request pipeline's compiled hot path: it cimports those five, gert/core/*.pxd, and
    calls gert._cann through a capsule)."""
    return [
        Extension(f"gert.core.{name}", sources=[f"gert/core/{name}.pyx"], **common)
        for name in ("_locks", "_free_streams", "_core_share", "_split", "_merge", "_hotpath")
    ]


def extensions():
    root = toolkit_root()
    common = dict(
        language="c++",
        extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden", "-Wno-unused-function"],
    )
    if root is None:
        return [
            *core_extensions(common),
            Extension(
                "gert._cann",
                sources=[f"{CB}/_cann_hostnpu.pyx"] + sorted(glob.glob(f"{CB}/hostnpu/*.cpp")),
                define_macros=[("GERT_HOSTNPU", "1")],
                include_dirs=[f"{CB}/include", CB],
                extra_link_args=["-pthread"],
                **common,
            ),
        ]
    inc = os.path.join(root, "include")
    libdirs = [
        d for d in (os.path.join(root, "lib64"), os.path.join(root, "compiler", "lib64", "stub")) if os.path.isdir(d)
    ]
    toolkit = dict(
        define_macros=[("_GLIBCXX_USE_CXX11_ABI", "0"), ("GERT_TOOLKIT_ROOT", json.dumps(root, ensure_ascii=False))],
        include_dirs=[inc] + [os.path.join(inc, d) for d in ("ge", "parser", "acl")] + [CB],
        library_dirs=libdirs,
        runtime_library_dirs=libdirs[:1],
        **common,
    )
    exts = [
        *core_extensions(common),
        Extension(
            "gert._cann",
            sources=[f"{CB}/_cann.pyx", f"{CB}/hostnpu/onnx_model.cpp"],  # the ONNX I/O reader needs no toolkit
            libraries=CANN_LIBRARIES,
            **toolkit,
        ),
    ]
    if os.path.isfile(os.path.join(root, HOSTNPU_MARKER)):
        toolkit["define_macros"] = toolkit["define_macros"] + [("GERT_HOSTNPU_MODULE", "1")]
        exts.append(
            Extension("gert._hostnpu", sources=[f"{CB}/_hostnpu.pyx"], libraries=["ge_runner", "ascendcl"], **toolkit)
        )
    return exts


def build_jobs() -> int:
    """Compiler processes per extension: GERT_BUILD_JOBS, else the CPUs this process may run on."""
    if os.environ.get("GERT_BUILD_JOBS"):
        return max(1, int(os.environ["GERT_BUILD_JOBS"]))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class ParallelBuildExt(build_ext):
    """build_ext that compiles an extension's sources in parallel (``build_jobs()`` compilers). setuptools compiles
    one extension's sources one after the other, and gert._cann with the host NPU is one extension of ~20 C++
    files: one core did the whole build (83 s on a 2-core machine). The compile step is distutils' own (its
    _setup_compile / _compile, as pybind11's ParallelCompile calls them), only spread over threads."""

    def build_extensions(self) -> None:
        jobs = build_jobs()
        if jobs > 1:
            compiler = self.compiler

            def compile_parallel(
                sources,
                output_dir=None,
                macros=None,
                include_dirs=None,
                debug=0,
                extra_preargs=None,
                extra_postargs=None,
                depends=None,
            ):
                macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
                    output_dir, macros, include_dirs, sources, depends, extra_postargs
                )
                cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

                def one(obj):
                    if obj in build:
                        src, ext = build[obj]
                        compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

                with ThreadPoolExecutor(jobs) as pool:
                    list(pool.map(one, objects))  # (list: a failed compile raises here)
                return objects

            compiler.compile = compile_parallel
        super().build_extensions()


setup(
    cmdclass={"build_ext": ParallelBuildExt},
    ext_modules=cythonize(
        extensions(),
        include_path=[CB],
        compiler_directives={"language_level": "3", "embedsignature": True},
        build_dir="build/cython",
    ),
)
