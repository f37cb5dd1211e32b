"""A host NPU graph's model read again from its file when the provider needs its bytes after the compile.

A GE graph parsed from a model file (aclgrphParseONNX) keeps no copy of the file's bytes (cbindings/hostnpu ModelBytes:
the open file and digests of its bytes): it reads them again for each compile. An executable the provider compiled
from such a graph keeps a ModelFile in their place, for what needs the bytes later: a session with another thread
count (a run beside another), the model's structure for shape inference once its skeleton left the provider's cache.
Before, the executable held the graph's bytes for its life (PP-OCR rec: 10.6 MB per process; issue 41).
"""

from __future__ import annotations

import hashlib
import os


class ModelFile:
    """The model file a graph was parsed from: ``path`` (the host NPU's /proc/self/fd/N of the file it parsed, so a
    file replaced by a rename since reads as the one parsed), its size and blake2b digest (16 bytes) of the bytes
    compiled. ``read()`` gives those bytes again, or a ValueError naming the file when they changed."""

    __slots__ = ("path", "name", "size", "digest")

    def __init__(self, path: str, size: int, digest: bytes):
        self.path = path
        try:
            self.name = os.readlink(path)  # the file's own path, for errors
        except OSError:
            self.name = path
        self.size = size
        self.digest = digest

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        """The model's bytes, checked against the ones compiled."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ValueError(f"the model file {self.name!r} cannot be read again: {e.strerror}") from None
        if len(data) != self.size or hashlib.blake2b(data, digest_size=16).digest() != self.digest:
            raise ValueError(
                f"the model file {self.name!r} changed since its graph was compiled ({self.size} bytes then, "
                f"{len(data)} now, other content); load the model again"
            )
        return data

    def __repr__(self) -> str:
        return f"ModelFile({self.name!r}, {self.size} bytes)"
