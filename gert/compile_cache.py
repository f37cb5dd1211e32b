"""GE's graph compile cache, made safe to use: ``gert.load(..., cache_dir=...)`` or ``GERT_CACHE_DIR``.

GE caches a compiled graph under the Session option ``ge.graph_compiler_cache_dir`` and the graph option
``ge.graph_key``, and a later compile of that key loads it **without comparing** the graph, its options or the
CANN version; a listed file that is missing or corrupt fails the compile (ge-shapes-and-cache.md, part B). gert
therefore:

- creates the directory (GE never does) and sets the Session option;
- derives each graph's key from the model's digest, the graph's shape (``ge.inputShape``), every GE option that
  reaches the compile, the gert version and the backend (with ONNX Runtime's version on the host NPU, whose cached
  model is ONNX Runtime's), so a changed model or option never meets a stale entry;
- when a compile fails on a broken entry, removes that key's files (under GE's own ``{key}.lock``), warns, and
  compiles again.
Several processes share one directory safely: GE holds ``{key}.lock`` for each lookup or compile + save, so each
key is compiled once and later compiles load it.
"""
from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from typing import Mapping, Optional

from gert import _cann, hostnpu
from gert.errors import GeError, GertError
from gert.preview import precision

ENV = "GERT_CACHE_DIR"
CACHE_DIR_OPTION = "ge.graph_compiler_cache_dir"
GRAPH_KEY_OPTION = "ge.graph_key"
# Options that say where a graph runs or where the cache is, not how it compiles: left out of the key, so every
# stream and device shares one entry per graph.
_NOT_IN_KEY = frozenset({"ge.session_device_id", "ge.exec.deviceId", CACHE_DIR_OPTION, GRAPH_KEY_OPTION})


class CacheWarning(UserWarning):
    """A compile cache entry was broken (a listed file missing, or corrupt): gert removed it and compiled again."""


def resolve_dir(cache_dir: Optional[os.PathLike | str]) -> Optional[str]:
    """The cache directory: ``cache_dir``, else ``GERT_CACHE_DIR``, else None (no cache; "" turns it off too).
    Created if missing (GE requires it to exist), and returned absolute."""
    if cache_dir is None:
        cache_dir = os.environ.get(ENV) or None
    if cache_dir is None or str(cache_dir) == "":
        return None
    path = os.path.abspath(os.fspath(cache_dir))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise GertError(f"cache_dir {path!r}: cannot create the compile cache directory: {e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise GertError(f"cache_dir {path!r}: the compile cache directory is not writable")
    return path


def _backend_tag() -> str:
    tag = _cann.backend()
    if tag == "hostnpu":
        import onnxruntime

        tag += f"-ort{onnxruntime.__version__}"
    return tag


@dataclass(frozen=True)
class CompileCache:
    """One model's view of a cache directory: derives its graphs' keys and compiles through the cache."""

    directory: str
    model_digest: str
    global_options: tuple = ()

    @classmethod
    def open(cls, cache_dir, model: bytes, global_options: Optional[Mapping[str, str]] = None
             ) -> Optional["CompileCache"]:
        """None when no directory is given (argument or GERT_CACHE_DIR)."""
        path = resolve_dir(cache_dir)
        if path is None:
            return None
        return cls(path, hashlib.blake2b(model, digest_size=20).hexdigest(),
                   tuple(sorted((global_options or {}).items())))

    def graph_key(self, session_options: Mapping[str, str], graph_options: Mapping[str, str]) -> str:
        """``gert_`` + 32 hex digits (GE's key pattern ^[A-Za-z0-9_-]{1,128}$)."""
        from gert import __version__

        def keep(opts):
            return sorted((k, str(v)) for k, v in opts.items() if k not in _NOT_IN_KEY)

        text = json.dumps({"model": self.model_digest, "global": list(self.global_options),
                           "session": keep(session_options), "graph": keep(graph_options),
                           "gert": __version__, "backend": _backend_tag()}, sort_keys=True)
        return "gert_" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    # ---- files of one key ------------------------------------------------------------------------------------------
    def _listed(self, key: str) -> bool:
        """Whether the key has an entry GE would load (for the hit/miss count where GE does not report it)."""
        idx = os.path.join(self.directory, key + ".idx")
        try:
            with open(idx) as f:
                entries = json.load(f).get("cache_file_list", [])
            return any(e.get("graph_key") == key and os.path.exists(os.path.join(self.directory, e["cache_file_name"]))
                       for e in entries)
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            return os.path.exists(os.path.join(self.directory, key + ".om"))

    def _files(self, key: str) -> list:
        d = self.directory
        return [p for p in [os.path.join(d, key + ".idx"), os.path.join(d, key + ".om")] +
                glob.glob(os.path.join(d, glob.escape(key) + "_*.om")) +
                glob.glob(os.path.join(d, glob.escape(key) + "_*.rdcpkt")) if os.path.exists(p)]

    def remove(self, key: str) -> list:
        """Delete the key's index and models under GE's lock (the lock file stays: deleting a lock file another
        process holds would let a third one lock a new file). Returns the removed paths."""
        with open(os.path.join(self.directory, key + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            removed = []
            for p in self._files(key):
                try:
                    os.unlink(p)
                    removed.append(p)
                except FileNotFoundError:
                    pass
            return removed

    # ---- compiling -------------------------------------------------------------------------------------------------
    def compile(self, session, graph_id: int, graph, session_options: Mapping[str, str],
                graph_options: Mapping[str, str]) -> str:
        """AddGraph with the derived ``ge.graph_key`` and CompileGraph; returns "hit" or "miss". A compile that
        fails while the key has files is taken for a broken entry: they are removed with a CacheWarning and the graph
        is compiled again (once). On failure nothing stays added."""
        key = self.graph_key(session_options, graph_options)
        options = {**graph_options, GRAPH_KEY_OPTION: key}
        reported = hostnpu.available()  # the host NPU reports hit / miss; real GE only logs it
        for attempt in (0, 1):
            listed = None if reported else self._listed(key)
            session.add_graph(graph_id, graph, options)
            try:
                session.compile_graph(graph_id)
            except BaseException as e:
                session.remove_graph(graph_id)
                if not isinstance(e, GeError) or attempt or not self._files(key):
                    raise
                removed = self.remove(key)
                warnings.warn(f"compile cache {self.directory}: graph key {key} failed to load ({e}); removed "
                              f"{len(removed)} file(s) and compiling again", CacheWarning, stacklevel=3)
                continue
            if reported:
                return hostnpu.last_compile_cache() or "miss"
            # approximate: an entry another process saved while this one waited for the lock counts as a miss
            return "hit" if listed else "miss"
        raise AssertionError("unreachable")


def compile_graph(session, graph_id: int, graph, session_options: Mapping[str, str],
                  graph_options: Mapping[str, str], cache: Optional[CompileCache]) -> Optional[str]:
    """AddGraph + CompileGraph, through the cache when there is one: "hit", "miss", or None (no cache). On failure
    nothing stays added. The host NPU's provider emulates the graph's precision mode (gert/preview/precision.py)."""
    settings, session_options, graph_options = precision.split_options(session_options, graph_options)
    with precision.compiling(settings):
        return _compile_graph(session, graph_id, graph, session_options, graph_options, cache)


def _compile_graph(session, graph_id: int, graph, session_options: Mapping[str, str],
                   graph_options: Mapping[str, str], cache: Optional[CompileCache]) -> Optional[str]:
    if cache is not None:
        return cache.compile(session, graph_id, graph, session_options, graph_options)
    session.add_graph(graph_id, graph, graph_options)
    try:
        session.compile_graph(graph_id)
    except BaseException:
        session.remove_graph(graph_id)
        raise
    return None
