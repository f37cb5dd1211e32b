"""GE's graph compile cache, made safe to use: ``gert.load(..., cache_dir=...)`` or ``GERT_CACHE_DIR``.

GE caches a compiled graph under the Session option ``ge.graph_compiler_cache_dir`` and the graph option
``ge.graph_key``, and a later compile of that key loads it **without comparing** the graph, its options or the
CANN version; a listed file that is missing or corrupt fails the compile (ge-shapes-and-cache.md, part B). gert
therefore:

- creates the directory (GE never does) with ``cache_mode`` (default 0o700) and refuses one that anyone it does not
  trust can write (gert/core/cache_trust.py), and sets the Session option;
- derives each graph's key from the model's digest, the graph's shape (``ge.inputShape``), every GE option that
  reaches the compile, the gert version and the backend (with ONNX Runtime's version on the host NPU, whose cached
  model is ONNX Runtime's), so a changed model or option never meets a stale entry;
- records each entry it saves in ``{key}.gert.json`` (SHA-256 of GE's files, the key's inputs, the precision
  settings) and checks an entry against it before a compile that would hit (gert/core/cache_entry.py): a changed,
  swapped, truncated, planted or unrecorded entry is removed with a CacheWarning saying what differed, and compiled
  again; so is an entry whose compile fails (a listed file missing or corrupt). Entries without a record (another
  tool's) are used only with ``trust_foreign_entries=True``.
Several processes share one directory safely: gert holds ``{key}.gert.lock`` around check, compile and record (GE
holds its own ``{key}.lock`` inside the compile), so each key is compiled once, later compiles load it, and no one
checks an entry whose record is not written yet.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import hashlib
import json
import os
import secrets
import stat
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional, Union

from gert import _cann
from gert.core import cache_entry, hooks
from gert.core.cache_trust import Trust, parse_mode, prepare_directory
from gert.errors import CacheWarning, GeError, GertError
from gert.preview import precision

ENV = "GERT_CACHE_DIR"
CACHE_DIR_OPTION = "ge.graph_compiler_cache_dir"
GRAPH_KEY_OPTION = "ge.graph_key"
# Options that say where a graph runs or where the cache is, not how it compiles: left out of the key, so every
# stream and device shares one entry per graph.
_NOT_IN_KEY = frozenset({"ge.session_device_id", "ge.exec.deviceId", CACHE_DIR_OPTION, GRAPH_KEY_OPTION})

__all__ = ["CacheWarning", "CompileCache", "compile_graph", "resolve_dir"]


def resolve_dir(cache_dir: Optional[os.PathLike | str], cache_mode: Union[int, str, None] = None) -> Optional[Trust]:
    """The cache directory: ``cache_dir``, else ``GERT_CACHE_DIR``, else None (no cache; "" turns it off too).
    Created with ``cache_mode`` if missing (GE requires it to exist); GertError if others can write it."""
    if cache_dir is None:
        cache_dir = os.environ.get(ENV) or None
    if cache_dir is None or str(cache_dir) == "":
        return None
    return prepare_directory(os.path.abspath(os.fspath(cache_dir)), parse_mode(cache_mode))


# The files a CANN toolkit states its version in (relative to ASCEND_HOME_PATH / the toolkit gert was built with).
_VERSION_FILES = (
    "version.cfg",
    "compiler/version.info",
    "runtime/version.info",
    "opp/version.info",
    "*-linux/ascend_toolkit_install.info",
)
_toolkit_cache: dict = {}


def toolkit_version(roots: Optional[tuple] = None) -> str:
    """What the CANN toolkit's install says its version is (the digest of its version files, per root): part of every
    key, as GE's cache is not guaranteed across CANN versions and GE compares none on a hit. '' with the host NPU
    (its version is gert's, already in the key). ``roots``: the toolkit directories (default: the one gert was built
    against and ASCEND_HOME_PATH / ASCEND_TOOLKIT_HOME); read once per process and roots."""
    if roots is None:
        if _cann.backend() == "hostnpu":
            return ""
        roots = tuple(
            dict.fromkeys(
                r
                for r in (
                    _cann.toolkit_root(),
                    os.environ.get("ASCEND_HOME_PATH"),
                    os.environ.get("ASCEND_TOOLKIT_HOME"),
                )
                if r
            )
        )
    hit = _toolkit_cache.get(roots)
    if hit is None:
        digest = hashlib.blake2b(digest_size=12)
        for root in roots:
            for pattern in _VERSION_FILES:
                for path in sorted(glob.glob(os.path.join(glob.escape(root), pattern))):
                    with contextlib.suppress(OSError):
                        with open(path, "rb") as f:
                            digest.update(os.path.relpath(path, root).encode() + b"\0" + f.read() + b"\0")
        hit = _toolkit_cache[roots] = digest.hexdigest()
    return hit


def external_weights(levels: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether GE writes the graph's weights to the cache's ``weight/`` directory: ``ge.externalWeight`` on (graph,
    else session, else global) without ``ge.externalWeightDir`` (ge-shapes-and-cache.md B)."""

    def option(key):
        for level in ("graph", "session", "global"):
            if key in levels.get(level, {}):
                return str(levels[level][key])
        return ""

    return option("ge.externalWeight").strip().lower() in ("1", "true") and not option("ge.externalWeightDir")


def _backend_tag() -> str:
    tag = _cann.backend()
    if tag == "hostnpu":
        import onnxruntime

        tag += f"-ort{onnxruntime.__version__}"
    return tag


@dataclass
class CheckStats:
    """Time spent checking entries before compiles that would hit (hashing included), for bench_cache."""

    checks: int = 0
    seconds: float = 0.0
    broken: int = 0


@dataclass
class CompileCache:
    """One model's view of a cache directory: derives its graphs' keys, checks entries and compiles through the
    cache. Thread-safe: each key's check, compile and record run under ``{key}.gert.lock``."""

    directory: str
    model_digest: str
    global_options: tuple = ()
    trust: Optional[Trust] = None
    trust_foreign_entries: bool = False
    stats: CheckStats = field(default_factory=CheckStats, compare=False)
    _stats_lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.trust is None:  # constructed directly: the default policy, checked like open() does
            self.trust = prepare_directory(self.directory, parse_mode(None))

    @classmethod
    def open(
        cls,
        cache_dir,
        model: bytes,
        global_options: Optional[Mapping[str, str]] = None,
        cache_mode: Union[int, str, None] = None,
        trust_foreign_entries: bool = False,
    ) -> Optional["CompileCache"]:
        """None when no directory is given (argument or GERT_CACHE_DIR)."""
        trust = resolve_dir(cache_dir, cache_mode)
        if trust is None:
            return None
        return cls(
            trust.directory,
            hashlib.blake2b(model, digest_size=20).hexdigest(),
            tuple(sorted((global_options or {}).items())),
            trust,
            bool(trust_foreign_entries),
        )

    def key_inputs(self, session_options: Mapping[str, str], graph_options: Mapping[str, str]) -> dict:
        """What a graph's key is derived from (recorded in each entry's gert record)."""
        from gert import core

        def keep(opts):
            return sorted([k, str(v)] for k, v in opts.items() if k not in _NOT_IN_KEY)

        return {
            "model": self.model_digest,
            "global": [list(kv) for kv in self.global_options],
            "session": keep(session_options),
            "graph": keep(graph_options),
            "gert": core.__version__,
            "backend": _backend_tag(),
            "toolkit": toolkit_version(),
        }

    def graph_key(self, session_options: Mapping[str, str], graph_options: Mapping[str, str]) -> str:
        """``gert_`` + 32 hex digits (GE's key pattern ^[A-Za-z0-9_-]{1,128}$)."""
        text = json.dumps(self.key_inputs(session_options, graph_options), sort_keys=True)
        return "gert_" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def precision_settings(self, session_options: Mapping[str, str], graph_options: Mapping[str, str]) -> dict:
        """The ge.exec.precision_mode* options of a compile (recorded with each entry)."""
        return cache_entry.precision_settings(
            {"global": dict(self.global_options), "session": session_options, "graph": graph_options}
        )

    # ---- files of one key ------------------------------------------------------------------------------------------
    def _files(self, key: str) -> list:
        """Every file of the key in the directory (dangling symlinks too), GE's lock and gert's lock aside."""
        d = self.directory
        names = [key + ".idx", key + ".om", cache_entry.record_name(key)]
        try:
            names += [n for n in cache_entry.listed_names(d, key) if "/" not in n]
        except (OSError, ValueError):
            pass
        paths = [os.path.join(d, n) for n in dict.fromkeys(names)]
        for pattern in ("_*.om", "_*.rdcpkt", cache_entry.SUFFIX + ".tmp*"):
            paths += glob.glob(os.path.join(d, glob.escape(key) + pattern))
        return [p for p in dict.fromkeys(paths) if os.path.lexists(p)]

    def remove(self, key: str) -> list:
        """Delete the key's index, models and gert record under GE's lock (the lock files stay: deleting a lock file
        another process holds would let a third one lock a new file). Returns the removed paths; OSError if one
        cannot be removed (a sticky directory, another user's file)."""
        with _flock(os.path.join(self.directory, key + ".lock")):
            removed = []
            for p in self._files(key):
                try:
                    os.unlink(p)
                    removed.append(p)
                except FileNotFoundError:
                    pass
            return removed

    def _check_lock_file(self, key: str) -> None:
        """GE opens ``{key}.lock`` with O_CREAT, following symlinks: a planted symlink would make it create or
        lock a file elsewhere. Such a lock file (or one of an untrusted owner) is removed, with a CacheWarning."""
        path = os.path.join(self.directory, key + ".lock")
        if not os.path.lexists(path):
            return
        problem = self.trust.file_problem(path, key + ".lock")
        if problem is None:
            return
        try:
            os.unlink(path)
            what = "removed it"
        except FileNotFoundError:
            what = "it is gone"
        except OSError as e:
            raise GertError(
                f"compile cache {self.directory}: GE's lock file of entry {key} is unsafe ({problem}) "
                f"and cannot be removed ({e.strerror}); remove it, or use another cache_dir"
            ) from None
        warnings.warn(
            f"compile cache {self.directory}: GE's lock file of entry {key} is unsafe: {problem}; {what}",
            CacheWarning,
            stacklevel=5,
        )

    @contextlib.contextmanager
    def _entry_lock(self, key: str) -> Iterator[None]:
        with _flock(os.path.join(self.directory, key + ".gert.lock"), group_readable=self.trust.group_shared):
            yield

    # ---- compiling -------------------------------------------------------------------------------------------------
    def compile(
        self, session, graph_id: int, graph, session_options: Mapping[str, str], graph_options: Mapping[str, str]
    ) -> str:
        """AddGraph with the derived ``ge.graph_key`` and CompileGraph; returns "hit" or "miss". Under
        ``{key}.gert.lock``: the entry is checked first (a broken one removed with a CacheWarning), and a fresh one
        recorded after GE saved it. A compile that fails while the key has files is taken for a broken entry too:
        removed with a CacheWarning and compiled again (once). On failure nothing stays added."""
        key = self.graph_key(session_options, graph_options)
        inputs = self.key_inputs(session_options, graph_options)
        precision = self.precision_settings(session_options, graph_options)
        weights = external_weights(
            {"global": dict(self.global_options), "session": session_options, "graph": graph_options}
        )
        with self._entry_lock(key):
            verdict = self._check(key, inputs, precision, weights)
            if verdict.state == "broken":
                self._discard(key, verdict.problems)
                if self._files(key):  # could not remove it: never let GE load it
                    return self._compile_uncached(session, graph_id, graph, graph_options, key)
            outcome = self._compile(
                session,
                graph_id,
                graph,
                graph_options,
                key,
                "hit" if verdict.state in ("verified", "foreign") else "miss",
            )
            if outcome == "miss" and os.path.exists(os.path.join(self.directory, cache_entry.idx_name(key))):
                self._record(key, inputs, precision, weights=weights)
            elif verdict.rehashed and outcome == "hit":
                self._record(key, inputs, precision, verdict.rehashed, must=False, weights=weights)
            return outcome

    def _record(
        self,
        key: str,
        inputs: dict,
        precision: dict,
        known: Optional[dict] = None,
        must: bool = True,
        weights: bool = False,
    ) -> None:
        """Write the key's record: after GE saved the entry (``must``), or again with the current signatures of
        files verified by their hashes (an optimisation: skipped if the directory refuses it)."""
        try:
            record = cache_entry.new_record(self.directory, key, inputs, precision, known, weights)
            cache_entry.write_record(self.directory, record, self.trust)
        except (OSError, ValueError) as e:
            if must:  # the graph is compiled: it serves; the unrecorded entry is compiled again by later loads
                warnings.warn(
                    f"compile cache {self.directory}: cannot record entry {key} ({e}); later loads will "
                    f"compile it again",
                    CacheWarning,
                    stacklevel=4,
                )

    def _check(self, key: str, inputs: dict, precision: dict, weights: bool = False) -> cache_entry.Verdict:
        start = time.perf_counter()
        self._check_lock_file(key)
        verdict = cache_entry.check(
            self.directory, key, self.trust, inputs, precision, self.trust_foreign_entries, weights
        )
        with self._stats_lock:
            self.stats.checks += 1
            self.stats.seconds += time.perf_counter() - start
            self.stats.broken += verdict.state == "broken"
        return verdict

    def _discard(self, key: str, problems: list) -> None:
        """Remove a broken entry, and say what was wrong with it."""
        try:
            removed = self.remove(key)
            what = f"removed {len(removed)} file(s) and compiling again"
        except (OSError, GertError) as e:
            what = f"cannot remove it ({e}), so compiling without the cache"
        warnings.warn(
            f"compile cache {self.directory}: entry {key} is broken: {'; '.join(problems)}; {what}",
            CacheWarning,
            stacklevel=4,
        )

    def _compile(self, session, graph_id: int, graph, graph_options: Mapping[str, str], key: str, expected: str) -> str:
        options = {**graph_options, GRAPH_KEY_OPTION: key}
        for attempt in (0, 1):
            session.add_graph(graph_id, graph, options)
            try:
                session.compile_graph(graph_id)
            except BaseException as e:
                session.remove_graph(graph_id)
                if not isinstance(e, GeError) or attempt or not self._files(key):
                    raise
                self._discard(key, [f"GE failed to load it ({e})"])
                if self._files(key):
                    return self._compile_uncached(session, graph_id, graph, graph_options, key)
                expected = "miss"
                continue
            # the host NPU reports hit / miss; real GE only logs it, and there ``expected`` is exact: no other gert
            # process can save this key while this one holds its lock
            return hooks.current().compile_cache_result() or expected
        raise AssertionError("unreachable")

    def _compile_uncached(self, session, graph_id: int, graph, graph_options: Mapping[str, str], key: str) -> str:
        """Compile with GE's cache off (an empty ``ge.graph_key``): for an entry gert cannot remove."""
        options = {**graph_options, GRAPH_KEY_OPTION: ""}
        session.add_graph(graph_id, graph, options)
        try:
            session.compile_graph(graph_id)
        except BaseException:
            session.remove_graph(graph_id)
            raise
        return "miss"


@contextlib.contextmanager
def _flock(path: str, group_readable: bool = False) -> Iterator[None]:
    """An exclusive flock on the lock file ``path``, on an fd opened with O_NOFOLLOW (a planted symlink is removed).
    A missing lock file is created as a new file under an unpredictable name (O_CREAT | O_EXCL, atomic_file's way)
    and linked into place, never replacing one another process may hold. Opened read-only, so that a group sharing
    the directory can lock files another member created."""
    fd = _open_lock(path, 0o640 if group_readable else 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # retried on EINTR by Python (PEP 475)
        yield
    finally:
        os.close(fd)


def _open_lock(path: str, perms: int) -> int:
    for _ in range(10):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            _create_lock(path, perms)
            continue
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise GertError(f"compile cache: cannot open the lock file {path!r}: {e.strerror}") from None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # a symlink planted in place of the lock file
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
        raise GertError(f"compile cache: the lock file {path!r} is not a regular file; remove it")
    raise GertError(f"compile cache: the lock file {path!r} keeps being replaced (by a symlink?)")


def _create_lock(path: str, perms: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}-{secrets.token_hex(8)}"
    try:
        os.close(os.open(tmp, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, perms))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first: locked like any existing one
        finally:
            os.unlink(tmp)
    except OSError as e:
        raise GertError(f"compile cache: cannot create the lock file {path!r}: {e.strerror}") from None


def compile_graph(
    session,
    graph_id: int,
    graph,
    session_options: Mapping[str, str],
    graph_options: Mapping[str, str],
    cache: Optional[CompileCache],
) -> Optional[str]:
    """AddGraph + CompileGraph, through the cache when there is one: "hit", "miss", or None (no cache). On failure
    nothing stays added. The host NPU's provider emulates the graph's precision mode (gert/preview/precision.py)."""
    settings, session_options, graph_options = precision.split_options(session_options, graph_options)
    with precision.compiling(settings):
        return _compile_graph(session, graph_id, graph, session_options, graph_options, cache)


def _compile_graph(
    session,
    graph_id: int,
    graph,
    session_options: Mapping[str, str],
    graph_options: Mapping[str, str],
    cache: Optional[CompileCache],
) -> Optional[str]:
    if cache is not None:
        return cache.compile(session, graph_id, graph, session_options, graph_options)
    session.add_graph(graph_id, graph, graph_options)
    try:
        session.compile_graph(graph_id)
    except BaseException:
        session.remove_graph(graph_id)
        raise
    return None
