"""Benchmarks run by pytest-benchmark. `python -m pytest -q` runs each once with benchmarking disabled (a smoke run,
small sizes); `python -m pytest benchmarks/ --benchmark-only --benchmark-enable` measures."""

from __future__ import annotations

import pytest

import gert


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Measuring runs in one process: pyproject's addopts run the suite on xdist workers (-n), under which
    pytest-benchmark refuses to measure, so --benchmark-only / --benchmark-enable turn the workers off (as -n 0)."""
    if config.getoption("benchmark_only", False) or config.getoption("benchmark_enable", False):
        if hasattr(config.option, "numprocesses"):
            config.option.numprocesses = 0
            config.option.dist = "no"


@pytest.fixture(scope="session", autouse=True)
def device():
    """Device(0) held open for the session, as in tests/: no benchmark finalizes the runtime under another."""
    if gert.backend() != "hostnpu" and gert.device_count() == 0:
        pytest.skip("no device")
    with gert.Device(0) as dev:
        yield dev


@pytest.fixture
def measuring(benchmark) -> bool:
    """True when pytest-benchmark measures; False in the smoke run (--benchmark-disable), which uses small sizes."""
    return not benchmark.disabled
