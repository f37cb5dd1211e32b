"""gert.hostnpu: the host NPU's own features are found where the build put them, and a build without them (a real
CANN toolkit) says so clearly instead of failing somewhere deeper."""

import pytest

import gert
from gert import hostnpu


def test_features_come_from_the_module_the_build_has():
    if gert.backend() == "hostnpu":  # built in
        assert hostnpu._module is gert._cann and gert._cann.toolkit_root() == ""
    elif hostnpu.available():  # toolkit mode against the host NPU packaged as a toolkit
        assert hostnpu._module.__name__ == "gert._hostnpu"
    assert gert.host_counters is hostnpu.host_counters and gert.host_counters.__name__ == "host_counters"


@pytest.mark.hostnpu_only
def test_features_work_where_present():
    c = gert.host_counters()
    assert set(c) >= {"bytes_h2d", "device_memory_in_use", "streams_alive"}
    before = gert.host_spin_micros()
    assert gert.host_spin_micros(before + 7) == before + 7
    gert.host_spin_micros(before)
    assert type(hostnpu.host_provider()).__name__ == "OrtGraphProvider"
    with pytest.raises(ValueError, match="value must be >= 0, got -1"):
        gert.host_spin_micros(-1)


@pytest.mark.parametrize(
    "name",
    ["host_counters", "reset_host_counters", "host_spin_micros", "host_provider", "inject_fault", "clear_faults"],
)
def test_without_them_each_raises_a_gert_error_naming_itself_and_the_toolkit(monkeypatch, name):
    monkeypatch.setattr(hostnpu, "_module", None)  # what a build against real CANN has
    assert not hostnpu.available()
    with pytest.raises(gert.GertError) as ei:
        getattr(hostnpu, name)()
    msg = str(ei.value)
    assert f"gert.{name}() is a host NPU feature" in msg and "CANN toolkit" in msg and "available() is False" in msg
