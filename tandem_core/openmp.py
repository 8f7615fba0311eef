"""OpenMP's busy-wait, shortened for two processes that take turns on the same cores.

torch's CPU kernels run on GNU OpenMP (libgomp). After each parallel region a worker thread keeps
spinning for ``GOMP_SPINCOUNT`` turns of a busy loop (300,000 when neither that nor
``OMP_WAIT_POLICY`` is set) before it sleeps, so that the next region starts without waking it. Within
one process that is what a forward wants: its regions follow each other within microseconds. Across
the target and the draft service it is not: each hands the cores to the other for every drafting
round trip, and the side that just finished keeps a core busy spinning while the other computes.

The services therefore set a short spin count before torch is loaded (``SPIN_COUNT``: long enough to
bridge the gaps between the regions of one forward), unless the operator set either variable.
``python -m bench.omp_spin`` measures the choice. Only libgomp reads ``GOMP_SPINCOUNT``; a build of
torch on another OpenMP runtime ignores it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

SPIN_COUNT = "20000"


def shorten_spin_wait(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set ``GOMP_SPINCOUNT`` to ``SPIN_COUNT`` unless the operator set it or ``OMP_WAIT_POLICY``.

    libgomp reads its environment once, when torch loads it: this takes effect only in a process that
    has not imported torch yet (the services' packages call it first). True where it set the variable."""
    env = os.environ if environ is None else environ
    if "GOMP_SPINCOUNT" in env or "OMP_WAIT_POLICY" in env or (environ is None and "torch" in sys.modules):
        return False
    env["GOMP_SPINCOUNT"] = SPIN_COUNT
    return True
