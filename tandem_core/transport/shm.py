"""POSIX shared-memory staging: a file in /dev/shm, created 0600 by the target, mapped by both.

Lifetime: the target creates the file, the drafter maps it during Attach, and the target unlinks the
name as soon as Attach returns. From then on no name exists to leak, whichever process dies; the
memory goes away with the last mapping. A crash inside the Attach window leaves a file whose name
carries the dead creator's pid; ``sweep_stale`` removes those at the next start.
"""

from __future__ import annotations

import mmap
import os
import secrets
import warnings
from pathlib import Path

import torch

from tandem_core.transport.base import (
    DTYPE_NAMES,
    DTYPES,
    BufferDescriptor,
    RowRange,
    StagingError,
    check_range,
)

SHM_DIR = Path("/dev/shm")
PREFIX = "tandem-stage"


def _view(buf: mmap.mmap, desc: BufferDescriptor) -> torch.Tensor:  # [ring_slots, rows_per_slot, hidden]
    dtype = DTYPES[desc.dtype]
    count = desc.nbytes // torch.empty((), dtype=dtype).element_size()
    with warnings.catch_warnings():  # the reader's mapping is read-only by design; torch warns about that
        warnings.simplefilter("ignore", UserWarning)
        flat = torch.frombuffer(buf, dtype=dtype, offset=desc.byte_offset, count=count)
    return flat.view(desc.ring_slots, desc.rows_per_slot, desc.hidden_size)


class ShmWriter:
    """Target side: owns the segment."""

    def __init__(
        self, ring_slots: int, rows_per_slot: int, hidden_size: int, dtype: torch.dtype, device="cpu", epoch: int = 0
    ):
        sweep_stale()
        name = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(6)}"
        self.descriptor = BufferDescriptor(
            "shm", name, ring_slots, rows_per_slot, hidden_size, DTYPE_NAMES[dtype], epoch=epoch
        )
        self.path = SHM_DIR / name
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, self.descriptor.nbytes)
            self._map = mmap.mmap(fd, self.descriptor.nbytes)
        finally:
            os.close(fd)
        self.ring = _view(self._map, self.descriptor)

    def write(self, ring_slot: int, rows: torch.Tensor) -> bytes:
        self.ring[ring_slot, : rows.shape[0]].copy_(rows)
        return b""

    def unlink(self) -> None:
        """Drop the name (the drafter has mapped it, or never will)."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def close(self) -> None:
        self.unlink()
        self.ring = None
        try:
            self._map.close()
        except BufferError:  # a tensor view still alive: the mapping dies with it
            pass


class ShmReader:
    """Drafter side: maps the target's segment read-only."""

    def __init__(self, desc: BufferDescriptor):
        if not desc.name.startswith(PREFIX) or "/" in desc.name:
            raise StagingError(f"refusing shm name {desc.name!r}")
        path = SHM_DIR / desc.name
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise StagingError(
                f"shared segment {desc.name} does not exist (drafter on another host? use inline)"
            ) from None
        try:
            size = os.fstat(fd).st_size
            if size < desc.byte_offset + desc.nbytes:
                raise StagingError(f"segment has {size} bytes, descriptor needs {desc.byte_offset + desc.nbytes}")
            self._map = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self.descriptor = desc
        self.ring = _view(self._map, desc)

    def read(self, rng: RowRange, inline: bytes = b"") -> torch.Tensor:
        check_range(self.descriptor, rng)
        return self.ring[rng.ring_slot, rng.row_offset : rng.row_offset + rng.num_rows]

    def close(self) -> None:
        self.ring = None
        try:
            self._map.close()
        except BufferError:
            pass


def sweep_stale() -> list[str]:
    """Remove segments left by creators that died inside the Attach window."""
    removed = []
    for path in SHM_DIR.glob(f"{PREFIX}-*"):
        try:
            pid = int(path.name.split("-")[2])
        except (IndexError, ValueError):
            continue
        if not _alive(pid):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
