"""How glibc's allocator gives memory back: the agent and the hub want opposite things.

The agent keeps its memory small: it parses LIST pages in bursts and then mostly waits, so it
maps large blocks freshly and hands freed memory back (agent/memory.py). The hub is the other
way round: it takes every agent's batches, megabytes each, without pause, and keeps what they
hold. By default glibc returns the free top of a heap to the system as soon as it passes a
threshold that follows the largest block freed, so the hub gave back the buffers of one batch
and faulted fresh, zeroed pages in for the next: two to three times as many page faults as its
cache's growth needs, and 10% of its CPU while ingesting (bench/hub_ingest_grpc.py). On other C
libraries every function here does nothing and says so.

An operator who sets glibc's allocator up through the environment (`MALLOC_TRIM_THRESHOLD_` and
the like, or `glibc.malloc.*` in `GLIBC_TUNABLES`) is obeyed: `tune_unless_set` then leaves it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("scaleagent.allocator")

# The variables through which glibc reads the thresholds (mallopt(3)).
THRESHOLD_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:
        return None


_LIBC = _libc()


def tune_allocator(*, mmap_threshold: int, trim_threshold: int | None = None) -> bool:
    """Fix glibc's thresholds, which it otherwise moves after each large free.

    `mmap_threshold`: blocks this large or larger are mappings of their own, returned whole when
    freed; smaller ones come from the heap. `trim_threshold`: how much free memory may stay at the
    top of a heap before it is returned. False where the C library has no mallopt.
    """
    if _LIBC is None:
        return False
    done = bool(_LIBC.mallopt(M_MMAP_THRESHOLD, mmap_threshold))
    if trim_threshold is not None:
        done = bool(_LIBC.mallopt(M_TRIM_THRESHOLD, trim_threshold)) and done
    return done


def set_in_environment(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The variables of `environ` that set glibc's allocator thresholds."""
    names = [name for name in THRESHOLD_VARIABLES if name in environ]
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        names.append("GLIBC_TUNABLES")
    return names


def tune_unless_set(process: str, *, mmap_threshold: int, trim_threshold: int | None = None) -> bool:
    """`tune_allocator`, unless the environment sets the thresholds; says in the log what it did."""
    chosen = set_in_environment()
    if chosen:
        log.info("%s: glibc's allocator is left as %s set it", process, " and ".join(chosen))
        return False
    if not tune_allocator(mmap_threshold=mmap_threshold, trim_threshold=trim_threshold):
        log.info("%s: the C library's allocator cannot be tuned here (not glibc); its defaults apply", process)
        return False
    log.debug(
        "%s: glibc's allocator maps blocks from %d bytes%s",
        process,
        mmap_threshold,
        f" and keeps up to {trim_threshold} bytes free at a heap's top" if trim_threshold is not None else "",
    )
    return True


def release_free_memory() -> bool:
    """Return freed heap memory to the OS; False where the C library cannot."""
    if _LIBC is None:
        return False
    _LIBC.malloc_trim(0)
    return True
