"""The Python backend's shared-memory regions of a gert serve that is gone (kill -9, the OOM killer, a reboot of the
container but not of its /dev/shm).

gert serve gives each server start a region prefix of its own (gert_triton.triton_args.new_shm_prefix) and removes
a start's regions when that server exits. A gert serve killed outright removes nothing: its regions (1 MiB and up
per stub, in RAM: /dev/shm is tmpfs) stay until reboot. So each gert serve holds an flock on
``/dev/shm/<prefix>lock`` for its life, and a gert serve starting removes the regions of every prefix whose lock
nobody holds. The pid in a prefix cannot tell whether its gert serve lives: containers that share /dev/shm see
other pids; an flock is held by whoever has the file open, in any pid namespace. Only files of this user are
touched, never through a symbolic link, and only names of gert's own prefix pattern.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
from typing import List, Optional

SHM_DIR = "/dev/shm"
LOCK = "lock"  # the lock file's name after the prefix (a server start's regions follow it with "<generation>_")
_PREFIX = re.compile(r"gert_[0-9]+_r[0-9]+_[0-9a-f]{6}_")


def _own_file(path: str) -> bool:
    """A regular file (not a link) of this user."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


class PrefixClaim:
    """This gert serve's hold on its region prefix: the lock file, created locked (under a temporary name, renamed
    once locked, so that no other gert serve ever sees it unlocked), held until release()."""

    def __init__(self, prefix: str, shm_dir: str = SHM_DIR):
        if not _PREFIX.fullmatch(prefix):
            raise ValueError(f"shared-memory prefix {prefix!r} is not of gert serve's pattern gert_PID_rN_HEX_")
        self.prefix, self.shm_dir = prefix, shm_dir
        self.path = os.path.join(shm_dir, prefix + LOCK)
        temp = f"{self.path}.{os.getpid()}.tmp"
        self._fd: Optional[int] = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(temp, self.path)
        except BaseException:
            os.close(self._fd)
            self._fd = None
            os.unlink(temp)
            raise

    def release(self) -> None:
        """Remove this prefix's regions and the lock file (gert serve is ending), then let go of the lock."""
        if self._fd is None:
            return
        _remove_prefix(self.shm_dir, self.prefix)
        os.close(self._fd)
        self._fd = None


def _remove_prefix(shm_dir: str, prefix: str) -> int:
    """Remove this user's regular files named ``prefix*`` in ``shm_dir``, the lock file last; how many."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return 0
    lock = prefix + LOCK
    n = 0
    for name in sorted(names, key=lambda v: v == lock):
        path = os.path.join(shm_dir, name)
        if name.startswith(prefix) and _own_file(path):
            try:
                os.unlink(path)
                n += 1
            except OSError:
                pass
    return n


def remove_orphans(shm_dir: str = SHM_DIR) -> List[tuple]:
    """Remove the regions of every gert serve prefix in ``shm_dir`` whose lock file nobody holds: (prefix, files
    removed) for each."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    removed = []
    for name in names:
        if not name.endswith(LOCK) or not _PREFIX.fullmatch(name[: -len(LOCK)]):
            continue
        path = os.path.join(shm_dir, name)
        if not _own_file(path):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its gert serve lives
                continue
            prefix = name[: -len(LOCK)]
            removed.append((prefix, _remove_prefix(shm_dir, prefix)))
        finally:
            os.close(fd)
    return removed
