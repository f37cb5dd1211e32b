"""gert.core._core_share.CoreShare: a stream's core limits set per launch when its device's streams share the cores by
load (the Model-level behaviour: tests/test_model.py test_streams_share_the_devices_cores_by_load)."""

from __future__ import annotations

from gert.core._core_share import CoreShare


class _LimitedStream:
    """A stand-in stream: its limits, and how often each was set (aclrtSetStreamResLimit)."""

    def __init__(self) -> None:
        self.sets = 0
        self._cube = self._vector = 0

    @property
    def cube_cores(self) -> int:
        return self._cube

    @cube_cores.setter
    def cube_cores(self, n: int) -> None:
        self.sets += 1
        self._cube = n

    @property
    def vector_cores(self) -> int:
        return self._vector

    @vector_cores.setter
    def vector_cores(self, n: int) -> None:
        self.sets += 1
        self._vector = n


def test_core_share_sets_a_streams_limits_only_when_the_load_changed():
    busy = [1]
    share = CoreShare(lambda: busy[0])
    s = _LimitedStream()
    assert share.apply(s, (4, 8)) == (4, 8) and s.sets == 2
    assert share.apply(s, (4, 8)) is None and s.sets == 2  # the same load: no runtime call
    busy[0] = 3
    assert share.apply(s, (4, 8)) == (1, 2)  # 4 // 3 and 8 // 3
    busy[0] = 9
    assert share.apply(s, (4, 8)) == (1, 1)  # never below one core
    busy[0] = 0  # (a launch read between a take and its count: as one)
    assert share.apply(s, (4, 8)) == (4, 8)
    t = _LimitedStream()  # a new stream after a device recovery: set again at the same load
    assert share.apply(t, (4, 8)) == (4, 8)
    u = _LimitedStream()
    assert CoreShare(lambda: 2).apply(u, (2, 0)) == (1, 0) and u.sets == 1  # no vector cores: not set
