"""Build gert._cann: Cython bindings linked against a CANN toolkit, or with the host NPU built in.

Backend selection (shared/docs/design.md):
- GERT_BACKEND=hostnpu forces the host NPU;
- otherwise, ASCEND_HOME_PATH or ASCEND_TOOLKIT_HOME pointing at a toolkit links ascendcl;
- otherwise the host NPU (cbindings/hostnpu/) is compiled into the extension.
"""
import glob
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
CB = "cbindings"


def toolkit_root():
    if os.environ.get("GERT_BACKEND", "").lower() == "hostnpu":
        return None
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        root = os.environ.get(var)
        if root and os.path.isdir(os.path.join(root, "include", "acl")):
            return root
    return None


def extension():
    root = toolkit_root()
    common = dict(
        language="c++",
        extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden", "-Wno-unused-function"],
        include_dirs=[CB],
    )
    if root is None:
        return Extension(
            "gert._cann",
            sources=[f"{CB}/_cann.pyx"] + sorted(glob.glob(f"{CB}/hostnpu/*.cpp")),
            define_macros=[("GERT_HOSTNPU", "1")],
            extra_link_args=["-pthread"],
            **{**common, "include_dirs": [f"{CB}/include"] + common["include_dirs"]},
        )
    inc = os.path.join(root, "include")
    return Extension(
        "gert._cann",
        sources=[f"{CB}/_cann.pyx"],
        define_macros=[("_GLIBCXX_USE_CXX11_ABI", "0")],
        library_dirs=[os.path.join(root, "lib64")],
        runtime_library_dirs=[os.path.join(root, "lib64")],
        libraries=["ascendcl"],
        **{**common, "include_dirs": [inc] + common["include_dirs"]},
    )


setup(
    ext_modules=cythonize(
        [extension()],
        include_path=[CB],
        compiler_directives={"language_level": "3", "embedsignature": True},
        build_dir="build/cython",
    ),
)
