"""Who may write a compile cache directory, and whether a file in it is one gert may serve.

A cache entry decides what every model loaded from the directory computes (GE takes a hit without comparing
anything: docs in gert/core/compile_cache.py), so the directory must be writable only by those the user trusts:

- this user and root, always;
- the directory's group too, when ``cache_mode`` (``GERT_CACHE_MODE``) grants the group write access (``0o770``,
  ``0o2770``): a cache shared by services running as different users of one group.

gert creates a missing directory with ``cache_mode`` (default ``0o700``) and refuses one that others can write
(world-writable without the sticky bit, group-writable when the group is not trusted) or that another non-root user
owns. In a sticky directory others can still add files: each file of an entry is therefore checked too (a symlink
out of the directory, a file owned by someone untrusted, or writable by someone untrusted, is a broken entry).
"""
from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass
from typing import Optional, Union

from gert.errors import GertError

MODE_ENV = "GERT_CACHE_MODE"
DEFAULT_MODE = 0o700
_ALLOWED_BITS = 0o2775  # setgid (new files take the directory's group), owner rwx, group rwx, others r-x


def parse_mode(value: Union[int, str, None], what: str = "cache_mode") -> int:
    """``cache_mode`` as an int: an int, or an octal string ("0o770", "0770", "770"); None: ``GERT_CACHE_MODE``, else
    0o700. The owner needs rwx; others may never write (a world-writable cache is a way in, not a cache)."""
    if value is None:
        value = os.environ.get(MODE_ENV) or None
        what = MODE_ENV if value is not None else what
    if value is None:
        return DEFAULT_MODE
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise GertError(f"{what}: expected an octal mode such as 0o700 or '0770', got {type(value).__name__} "
                        f"{value!r}")
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            mode = int(text[2:] if text.startswith("0o") else text, 8)
        except ValueError:
            raise GertError(f"{what}: expected an octal mode such as '0700' or '0o770', got {value!r}") from None
    else:
        mode = value
    if mode & 0o002:
        raise GertError(f"{what}: {oct(mode)} lets every user write the cache, which decides what every model "
                        f"loaded from it computes; use 0o700 (this user) or 0o770 / 0o2770 (this user's group)")
    if mode & ~_ALLOWED_BITS or mode & 0o700 != 0o700:
        raise GertError(f"{what}: {oct(mode)} is not a cache directory mode: the owner needs rwx (0o700), and "
                        f"only the setgid bit and group rwx / others r-x may be added (e.g. 0o700, 0o750, 0o770, "
                        f"0o2770)")
    return mode


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"


def _my_groups() -> set:
    return {os.getegid(), *os.getgroups()}


@dataclass(frozen=True)
class Trust:
    """The trust policy of one cache directory: its mode and owner/group as checked at open."""

    directory: str  # absolute, symlinks resolved
    mode: int       # cache_mode
    gid: int        # the directory's group (trusted when the mode grants the group write access)

    @property
    def group_shared(self) -> bool:
        return bool(self.mode & 0o020)

    def trusted_owner(self, uid: int, gid: int) -> bool:
        """Whether a file owned by uid:gid may be served: this user, root, or the shared group's."""
        return uid in (os.geteuid(), 0) or (self.group_shared and gid == self.gid)

    def file_problem(self, path: str, name: str) -> Optional[str]:
        """Why the entry file at ``path`` (``name`` as the entry lists it) may not be served, or None. A missing file
        is a problem too."""
        try:
            link = os.lstat(path)
        except FileNotFoundError:
            return f"{name} is missing"
        except OSError as e:
            return f"{name} cannot be read ({e.strerror})"
        real = os.path.realpath(path)
        if os.path.dirname(real) != self.directory:
            where = "a symlink out of" if stat.S_ISLNK(link.st_mode) else "outside"
            return f"{name} is {where} the cache directory (it resolves to {real})"
        try:
            st = os.stat(path)
        except OSError as e:
            return f"{name} cannot be read ({e.strerror})"
        if not stat.S_ISREG(st.st_mode):
            return f"{name} is not a regular file"
        if not self.trusted_owner(st.st_uid, st.st_gid):
            return (f"{name} is owned by {_user(st.st_uid)}, group {_group(st.st_gid)}, who may not write this "
                    f"cache (this user, root" + (f" or group {_group(self.gid)}" if self.group_shared else "") + ")")
        if st.st_mode & 0o002:
            return f"{name} is writable by every user (mode {oct(stat.S_IMODE(st.st_mode))})"
        if st.st_mode & 0o020 and not self.group_shared and st.st_gid not in (os.getegid(), 0):
            return (f"{name} is writable by group {_group(st.st_gid)} (mode {oct(stat.S_IMODE(st.st_mode))}), which "
                    f"cache_mode {oct(self.mode)} does not trust")
        return None


def prepare_directory(path: str, mode: int) -> Trust:
    """Create ``path`` with ``mode`` if it is missing (its parents with the default mode), then check who can write
    it: GertError naming the directory, its owner and mode, and the fix, if anyone untrusted can."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        try:
            if not os.path.isdir(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                os.mkdir(path, mode)
                os.chmod(path, mode)  # exactly cache_mode: mkdir's mode passes through the umask
            except FileExistsError:
                pass  # another process made it first: checked below like any existing directory
        except OSError as e:
            raise GertError(f"cache_dir {path!r}: cannot create the compile cache directory: {e}") from None
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as e:
        raise GertError(f"cache_dir {path!r}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise GertError(f"cache_dir {path!r}: not a directory")
    _check_writers(path, st, mode)
    if not os.access(real, os.W_OK | os.X_OK):
        raise GertError(f"cache_dir {path!r}: the compile cache directory is not writable")
    return Trust(real, mode, st.st_gid)


def _check_writers(path: str, st: os.stat_result, mode: int) -> None:
    bits = stat.S_IMODE(st.st_mode)
    sticky = bool(bits & stat.S_ISVTX)
    shared = bool(mode & 0o020)
    about = (f"cache_dir {path!r} (owner {_user(st.st_uid)}, group {_group(st.st_gid)}, mode {oct(bits)}): ")
    why = " Whoever can write a compile cache decides what every model loaded from it computes."
    if st.st_uid not in (os.geteuid(), 0) and not (shared and st.st_gid in _my_groups() and bits & 0o020):
        raise GertError(about + f"owned by another user, who can change it at will.{why} Fix: use a directory "
                        f"this user owns (gert creates a missing one with mode {oct(mode)}), or `chown` this one; "
                        f"to share one directory with a group, make it group-writable by a group of this user and "
                        f"pass cache_mode=0o770 (GERT_CACHE_MODE=0770)")
    if bits & 0o002 and not sticky:
        raise GertError(about + f"every user can write it (world-writable without the sticky bit).{why} Fix: "
                        f"`chmod o-w {path}` (or `chmod {oct(mode)[2:]} {path}`), or use a directory only this user "
                        f"can write")
    if bits & 0o020 and not sticky and not shared:
        raise GertError(about + f"group {_group(st.st_gid)} can write it, which cache_mode {oct(mode)} does not "
                        f"trust.{why} Fix: `chmod g-w {path}`, or, to share the cache with that group, pass "
                        f"cache_mode=0o770 (GERT_CACHE_MODE=0770)")
