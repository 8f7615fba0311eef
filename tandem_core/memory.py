"""Keep big short-lived request buffers from staying in the process's memory after they are freed.

glibc serves an allocation above its mmap threshold with its own mapping, returned to the system on
free, but it raises that threshold to the size of every such block freed (up to 32 MB). After one
multi-megabyte request has come and gone, the next ones are carved from the heap and their pages
stay resident: refused 4 MB prompts grew the target by ~120 MB. A fixed threshold keeps every big
buffer in its own mapping. Only glibc has ``mallopt``; elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("tandem.memory")

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter numbers (malloc.h)
_M_ARENA_MAX = -8
MMAP_THRESHOLD = 256 * 1024  # blocks from this size on get their own mapping, returned when freed
ARENA_MAX = 2  # one arena per thread pins freed memory in many places; gRPC and torch start many threads


def return_big_buffers() -> bool:
    """Fix glibc's mmap threshold and cap its arenas; True where that took effect."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_ARENA_MAX, ARENA_MAX) == 1
    if not ok:
        log.warning("mallopt refused the mmap threshold or arena cap; big requests may stay resident")
    return ok
