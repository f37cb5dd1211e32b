"""Types of gert.core._core_share (gert/core/_core_share.pyx, compiled): a stream's core limits set per launch when
its device's streams share the cores by load. Checked against the built module by mypy's stubtest
(tests/test_stubs.py)."""

from typing import Any, Callable, Optional, Tuple, final

@final
class CoreShare:
    """One stream's share: ``busy()`` counts its device's streams in use now."""

    def __init__(self, busy: Callable[[], int]) -> None: ...
    @property
    def busy(self) -> Callable[[], int]: ...
    def holds(self, stream: Any, busy: int) -> bool: ...
    def apply(self, stream: Any, device_cores: Tuple[int, int]) -> Optional[Tuple[int, int]]: ...
