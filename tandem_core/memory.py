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

``use_huge_pages`` asks torch's CPU allocator to back tensors of 2 MB and more with transparent huge
pages (``THP_MEM_ALLOC_ENABLE``), where the kernel grants them on request (``madvise`` mode, the
default of most distributions). A forward streams every weight matrix once per step, and with 4 KiB
pages the 540 MB of the default model span about 130,000 pages, far more than the TLB holds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger("tandem.memory")

# glibc's mallopt parameter numbers (malloc.h) and the values the services set
_SETTINGS = {
    "M_TRIM_THRESHOLD": (-1, 64 * 1024 * 1024),  # heap tops above this go back to the system
    "M_MMAP_THRESHOLD": (-3, 32 * 1024 * 1024),  # blocks from this size on get their own mapping
    "M_ARENA_MAX": (-8, 2),
}


THP_ENV = "THP_MEM_ALLOC_ENABLE"  # torch reads it once, at the process's first tensor allocation


def use_huge_pages() -> None:
    """Huge pages for large tensors, unless the environment already says (``THP_MEM_ALLOC_ENABLE=0`` turns
    them off). Call before the process allocates its first tensor: torch reads the setting only then."""
    os.environ.setdefault(THP_ENV, "1")


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
