"""Who may write a compile cache directory, and whether a file in it is one gert may serve.

A cache entry decides what every model loaded from the directory computes (GE takes a hit without comparing
anything: docs in gert/core/compile_cache.py), so only users this one trusts may be able to change it:

- this user and root, always;
- the members of the directory's group too, when ``cache_mode`` (``GERT_CACHE_MODE``) grants the group write
  access (``0o770``, ``0o2770``): a cache shared by services running as different users of one group. Membership is
  read from the user and group databases (pwd, grp: the group's member list and the users whose primary group it
  is), never assumed from a file's gid: anyone can own a file of a group it left, or create one in a setgid
  directory.

As OpenSSH checks the directories above authorized_keys and systemd a path it follows safely, the directory and
every directory on the way to it from ``/`` (symlinks followed one by one) are checked: each must be owned by a
trusted user, and the cache directory may be writable by no one else, sticky bit or not (others could add entries).
Above it, a directory others can write is passed only when it is sticky (as /tmp) and the next directory (or
symlink) on the way is owned by a trusted user, whom the sticky bit protects. gert creates a missing directory
with ``cache_mode`` (default ``0o700``). Each file of an entry is checked with lstat: a symlink is a broken entry
unless it stays in the directory and is owned by a trusted user, and its target is checked like a file; a file
owned by an untrusted user, or writable by one, is a broken entry. POSIX ACLs are not read.
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
WEIGHT_DIR = "weight"  # GE's external weights in the cache (ge.externalWeight)
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
        raise GertError(f"{what}: expected an octal mode such as 0o700 or '0770', got {type(value).__name__} {value!r}")
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            mode = int(text[2:] if text.startswith("0o") else text, 8)
        except ValueError:
            raise GertError(f"{what}: expected an octal mode such as '0700' or '0o770', got {value!r}") from None
    else:
        mode = value
    if mode & 0o002:
        raise GertError(
            f"{what}: {oct(mode)} lets every user write the cache, which decides what every model "
            f"loaded from it computes; use 0o700 (this user) or 0o770 / 0o2770 (this user's group)"
        )
    if mode & ~_ALLOWED_BITS or mode & 0o700 != 0o700:
        raise GertError(
            f"{what}: {oct(mode)} is not a cache directory mode: the owner needs rwx (0o700), and "
            f"only the setgid bit and group rwx / others r-x may be added (e.g. 0o700, 0o750, 0o770, "
            f"0o2770)"
        )
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


def _db_stamp() -> tuple:
    stamp = []
    for f in ("/etc/passwd", "/etc/group"):
        try:
            st = os.stat(f)
            stamp.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            stamp.append(None)
    return tuple(stamp)


_members_cache: dict = {}


def group_members(gid: int) -> frozenset:
    """The uids of the members of group ``gid``: its member list and the users whose primary group it is (pwd and
    grp; read again when /etc/passwd or /etc/group changes)."""
    stamp = _db_stamp()
    hit = _members_cache.get(gid)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    uids = {u.pw_uid for u in pwd.getpwall() if u.pw_gid == gid}
    try:
        for name in grp.getgrgid(gid).gr_mem:
            try:
                uids.add(pwd.getpwnam(name).pw_uid)
            except KeyError:
                pass
    except KeyError:
        pass
    members = frozenset(uids)
    _members_cache[gid] = (stamp, members)
    return members


def _writers_problem(st: os.stat_result, trusted) -> Optional[str]:
    """Who other than a trusted user can write the file or directory of ``st`` (its owner always can: chmod), said
    in words; None if no one. ``trusted``: uid -> bool."""
    bits = stat.S_IMODE(st.st_mode)
    if not trusted(st.st_uid):
        return "owned by another user, who can change it at will"
    if bits & 0o002:
        return "every user can write it"
    if bits & 0o020:
        others = sorted(u for u in group_members(st.st_gid) if not trusted(u))
        if others:
            return (
                f"group {_group(st.st_gid)} can write it, and its members "
                f"{', '.join(_user(u) for u in others[:3])}{' ...' if len(others) > 3 else ''} are not trusted"
            )
    return None


@dataclass(frozen=True)
class Trust:
    """The trust policy of one cache directory: its mode and owner/group as checked at open."""

    directory: str  # absolute, symlinks resolved
    mode: int  # cache_mode
    gid: int  # the directory's group (its members trusted when the mode grants the group write access)

    @property
    def group_shared(self) -> bool:
        return bool(self.mode & 0o020)

    def trusted_user(self, uid: int) -> bool:
        """This user, root, or (a group-shared cache) a member of the directory's group per pwd/grp."""
        return uid in (os.geteuid(), 0) or (self.group_shared and uid in group_members(self.gid))

    def trusted_owner(self, uid: int, gid: int) -> bool:
        """Whether a file owned by uid:gid may be served: its owner is trusted (its gid proves nothing)."""
        return self.trusted_user(uid)

    def _who(self) -> str:
        return "this user, root" + (f" or a member of group {_group(self.gid)}" if self.group_shared else "")

    def file_problem(self, path: str, name: str) -> Optional[str]:
        """Why the entry file at ``path`` (``name`` as the entry lists it) may not be served, or None. A missing file
        is a problem too. Read with lstat: a symlink must stay in the directory and be owned by a trusted user."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return f"{name} is missing"
        except OSError as e:
            return f"{name} cannot be read ({e.strerror})"
        parent = os.path.dirname(os.path.abspath(path))
        if parent != self.directory:
            if parent != os.path.join(self.directory, WEIGHT_DIR):
                return f"{name} is outside the cache directory ({path})"
            problem = self._weight_dir_problem(parent)
            if problem:
                return f"{name}: {problem}"
        if stat.S_ISLNK(st.st_mode):
            if not self.trusted_user(st.st_uid):
                return f"{name} is a symlink owned by {_user(st.st_uid)}, who may not write this cache ({self._who()})"
            real = os.path.realpath(path)
            if os.path.dirname(real) != parent:
                return f"{name} is a symlink out of the cache directory (it resolves to {real})"
            try:
                st = os.lstat(real)
            except OSError as e:
                return f"{name} cannot be read ({e.strerror})"
        return self._regular_problem(st, name)

    def _weight_dir_problem(self, path: str) -> Optional[str]:
        """GE's ``weight/`` directory: a directory of its own (not a symlink) that only trusted users can write."""
        try:
            st = os.lstat(path)
        except OSError as e:
            return f"{path} cannot be read ({e.strerror})"
        if not stat.S_ISDIR(st.st_mode):
            return f"{path} is not a directory (a symlink?)"
        problem = _writers_problem(st, self.trusted_user)
        return None if problem is None else f"{path} {_about(path, st)}: {problem}"

    def _regular_problem(self, st: os.stat_result, name: str) -> Optional[str]:
        if not stat.S_ISREG(st.st_mode):
            return f"{name} is not a regular file"
        if not self.trusted_user(st.st_uid):
            return (
                f"{name} is owned by {_user(st.st_uid)}, group {_group(st.st_gid)}, who may not write this "
                f"cache ({self._who()})"
            )
        mode = oct(stat.S_IMODE(st.st_mode))
        if st.st_mode & 0o002:
            return f"{name} is writable by every user (mode {mode})"
        if st.st_mode & 0o020 and not (self.group_shared and st.st_gid == self.gid):
            others = [u for u in group_members(st.st_gid) if not self.trusted_user(u)]
            if others:
                return (
                    f"{name} is writable by group {_group(st.st_gid)} (mode {mode}), whose members "
                    f"{', '.join(_user(u) for u in sorted(others)[:3])} this cache does not trust"
                )
        return None


def prepare_directory(path: str, mode: int) -> Trust:
    """Create ``path`` with ``mode`` if it is missing (its parents with the default mode), then check who can write
    it and every directory on the way to it: GertError naming the directory, its owner and mode, and the fix, if
    anyone untrusted can."""
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
    trust = Trust(real, mode, st.st_gid)
    _check_directory(path, st, trust)
    _check_path(path, trust)
    if not os.access(real, os.W_OK | os.X_OK):
        raise GertError(f"cache_dir {path!r}: the compile cache directory is not writable")
    return trust


def _about(path: str, st: os.stat_result) -> str:
    return f"(owner {_user(st.st_uid)}, group {_group(st.st_gid)}, mode {oct(stat.S_IMODE(st.st_mode))})"


_WHY = " Whoever can write a compile cache decides what every model loaded from it computes."


def _check_directory(path: str, st: os.stat_result, trust: Trust) -> None:
    """The cache directory itself: no one but trusted users may write it, sticky or not."""
    bits = stat.S_IMODE(st.st_mode)
    about = f"cache_dir {path!r} {_about(path, st)}: "
    if bits & 0o002:
        sticky = bits & stat.S_ISVTX
        raise GertError(
            about
            + "every user can write it (world-writable"
            + ("; the sticky bit does not stop others adding entries" if sticky else " without the sticky bit")
            + f")."
            + _WHY
            + f" Fix: `chmod o-w{',-t' if sticky else ''} {path}` (or `chmod {oct(trust.mode)[2:]} "
            f"{path}`), or use a directory only this user can write (gert creates a missing one with mode "
            f"{oct(trust.mode)})"
        )
    if not trust.trusted_user(st.st_uid):
        raise GertError(
            about + "owned by another user, who can change it at will." + _WHY + " Fix: use a "
            f"directory this user owns (gert creates a missing one with mode {oct(trust.mode)}), or "
            f"`chown` this one; to share one directory with a group, make it group-writable by a group "
            f"of this user and pass cache_mode=0o770 (GERT_CACHE_MODE=0770)"
        )
    if bits & 0o020 and not trust.group_shared:
        raise GertError(
            about + f"group {_group(st.st_gid)} can write it, which cache_mode {oct(trust.mode)} does not "
            f"trust.{_WHY} Fix: `chmod g-w {path}`, or, to share the cache with that group, pass "
            f"cache_mode=0o770 (GERT_CACHE_MODE=0770)"
        )


def _check_path(path: str, trust: Trust) -> None:
    """Every directory from ``/`` to the cache directory, following symlinks one component at a time: owned by a
    trusted user, and writable by others only if sticky while the next step is owned by a trusted user."""
    todo = [c for c in path.split("/") if c][::-1]
    cur, st = "/", os.stat("/")
    links = 0
    while todo:
        comp = todo.pop()
        if comp == ".":
            continue
        if comp == "..":
            cur = os.path.dirname(cur)
            st = os.stat(cur)
            continue
        nxt = os.path.join(cur, comp)
        try:
            nst = os.lstat(nxt)
        except OSError as e:
            raise GertError(f"cache_dir {path!r}: {nxt}: {e.strerror}") from None
        _check_ancestor(path, cur, st, nst, trust)
        if stat.S_ISLNK(nst.st_mode):
            links += 1
            if links > 40:
                raise GertError(f"cache_dir {path!r}: too many symlinks on the way")
            target = os.readlink(nxt)
            todo.extend([c for c in target.split("/") if c][::-1])
            if target.startswith("/"):
                cur, st = "/", os.stat("/")
            continue
        cur, st = nxt, nst


def _check_ancestor(path: str, cur: str, st: os.stat_result, child: os.stat_result, trust: Trust) -> None:
    """``cur`` (a directory on the way to the cache) and its entry ``child`` on the way."""
    problem = _writers_problem(st, trust.trusted_user)
    if problem is None:
        return
    sticky = bool(st.st_mode & stat.S_ISVTX)
    if sticky and trust.trusted_user(st.st_uid) and trust.trusted_user(child.st_uid):
        return  # others may add entries, but not replace this one (the sticky bit)
    about = f"cache_dir {path!r}: the directory {cur!r} on the way to it {_about(cur, st)}: "
    if not trust.trusted_user(st.st_uid):
        fix = "use a cache directory under directories owned by this user or root"
    elif sticky:
        problem += (
            f", and the next step on the way is owned by {_user(child.st_uid)}, whom the sticky bit does not protect"
        )
        fix = "use a cache directory whose parents this user or root own"
    else:
        fix = f"`chmod go-w {cur}` (or `chmod +t {cur}`, as /tmp), or put the cache elsewhere"
    raise GertError(about + problem + " (it could replace the cache directory)." + _WHY + " Fix: " + fix)
