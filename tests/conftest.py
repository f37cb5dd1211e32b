"""Shared fixtures for the gert runtime tests (issue 2).

The ACL runtime is process-global: anything that closes the last Device (aclFinalize) or needs a different
host NPU configuration (GERT_HOST_DEVICES, GERT_HOST_DEVICE_MEMORY, GERT_HOST_CUBE_CORES, ...) runs in a
subprocess through ``_helpers.run_python``. In this process one Device(0) stays open for the whole session, so no
test can finalize the runtime under another one, whatever the order.
"""

from __future__ import annotations

import gc
import os

import pytest
from hypothesis import HealthCheck, settings

# The suite's processes (pytest-xdist's workers, the servers and children tests start) are not one deployment: the
# host NPU's cores are not shared between them (cbindings/hostnpu/host_cores.h), so a test's thread counts do not
# depend on what another worker runs meanwhile. tests/test_shared_cores.py turns it on in its own processes.
os.environ.setdefault("GERT_HOST_SHARED_CORES", "0")

import gert

settings.register_profile(
    "gert",
    deadline=None,  # stream hand-offs on a loaded 2-core machine have a long tail
    database=None,  # no example database: every run starts fresh, results do not depend on past runs
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("gert")
# tests/test_fuzz_rows.py's long run (`--hypothesis-profile long`, benchmarks/fuzz_rows.py): GERT_FUZZ_EXAMPLES examples
settings.register_profile(
    "long", parent=settings.get_profile("gert"), max_examples=int(os.environ.get("GERT_FUZZ_EXAMPLES", "3000"))
)


@pytest.fixture(scope="session")
def device():
    """One Device(0) held open for the session, so in-process tests never finalize the runtime.

    Every runtime test module requests it (``pytestmark`` in _helpers.RUNTIME), so it opens before any of
    their tests runs and closes at the end of the session."""
    d = gert.Device(0)
    yield d
    gc.collect()
    d.close()


@pytest.fixture(scope="module")
def streams(device):
    """Three streams shared by the tests of a module (each test synchronizes what it queued)."""
    ss = [gert.Stream(device) for _ in range(3)]
    yield ss
    for s in ss:
        s.destroy()


@pytest.fixture(scope="module")
def session(device):
    """A GE Session shared by the tests of a module."""
    s = gert.Session()
    yield s
    s.close()


@pytest.fixture(scope="module")
def stream(device):
    """A stream locked to one cube core (the host NPU computes its graphs on one thread), shared by a module."""
    st = gert.Stream(device)
    st.cube_cores = 1
    yield st
    st.destroy()


# ---- host-NPU-only tests ------------------------------------------------------------------------------------------
# Built against a toolkit (gert.backend() == 'cann'), gert must work as on real CANN, which has none of the host
# NPU's own features. When that toolkit is the host NPU (tests/test_toolkit_build.py), gert._hostnpu still provides
# them (its compute provider is what computes the graphs), so the suite withdraws them here: a test that uses one
# without the hostnpu_only mark then fails, as it would on real CANN, instead of passing only because of the host NPU.
if gert.backend() == "cann":
    gert.hostnpu._module = None

HOSTNPU_SKIP_REASON = (
    f"host NPU only: needs gert.hostnpu's features (counters, spin time, compute provider), "
    f"which a build against a CANN toolkit ({gert._cann.toolkit_root()}) does not have"
)


# ---- running in parallel (pytest-xdist, pyproject's addopts) ------------------------------------------------------
# Each xdist worker is a process of its own: its own ACL runtime and host NPU (so the Device(0) above is per worker,
# and no test finalizes the runtime under another), its own temp dirs (tmp_path / tmp_path_factory live under
# basetemp/popen-gwN) and its own block of ports (tests/_ports.py). `--dist loadgroup` sends the tests of one
# xdist_group to one worker, one after the other: every module is its own group (its module-scoped servers, builds
# and models are made once, and its tests keep their order relative to each other: the order pytest-randomly gave
# them), except the modules below, whose many tests share nothing and are spread over the workers.
SPREAD = {"test_onnx_backend.py"}  # ~1900 independent ONNX node cases
# The longest groups start first, so that none of them is left to run alone at the end (seconds on an idle 2-core
# machine, roughly): the toolkit build and the suite against it, the AddressSanitizer build of the host NPU, RapidOCR
# on ONNX Runtime and on gert, the ONNX model dump, the Triton servers, the soak.
SLOW_FIRST = [
    "test_toolkit_build.py",
    "test_streams_events.py",
    "test_rapidocr_on_gert.py",
    "test_onnx_model_reader.py",
    "test_triton_e2e.py",
    "test_soak.py",
    "test_ge_api_fidelity.py",
    "test_triton_sequences.py",
    "test_triton_e2e_faults.py",
    "test_model.py",
    "test_api_fidelity.py",
    "test_triton_bad_inputs.py",
]


# tryfirst: before xdist reads the xdist_group marks; pytest-randomly's wrapper has shuffled the items already, and
# the stable sort keeps its order within these rules
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.path.name
        if module not in SPREAD and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(name=module))
    rank = {m: i for i, m in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keeps its order
    if gert.hostnpu.available():
        return
    skip = pytest.mark.skip(reason=HOSTNPU_SKIP_REASON)
    for item in items:
        if item.get_closest_marker("hostnpu_only"):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, config):
    """The order's seed also under -q (pytest-randomly prints it only in the header, which -q leaves out)."""
    seed = getattr(config.option, "randomly_seed", None)
    if config.pluginmanager.hasplugin("randomly") and seed is not None:
        terminalreporter.write_line(f"random order: replay it with -p randomly --randomly-seed={seed}")
