"""gert's record of one compile cache entry, and the check of an entry against it before GE may load it.

GE writes, per key (ge-shapes-and-cache.md part B, in this repository's cbindings/hostnpu/ge_cache.cpp for the
host NPU): ``{key}.lock``; ``{key}.idx``, JSON ``{"cache_file_list": [{"graph_key", "cache_file_name",
"var_desc_file_name"?}]}``, whose names GE resolves in the directory (a name with '/' as a path of its own); the
listed ``{key}_{YYYYmmddHHMMSS}.om`` (and ``.rdcpkt``) files; without an index, a ``{key}.om`` is loaded as it is.
GE compares nothing on a hit, so gert writes ``{key}.gert.json`` when it saves an entry (last, atomically): the
SHA-256 of the index and of every file it lists, the key's inputs (model digest, shapes, options, versions) and the
precision settings. Before a compile that would hit, ``check`` compares the entry with it; the same files are
checked for who could have written them (gert.core.cache_trust). Working over GE's files only, this holds on real CANN as
on the host NPU.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from typing import Mapping, Optional

from gert.core.atomic_file import atomic_open
from gert.core.cache_trust import Trust

SUFFIX = ".gert.json"
WEIGHT_DIR = "weight"  # GE's external weights (ge.externalWeight=1 without ge.externalWeightDir)
# Hashing every file before each hit would cost ~10% of a warm load on the host NPU (benchmarks/bench_cache.py):
# as git's index does, the record also keeps each file's identity and change time, and a file whose (inode, size,
# mtime, ctime) are still the recorded ones is taken as unchanged since it was hashed. Any write, truncation or
# rename changes the ctime or the inode, and only root can set a ctime back. The device number is left out: hosts
# mounting one NFS export see the same inodes and ctimes under different device numbers. A file whose ctime is not
# strictly before the record's own mtime ("racy": it may have changed within the clock tick it was hashed in) is
# hashed again.
FORMAT = 1
PRECISION_PREFIX = "ge.exec.precision_mode"  # ge.exec.precision_mode, ge.exec.precision_mode_v2, ...


def idx_name(key: str) -> str:
    return key + ".idx"


def record_name(key: str) -> str:
    return key + SUFFIX


def ge_path(directory: str, name: str) -> str:
    """Where GE looks for a file its index lists: in the directory, unless the name has a '/'."""
    return name if "/" in name else os.path.join(directory, name)


def listed_names(directory: str, key: str) -> list:
    """The files ``{key}.idx`` lists (every entry's model and variable file), in order; ValueError if it is not
    GE's index format."""
    with open(os.path.join(directory, idx_name(key)), "rb") as f:
        try:
            data = json.load(f)
        except ValueError as e:
            raise ValueError(f"not JSON: {e}") from None
    entries = data.get("cache_file_list") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError("no cache_file_list array")
    names: list = []
    for e in entries:
        if not (
            isinstance(e, dict) and isinstance(e.get("graph_key"), str) and isinstance(e.get("cache_file_name"), str)
        ):
            raise ValueError(f"entry {e!r} lacks a graph_key or cache_file_name string")
        for field_name in ("cache_file_name", "var_desc_file_name"):
            name = e.get(field_name)
            if isinstance(name, str) and name and name not in names:
                names.append(name)
    return names


def sha256(path: str) -> str:
    """The file's SHA-256, read in 1 MiB blocks (hashlib.file_digest is Python 3.11+; gert runs on 3.9)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def precision_settings(levels: Mapping[str, Mapping[str, str]]) -> dict:
    """Every option whose key starts with ``ge.exec.precision_mode``, as "level.key" -> value (levels: global,
    session, graph)."""
    return {
        f"{level}.{k}": str(v)
        for level, opts in sorted(levels.items())
        for k, v in sorted(opts.items())
        if k.startswith(PRECISION_PREFIX)
    }


@dataclass(frozen=True)
class Record:
    """The contents of ``{key}.gert.json``."""

    key: str
    inputs: dict  # what the key was derived from: model digest, options (with ge.inputShape), versions
    precision: dict  # "level.ge.exec.precision_mode*" -> value
    files: dict  # name as GE lists it (the index first) -> SHA-256
    stats: dict = field(default_factory=dict)  # name -> [inode, size, mtime_ns, ctime_ns] when it was hashed

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "key": self.key,
                "inputs": self.inputs,
                "precision": self.precision,
                "files": self.files,
                "stats": self.stats,
            },
            indent=1,
            sort_keys=True,
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Record":
        try:
            d = json.loads(data)
        except ValueError as e:
            raise ValueError(f"not JSON: {e}") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"not a format {FORMAT} gert record")
        if not (
            isinstance(d.get("key"), str)
            and isinstance(d.get("inputs"), dict)
            and isinstance(d.get("precision"), dict)
            and isinstance(d.get("files"), dict)
        ):
            raise ValueError("key, inputs, precision or files missing")
        stats = d.get("stats", {})
        return cls(d["key"], d["inputs"], d["precision"], d["files"], stats if isinstance(stats, dict) else {})

    def differences(self, key: str, inputs: dict, precision: dict, files: dict) -> list:
        """What differs between this record and the entry as it is now, each said in words."""
        out = []
        if self.key != key:
            out.append(f"the record is for key {self.key}")
        out += _compare("input", self.inputs, inputs)
        out += _compare("precision setting", self.precision, precision)
        for name in files:
            if name not in self.files:
                out.append(f"{name} is listed but gert never recorded it")
            elif files[name] != self.files[name]:
                out.append(f"{name} changed (SHA-256 {files[name][:12]}..., recorded {self.files[name][:12]}...)")
        for name in self.files:
            if name not in files:
                out.append(f"{name} was recorded but is no longer listed")
        return out


def _compare(what: str, recorded: dict, now: dict) -> list:
    out = []
    for k in sorted(set(recorded) | set(now)):
        if recorded.get(k) != now.get(k):
            out.append(f"{what} {k} is {_short(now.get(k))}, recorded {_short(recorded.get(k))}")
    return out


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True) if value is not None else "absent"
    return text if len(text) <= 80 else text[:77] + "..."


def weight_files(directory: str) -> list:
    """(name, path) of the files in the cache's ``weight/`` directory (GE's external weights, ``ge.externalWeight``),
    names as ``weight/<file>``; none if it is missing or not a directory of its own (a symlink)."""
    path = os.path.join(directory, WEIGHT_DIR)
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return []
        names = sorted(os.listdir(path))
    except OSError:
        return []
    return [(f"{WEIGHT_DIR}/{n}", os.path.join(path, n)) for n in names if ".tmp" not in n]


def entry_files(directory: str, key: str) -> list:
    """(name, path) of the files GE would load for ``key``: the index and what it lists, else ``{key}.om``, else
    nothing (GE compiles). ValueError if the index is unreadable as GE's format."""
    idx = os.path.join(directory, idx_name(key))
    if os.path.lexists(idx):
        return [(idx_name(key), idx)] + [(n, ge_path(directory, n)) for n in listed_names(directory, key)]
    om = os.path.join(directory, key + ".om")
    return [(key + ".om", om)] if os.path.lexists(om) else []


def write_record(directory: str, record: Record, trust: Trust) -> None:
    """``{key}.gert.json`` through a temporary file, fsync and a rename: a reader sees no record or a whole one.
    The caller holds the key's lock, so other temporary records of the key are leftovers of a crash: removed."""
    path = os.path.join(directory, record_name(record.key))
    for stale in glob.glob(glob.escape(path) + ".tmp*"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)
    perms = 0o600 | (trust.mode & 0o040) | (trust.mode & 0o004)  # readable where the directory is shared
    with atomic_open(path, "wb", perms, durable=True) as f:
        f.write(record.to_bytes())


def _signature(path: str) -> list:
    st = os.stat(path)
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _hash(path: str) -> tuple:
    """(SHA-256, signature): the signature only when the file did not change while it was hashed, else None."""
    before = _signature(path)
    digest = sha256(path)
    after = _signature(path)
    return digest, (after if after == before else None)


def new_record(
    directory: str, key: str, inputs: dict, precision: dict, known: Optional[dict] = None, weights: bool = False
) -> Record:
    """The record of the entry of ``key`` as it is now; ``known``: name -> (SHA-256, signature) that ``check`` just
    verified (not hashed again). ``weights``: GE wrote the graph's weights to ``weight/`` (ge.externalWeight): every
    file there is recorded (GE does not say which are this graph's; a later change to one fails the check)."""
    files, stats = {}, {}
    for name, path in entry_files(directory, key) + (weight_files(directory) if weights else []):
        files[name], sig = known[name] if known and name in known else _hash(path)
        if sig is not None:
            stats[name] = sig
    return Record(key, inputs, precision, files, stats)


@dataclass
class Verdict:
    """The outcome of ``check``: "absent" (GE will compile), "verified", "foreign" (no record, trusted by the
    caller) or "broken" (``problems`` says why). ``rehashed``: a verified entry had files whose signatures were not
    the recorded ones (copied, touched, racy): the caller may record them again (``new_record(..., known=...)``)."""

    state: str
    problems: list = field(default_factory=list)
    rehashed: Optional[dict] = None  # name -> (verified SHA-256, signature or None)


def check(
    directory: str, key: str, trust: Trust, inputs: dict, precision: dict, trust_foreign: bool, weights: bool = False
) -> Verdict:
    """Whether GE may load the entry of ``key``: who could have written its files, and whether they and the key's
    inputs are what gert recorded when it saved the entry (with ``weights``, the ``weight/`` files it recorded)."""
    try:
        files = entry_files(directory, key)
    except ValueError as e:
        return Verdict("broken", [f"{idx_name(key)} is not GE's index ({e})"])
    except OSError as e:
        return Verdict("broken", [f"{idx_name(key)} cannot be read ({e.strerror})"])
    if not files:
        return Verdict("absent")
    problems = [p for p in (trust.file_problem(path, name) for name, path in files) if p]
    if problems:
        return Verdict("broken", problems)
    rec_path = os.path.join(directory, record_name(key))
    if not os.path.lexists(rec_path):
        if trust_foreign:
            return Verdict("foreign")
        return Verdict(
            "broken",
            [
                f"it has no gert record ({record_name(key)}): written by another tool, an older "
                f"gert, or a save that did not finish (trust_foreign_entries=True uses such "
                f"entries)"
            ],
        )
    problem = trust.file_problem(rec_path, record_name(key))
    if problem:
        return Verdict("broken", [problem])
    rehashed = False
    try:
        with open(rec_path, "rb") as f:
            recorded_at = os.fstat(f.fileno()).st_mtime_ns
            record = Record.from_bytes(f.read())
        if weights:
            weight = [(n, os.path.join(directory, n)) for n in record.files if n.startswith(WEIGHT_DIR + "/")]
            problems = [p for p in (trust.file_problem(path, name) for name, path in weight) if p]
            if problems:
                return Verdict("broken", problems)
            files = files + weight
        now = {}
        for name, path in files:
            sig = _signature(path)
            if name in record.files and record.stats.get(name) == sig and sig[3] < recorded_at:
                now[name] = (record.files[name], sig)  # unchanged since it was hashed
            else:
                now[name] = _hash(path)
                rehashed = True
    except ValueError as e:
        return Verdict("broken", [f"{record_name(key)} is unreadable ({e})"])
    except OSError as e:
        return Verdict("broken", [f"a file of the entry cannot be read ({e})"])
    diffs = record.differences(key, inputs, precision, {name: digest for name, (digest, _) in now.items()})
    if diffs:
        return Verdict("broken", diffs)
    return Verdict("verified", rehashed=now if rehashed else None)
