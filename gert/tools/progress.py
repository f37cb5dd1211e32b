"""Progress of long work (compiling gears, a bench sweep): a tqdm bar when tqdm is installed, plain lines otherwise.

Library calls show progress only when asked (``progress=True``); ``Progress(enabled=False)`` prints nothing.
"""

from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    """``total`` steps of ``desc``; ``step(text)`` after each. Writes to stderr (or ``file``)."""

    def __init__(self, total: int, desc: str, enabled: bool = True, file: TextIO | None = None):
        self.total = total
        self.desc = desc
        self.done = 0
        self.enabled = enabled
        self.file = file
        self._bar = None
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=total, desc=desc, file=file or sys.stderr, leave=True, dynamic_ncols=True)

    def step(self, text: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        if self._bar is not None:
            if text:
                self._bar.set_postfix_str(text, refresh=False)
            self._bar.update(1)
        else:
            print(f"{self.desc}: [{self.done}/{self.total}] {text}".rstrip(), file=self.file or sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
