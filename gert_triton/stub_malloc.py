"""glibc's malloc settings of a gert_triton stub (issue 41, serving memory), set at ``initialize`` before the load.

Two settings, each the stub's own (the server's environment can set others; an ONNX Runtime model.py keeps glibc's
defaults):

- one malloc arena for the stub's threads (``limit_arenas``);
- a fixed mmap threshold (``fix_mmap_threshold``): blocks from 1 MiB up are mapped of their own and returned to the
  system when freed. glibc's default threshold moves up to the largest block freed so far (up to 32 MiB): after the
  load freed the model's bytes (10.6 MB for PP-OCR rec) and a run freed an output, blocks that size came from the
  heap, and the heap kept what they freed (its trim threshold moves up with it, to twice that), so a stub's resident
  memory grew to the most its requests ever held at once plus what fragmentation left.
"""

from __future__ import annotations

import os

from gert_triton.config import ConfigError

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters (malloc.h)
_M_ARENA_MAX = -8
DEFAULT_MMAP_THRESHOLD = 1 << 20


def _env_int(name: str, default: int) -> int:
    """A whole number from the environment variable ``name`` (``default`` unset), ConfigError naming it otherwise."""
    try:
        return int(os.environ.get(name, str(default)))
    except ValueError:
        raise ConfigError(f"{name}: expected a whole number (0: glibc's default), got {os.environ[name]!r}") from None


def _mallopt(param: int, value: int) -> None:
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(param, value)
    except (OSError, AttributeError):  # not glibc
        pass


def limit_arenas() -> None:
    """Let the stub's threads share glibc's malloc arenas (GERT_TRITON_MALLOC_ARENAS, default 1; 0: glibc's own
    default of 8 per core; a MALLOC_ARENA_MAX in the environment wins). glibc gives each new thread that allocates
    an arena of its own (the streams' workers, the batch queue, ONNX Runtime's runs), and memory one arena freed is
    not reused by another: the memory the load freed (the model's parses, the bytes each ONNX Runtime session is made
    from) stayed in the main thread's arena while the workers grew theirs. Measured (issue 41, bench_memory.py
    triton3:30, 6 alternated pairs, load 0.7-4.4): PP-OCR rec's stub peak median 248 -> 238 MB (lower in 5 of 6
    pairs), det 178 -> 176, cls 110 -> 109; the tree's CPU unchanged (5.0-5.2 s). A no-op without glibc."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    arenas = _env_int("GERT_TRITON_MALLOC_ARENAS", 1)
    if arenas > 0:
        _mallopt(_M_ARENA_MAX, arenas)


def fix_mmap_threshold() -> None:
    """glibc's mmap threshold fixed at GERT_TRITON_MALLOC_MMAP_THRESHOLD bytes (default 1 MiB; 0: glibc's moving
    threshold; a MALLOC_MMAP_THRESHOLD_ in the environment wins): see the module's docstring. A no-op without
    glibc."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    value = _env_int("GERT_TRITON_MALLOC_MMAP_THRESHOLD", DEFAULT_MMAP_THRESHOLD)
    if value > 0:
        _mallopt(_M_MMAP_THRESHOLD, value)
