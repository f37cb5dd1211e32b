"""A file written whole or not at all: a temporary file beside the path, renamed over it once written.

A reader (a viewer opening a trace, another process reading a compile-cache record) sees no file or the whole
file, never a half-written one; a write that fails leaves the previous file as it was and no temporary file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", perms: int = 0o666, durable: bool = False) -> Iterator[IO]:
    """The open temporary file (``mode`` "w" or "wb", created with ``perms`` under the umask); on a clean exit it
    replaces ``path``. ``durable``: the data and the rename are on disk (fsync of the file and of its directory)
    before this returns."""
    # a new file under an unpredictable name (as mkstemp, but with ``perms``): O_EXCL | O_NOFOLLOW never open a file
    # or symlink someone else planted at the name (a shared directory such as a group's compile cache)
    for _ in range(100):
        tmp = f"{path}.tmp{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(8)}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, perms)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"{path}: no free temporary name after 100 tries")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
