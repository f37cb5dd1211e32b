"""GE API fidelity: gert's own GE headers declare the GE subset exactly as CANN 8.5 does.

gert builds against its own copy of the GE API (cbindings/include/{ge,graph,exe_graph,parser}/) when no CANN
toolkit is installed. cbindings/probe/ge_probe.cpp states, as static_asserts, every GE signature gert uses
(exact free-function and pointer-to-member types, constructors and their explicit-ness, typedefs, constants,
enumerators, the move-only gert::Tensor / TensorData and their layout size), and the C++ type of every option
key; its optional main() compares the option keys' text and the data type sizes with CANN's.

(a) the probe compiles against our headers, and its main() passes;
(b) its section A compiles against the real, older GE headers in the torch-npu wheel (torch_npu/include:
    ge/ge_api.h, ge/ge_api_types.h, graph/...), and main() passes there too. The wheel has no exe_graph/,
    parser/ or ge/ge_graph_compile_summary.h, and its ge/ge_api.h predates CompileGraph / LoadGraph /
    ExecuteGraphWithStreamAsync / GEGetErrorMsgV2, so section B (those) is checked against our headers only;
(c) the probe is not vacuous: each -DGERT_PROBE_SELFTEST=<n> adds one wrong expectation and breaks the build
    (or, for n=5, main());
and every function, constant, typedef and enumerator our GE headers declare is named in the probe.

The wheel is fetched and cached by tests/test_api_fidelity.py's `real_headers` fixture
($GERT_TORCH_NPU_CACHE, default ~/.cache/gert/torch-npu; skip when unavailable, fail under CI=true).
"""

import re
import subprocess

import pytest

from test_api_fidelity import OUR_INCLUDE, ROOT, _explain, _gxx, _run, real_headers  # noqa: F401 (fixture)

PROBE = ROOT / "cbindings" / "probe" / "ge_probe.cpp"
GE_HEADER_DIRS = ("ge", "graph", "exe_graph", "parser")
SYNTAX_ONLY = ["-std=c++17", "-fsyntax-only"]
REAL_SUBSET = "GERT_PROBE_REAL_SUBSET"


def _compile(include, defines=(), link_to=None):
    cmd = [_gxx(), "-std=c++17"]
    cmd += ["-fsyntax-only"] if link_to is None else ["-o", link_to]
    cmd += [f"-D{d}" for d in defines] + ["-I", include, PROBE]
    return _run(cmd, cwd=ROOT)


def _compile_and_run(include, defines, tmp_path):
    exe = tmp_path / "ge_probe"
    result = _compile(include, ["GERT_PROBE_MAIN", *defines], link_to=exe)
    assert result.returncode == 0, f"the probe's runtime part does not build:\n{_explain(result)}"
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)


# ---------------------------------------------------------------------------------------------------------
# (a) our headers


def test_ge_probe_against_our_headers():
    result = _compile(OUR_INCLUDE)
    assert result.returncode == 0, f"our GE headers differ from the probe:\n{_explain(result)}"


def test_ge_probe_runtime_against_our_headers(tmp_path):
    run = _compile_and_run(OUR_INCLUDE, [], tmp_path)
    assert run.returncode == 0, f"option keys or data type sizes differ from CANN's:\n{run.stdout}{run.stderr}"
    assert "0 mismatches" in run.stdout


def test_our_ge_headers_compile_cleanly():
    """Each public header compiles on its own, warning-free, with C++11 (as CANN's do) and C++17."""
    for std in ("c++11", "c++17"):
        for header in (
            "ge/ge_api.h",
            "parser/onnx_parser.h",
            "exe_graph/runtime/tensor.h",
            "ge/ge_graph_compile_summary.h",
            "graph/tensor.h",
            "graph/graph.h",
            "ge/ge_error_codes.h",
        ):
            result = _run(
                [
                    _gxx(),
                    f"-std={std}",
                    "-fsyntax-only",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-x",
                    "c++",
                    "-I",
                    OUR_INCLUDE,
                    "-",
                ],
                input=f'#include "{header}"\n#include "{header}"\n',
                cwd=ROOT,
            )
            assert result.returncode == 0, f"{header} (-std={std}):\n{_explain(result)}"


# ---------------------------------------------------------------------------------------------------------
# (b) the real headers of the torch-npu wheel (section A)


def test_ge_probe_real_subset_against_real_headers(real_headers):
    include = real_headers.require()
    assert (include / "ge" / "ge_api.h").is_file(), f"{real_headers.wheel.name} has no ge/ge_api.h"
    result = _compile(include, [REAL_SUBSET])
    assert result.returncode == 0, (
        f"CANN's GE headers ({real_headers.wheel.name}) differ from the probe's section A:\n{_explain(result)}"
    )


def test_ge_probe_runtime_against_real_headers(real_headers, tmp_path):
    include = real_headers.require()
    run = _compile_and_run(include, [REAL_SUBSET], tmp_path)
    assert run.returncode == 0, (
        f"option keys or data type sizes differ from {real_headers.wheel.name}'s:\n{run.stdout}{run.stderr}"
    )
    assert "0 mismatches" in run.stdout


def test_real_headers_lack_section_b(real_headers):
    """Section B is ours-only because the wheel really does not declare it: if a newer wheel does, move the
    expectations into section A so that they are checked against CANN too."""
    include = real_headers.require()
    missing = [
        p
        for p in ("exe_graph/runtime/tensor.h", "parser/onnx_parser.h", "ge/ge_graph_compile_summary.h")
        if not (include / p).exists()
    ]
    api = (include / "ge" / "ge_api.h").read_text()
    missing += [
        n
        for n in (
            "ExecuteGraphWithStreamAsync",
            "LoadGraph",
            "CompileGraph",
            "GetCompiledGraphSummary",
            "GEGetErrorMsgV2",
            "GetSessionId",
            "GeSessionLoadGraph",
        )
        if n not in api
    ]
    assert len(missing) == 10, (
        "the torch-npu wheel now declares part of section B; move it into section A of "
        f"cbindings/probe/ge_probe.cpp (still missing: {missing})"
    )


# ---------------------------------------------------------------------------------------------------------
# (c) the probe can fail


def _only_probe_error(result):
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    return len(errors) == 1 and "gert probe:" in errors[0]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_ge_probe_selftest_fails(n):
    result = _compile(OUR_INCLUDE, [f"GERT_PROBE_SELFTEST={n}"])
    assert result.returncode != 0, f"the probe accepted wrong expectation {n}: it checks nothing"
    assert _only_probe_error(result), f"self-test {n} failed, but not (only) on its static_assert:\n{_explain(result)}"


@pytest.mark.parametrize("n", [1, 2])
def test_ge_probe_selftest_fails_against_real_headers(real_headers, n):
    include = real_headers.require()
    result = _compile(include, [REAL_SUBSET, f"GERT_PROBE_SELFTEST={n}"])
    assert result.returncode != 0, f"section A accepted wrong expectation {n} against the real headers"
    assert _only_probe_error(result), _explain(result)


def test_ge_probe_runtime_selftest_fails(tmp_path):
    run = _compile_and_run(OUR_INCLUDE, ["GERT_PROBE_SELFTEST=5"], tmp_path)
    assert run.returncode == 1 and "ge::OPTION_EXEC_DEVICE_ID" in run.stdout and "1 mismatches" in run.stdout, (
        f"main() accepted a wrong option key text:\n{run.stdout}{run.stderr}"
    )


# ---------------------------------------------------------------------------------------------------------
# the probe covers our GE headers

_NOT_API = {
    # keywords and operators that look like calls
    "if",
    "for",
    "while",
    "switch",
    "return",
    "sizeof",
    "decltype",
    "static_assert",
    "static_cast",
    "reinterpret_cast",
    "const_cast",
    "defined",
    "alignof",
    # attribute / visibility macros
    "ATTRIBUTED_DEPRECATED",
    "__attribute__",
    "__declspec",
    # std::hash<ge::AscendString>::operator(), checked through GERT_EXPECT_TYPE(decltype(std::hash...))
    "operator()",
}


def _strip(text):
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    # ATTRIBUTED_DEPRECATED(<a signature>) names the replacement, not a declaration
    return re.sub(r"ATTRIBUTED_DEPRECATED\((?:[^()]|\([^()]*\))*\)", "", text)


def _declarations(text):
    """Names of the public functions, constants, typedefs and enumerators of stripped header text."""
    # inline bodies (innermost first) -> ';', then constructor initializer lists, then private sections
    body = re.compile(r"([)}]\s*(?:const\s*)?(?:noexcept\s*)?(?:->\s*[\w:<>*&\s]+?)?)\{[^{}]*\}")
    while True:
        text, n = body.subn(r"\1;", text)
        if n == 0:
            break
    text = re.sub(r"(\)|\bnoexcept)\s*:(?!:)[^;]*;", r"\1;", text)
    text = re.sub(r"\b(?:private|protected)\s*:.*?(?=\bpublic\s*:|\}\s*;)", "", text, flags=re.S)
    enums = {}
    for enum, members in re.findall(r"\benum\s+(?:class\s+)?(\w+)?\s*(?::\s*[\w:]+\s*)?\{(.*?)\}", text, flags=re.S):
        for member in re.findall(r"(\w+)\s*(?:=[^,]*)?(?:,|$)", members.strip()):
            enums[member] = enum
    text = re.sub(r"\benum\b[^{;]*\{.*?\}", "", text, flags=re.S)
    classes = set(re.findall(r"\b(?:class|struct)\s+(?:\w+\s+)*?(\w+)\s*(?:final\s*)?[:{]", text))
    fns = set()
    no_init = re.sub(r"(?<!operator)(?<![=!<>])=(?!=)[^;]*;", ";", text)  # initializers and default arguments
    for name in re.findall(r"(operator\s*(?:\[\]|==|!=|<=|>=|<|>|\(\))|~?\b[A-Za-z_]\w*)\s*\(", no_init):
        name = re.sub(r"\s+", "", name)
        if name in _NOT_API or name.lstrip("~") in classes or name.startswith(("GE_FUNC", "PARSER_FUNC")):
            continue
        fns.add(name)
    consts = set(
        re.findall(r"(?:^|[;{}])\s*(?:static\s+)?(?:const|constexpr)\b[^;=(){}]*?\b(\w+)\s*(?:=|\{)", text, flags=re.M)
    )
    types = set(re.findall(r"\busing\s+(\w+)\s*=", text))
    return fns, consts, types, enums


def test_probe_covers_our_ge_headers():
    headers = [p for d in GE_HEADER_DIRS for p in sorted((OUR_INCLUDE / d).rglob("*.h"))]
    text = "\n".join(_strip(p.read_text()) for p in headers if p.name != "c_types.h")
    fns, consts, types, enums = _declarations(text)
    assert {"ExecuteGraphWithStreamAsync", "aclgrphParseONNX", "MutableTensorData", "GetOutputDtypes"} <= fns, (
        f"could not parse cbindings/include: {sorted(fns)}"
    )
    assert {"ACL_ERROR_GE_PARAM_INVALID", "kDynamicDims", "kMaxDimNum"} <= consts and len(enums) >= 100, (
        "could not parse cbindings/include"
    )
    probe = re.sub(r"\s+", "", _strip(PROBE.read_text()))

    def named(name):
        if name.startswith("operator"):
            return f",{name}," in probe
        return re.search(rf"(?<![\w~]){re.escape(name)}(?!\w)", probe) is not None

    problems = [f"function {n}" for n in sorted(fns) if not named(n)]
    problems += [f"constant {n}" for n in sorted(consts) if not named(n)]
    problems += [f"typedef {n}" for n in sorted(types) if not named(n)]
    problems += [
        f"enumerator {m} of {e}"
        for m, e in sorted(enums.items())
        if not m.startswith("C_") and not re.search(rf"GERT_EXPECT_ENUM\([\w:]*{e},[\w:]*\b{m},", probe)
    ]
    assert not problems, (
        "declared in cbindings/include/{ge,graph,exe_graph,parser} but not checked by "
        "cbindings/probe/ge_probe.cpp:\n" + "\n".join(problems)
    )
