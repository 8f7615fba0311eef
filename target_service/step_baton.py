"""Two targets on one machine taking turns at engine steps, for A/B measurements (``--step-baton``).

On this shared 2-core machine a plain loop's speed drifts between 0.78x and 1.17x of its median over
seconds (`docs/bench/machine-drift`), so two configurations run one after the other see different
machines. With a baton, two targets run their workloads at the same time, but a step only runs while
its target holds the baton: while both have work, their steps alternate, each running alone on the
cores, and a drift moves both alike. A target with nothing to do does not hold the other up.

The pair shares a directory: ``state`` (who holds the baton and who waits for it, updated under an
``flock``) and one FIFO per side (``a`` and ``b``), on which a waiting side sleeps until the holder
hands the baton over. ``--step-baton DIR/a`` on one target and ``DIR/b`` on the other.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
from pathlib import Path

log = logging.getLogger(__name__)
SIDES = ("a", "b")
_FREE = 0  # state byte 0: the holder (0 free, 1 side a, 2 side b); bytes 1-2: side a / b waits
GIVE_UP_S = 30.0  # a partner that holds the baton this long is taken for gone: step without it


class StepBaton:
    """One side of a pair: ``take()`` before a step (blocks while the partner steps), ``give()`` after."""

    def __init__(self, path: str | Path):
        path = Path(path)
        if path.name not in SIDES:
            raise ValueError(f"--step-baton {path}: the last part must be 'a' or 'b' (this target's side)")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.me, self.other = SIDES.index(path.name), 1 - SIDES.index(path.name)
        self._state = os.open(path.parent / "state", os.O_RDWR | os.O_CREAT, 0o600)
        with self._locked():
            if os.fstat(self._state).st_size < 3:
                os.pwrite(self._state, bytes(3), 0)
        self._fifos = [self._fifo(path.parent / side) for side in SIDES]
        self.waits = 0  # steps that waited for the partner
        self.gave_up = 0  # waits that timed out (partner gone)

    @staticmethod
    def _fifo(path: Path) -> int:
        try:
            os.mkfifo(path, 0o600)
        except FileExistsError:
            pass
        return os.open(path, os.O_RDWR | os.O_NONBLOCK)  # read and write ends at once: never blocks opening

    def take(self) -> None:
        with self._locked():
            state = bytearray(os.pread(self._state, 3, 0))
            if state[0] in (_FREE, self.me + 1):
                state[0] = self.me + 1
                os.pwrite(self._state, bytes(state), 0)
                return
            state[1 + self.me] = 1
            os.pwrite(self._state, bytes(state), 0)
        self.waits += 1
        if not select.select([self._fifos[self.me]], [], [], GIVE_UP_S)[0]:
            self.gave_up += 1
            log.warning("step baton: the partner held it for %.0f s; stepping without it", GIVE_UP_S)
            self._seize()
            return
        os.read(self._fifos[self.me], 64)  # the holder set us as holder before writing

    def give(self) -> None:
        with self._locked():
            state = bytearray(os.pread(self._state, 3, 0))
            if state[1 + self.other]:
                state[0], state[1 + self.other] = self.other + 1, 0
                os.pwrite(self._state, bytes(state), 0)
                os.write(self._fifos[self.other], b"x")
                return
            state[0] = _FREE
            os.pwrite(self._state, bytes(state), 0)

    def close(self) -> None:
        for fd in (*self._fifos, self._state):
            os.close(fd)

    def _seize(self) -> None:
        try:
            os.read(self._fifos[self.me], 64)  # a hand-over that came after all must not count twice
        except BlockingIOError:
            pass
        with self._locked():
            state = bytearray(os.pread(self._state, 3, 0))
            state[0], state[1 + self.me] = self.me + 1, 0
            os.pwrite(self._state, bytes(state), 0)

    def _locked(self):
        return _Flock(self._state)


class _Flock:
    def __init__(self, fd: int):
        self.fd = fd

    def __enter__(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
