"""Types of gert.core._split (gert/core/_split.pyx, compiled): a batch's outputs split into its requests' rows, for
gert.core.batching and the compiled hot path alike. Checked against the built module by mypy's stubtest
(tests/test_stubs.py)."""

from typing import Any, List, Mapping, Optional, Sequence

def take(value: Any, axis: Optional[int], start: int, rows: int) -> Any: ...
def split(out: Mapping[str, Any], rows: Sequence[int], axes: Mapping[str, Optional[int]]) -> List[dict]: ...
