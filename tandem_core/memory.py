"""Fix glibc's malloc thresholds so the step's buffers stay in the heap and big requests do not pile up.

glibc serves an allocation above its mmap threshold with its own mapping and returns heap tops above
its trim threshold to the system. Left dynamic, both thresholds rise with the largest block freed (up
to 32 and 64 MB), so how much a burst of multi-megabyte requests leaves resident, and how many of a
decode step's buffers are mapped and faulted in afresh every step, depend on the traffic so far.

The services fix both at glibc's own ceilings from the start, and cap the arenas:
* a model step's activations and logits (a few MB) come from the heap and its freed top is kept, so
  they are not mapped, zero-filled and unmapped every step. With the threshold fixed at 256 KiB (this
  module's earlier setting) a token in an 8-sequence step of the default model was priced 3.06 ms,
  with these 1.53 ms, with glibc's defaults 1.59 ms (`python -m bench.malloc_step`, docs/bench);
* 100 refused 4 MB prompts grow the target by under 10 MB (`python -m bench.chaos --scenarios huge`);
* one arena per thread pins freed memory in many places; gRPC and torch start many threads.
Only glibc has ``mallopt``; elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("tandem.memory")

# glibc's mallopt parameter numbers (malloc.h) and the values the services set
_SETTINGS = {
    "M_TRIM_THRESHOLD": (-1, 64 * 1024 * 1024),  # heap tops above this go back to the system
    "M_MMAP_THRESHOLD": (-3, 32 * 1024 * 1024),  # blocks from this size on get their own mapping
    "M_ARENA_MAX": (-8, 2),
}


def fix_malloc_thresholds() -> bool:
    """Apply the settings above; True where glibc took all of them."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    refused = [key for key, (param, value) in _SETTINGS.items() if mallopt(param, value) != 1]
    if refused:
        log.warning("mallopt refused %s; memory use may follow glibc's defaults", ", ".join(refused))
    return not refused
