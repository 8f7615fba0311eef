"""Targets on one machine taking turns at engine steps, for A/B measurements (``--step-baton``).

On this shared 2-core machine a plain loop's speed drifts between 0.78x and 1.17x of its median over
seconds (`docs/bench/machine-drift`), so two configurations run one after the other see different
machines. With a baton, targets run their workloads at the same time, but a step only runs while its
target holds the baton: while several have work, their steps take turns, each running alone on the
cores, and a drift moves all of them alike. A target with nothing to do holds nobody up.

The targets share a directory: ``state`` (who holds the baton and who waits for it, updated under an
``flock``), ``sides`` (the sides' names in the order they joined) and one FIFO per side, named after
it, on which a waiting side sleeps until the holder hands the baton over; the holder hands it to the
next waiting side after itself, in joining order. ``--step-baton DIR/NAME`` on each target.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import select
from pathlib import Path

log = logging.getLogger(__name__)
MAX_SIDES = 8
_RESERVED = {"state", "sides"}
GIVE_UP_S = 30.0  # a side that holds the baton this long is taken for gone: step without it
# state: byte 0 the holder (0: free, i + 1: side i), byte 1 + i: side i waits for the baton


class StepBaton:
    """One side: ``take()`` before a step (blocks while another side steps), ``give()`` after."""

    def __init__(self, path: str | Path):
        path = Path(path)
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", path.name) or path.name in _RESERVED:
            raise ValueError(f"--step-baton {path}: the last part names this target's side (letters, digits, - or _)")
        self.dir, self.name = path.parent, path.name
        self.dir.mkdir(parents=True, exist_ok=True)
        self._state = os.open(self.dir / "state", os.O_RDWR | os.O_CREAT, 0o600)
        self._fifos: dict[int, int] = {}
        with self._locked():
            if os.fstat(self._state).st_size < 1 + MAX_SIDES:
                os.pwrite(self._state, bytes(1 + MAX_SIDES), 0)
            self.me = self._join()
        self._mine = self._fifo(self.me)

    def take(self) -> None:
        with self._locked():
            state = self._read()
            if state[0] in (0, self.me + 1):
                state[0] = self.me + 1
                self._write(state)
                return
            state[1 + self.me] = 1
            self._write(state)
        if not select.select([self._mine], [], [], GIVE_UP_S)[0]:
            log.warning("step baton: another side held it for %.0f s; stepping without it", GIVE_UP_S)
            self._seize()
            return
        os.read(self._mine, 64)  # the holder made us the holder before writing

    def give(self) -> None:
        with self._locked():
            state = self._read()
            after_me = [(self.me + j) % MAX_SIDES for j in range(1, MAX_SIDES)]  # sides not joined never wait
            waiting = [i for i in after_me if state[1 + i]]
            if waiting:
                nxt = waiting[0]
                state[0], state[1 + nxt] = nxt + 1, 0
                self._write(state)
                os.write(self._fifo(nxt), b"x")
                return
            state[0] = 0
            self._write(state)

    def close(self) -> None:
        for fd in (*self._fifos.values(), self._state):
            os.close(fd)
        self._fifos.clear()

    def _join(self) -> int:
        """This side's index (call under the lock): its place in ``sides``, added at the end if new."""
        names = self._names()
        if self.name not in names:
            if len(names) >= MAX_SIDES:
                raise ValueError(f"--step-baton: at most {MAX_SIDES} sides share {self.dir}")
            with open(self.dir / "sides", "a") as f:
                f.write(self.name + "\n")
            names.append(self.name)
        return names.index(self.name)

    def _names(self) -> list[str]:
        try:
            return (self.dir / "sides").read_text().split()
        except FileNotFoundError:
            return []

    def _fifo(self, index: int) -> int:
        """The FIFO of side ``index``, opened for reading and writing at once (never blocks opening)."""
        if index not in self._fifos:
            path = self.dir / self._names()[index]
            try:
                os.mkfifo(path, 0o600)
            except FileExistsError:
                pass
            self._fifos[index] = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        return self._fifos[index]

    def _seize(self) -> None:
        try:
            os.read(self._mine, 64)  # a hand-over that came after all must not count twice
        except BlockingIOError:
            pass
        with self._locked():
            state = self._read()
            state[0], state[1 + self.me] = self.me + 1, 0
            self._write(state)

    def _read(self) -> bytearray:
        return bytearray(os.pread(self._state, 1 + MAX_SIDES, 0))

    def _write(self, state: bytearray) -> None:
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
