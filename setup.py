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

from Cython.Build import cythonize
from setuptools import Extension, setup

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


setup(
    ext_modules=cythonize(
        extensions(),
        include_path=[CB],
        compiler_directives={"language_level": "3", "embedsignature": True},
        build_dir="build/cython",
    ),
)
