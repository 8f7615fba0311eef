"""The staging-buffer contract shared by every transport."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import torch

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
DTYPES = {v: k for k, v in DTYPE_NAMES.items()}


class StagingError(ValueError):
    """A descriptor or row range from the peer does not fit the mapped buffer."""


@dataclass(frozen=True)
class BufferDescriptor:
    """What the drafter needs to map the target's staging ring (sent once, at Attach)."""

    kind: str  # "shm" | "inline" | "cuda_ipc"
    name: str  # shm file name under /dev/shm (shm); empty otherwise
    ring_slots: int  # step slots in the ring
    rows_per_slot: int  # hidden-state rows one step may stage
    hidden_size: int
    dtype: str  # "float32" | "bfloat16" | "float16"
    byte_offset: int = 0  # start of the ring inside the mapping
    device_uuid: str = ""  # cuda_ipc only
    epoch: int = 0  # bumps each time the target re-creates the buffer
    ipc_handle: bytes = b""  # cuda_ipc: memory handle + event handle (64 bytes each)

    @property
    def nbytes(self) -> int:
        elem = torch.empty((), dtype=DTYPES[self.dtype]).element_size()
        return self.ring_slots * self.rows_per_slot * self.hidden_size * elem

    def check(self) -> None:
        """Refuse a peer's descriptor whose geometry makes no sense, before anything is mapped."""
        if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,200}|", self.name):
            raise StagingError(f"name {self.name[:32]!r} is not a plain segment name")
        if self.dtype not in DTYPES:
            raise StagingError(f"dtype {self.dtype[:32]!r} is not one of {', '.join(DTYPES)}")
        for name in ("ring_slots", "rows_per_slot", "hidden_size"):
            if getattr(self, name) < 1:
                raise StagingError(f"{name} must be at least 1, got {getattr(self, name)}")
        elem = torch.empty((), dtype=DTYPES[self.dtype]).element_size()
        if self.byte_offset < 0 or self.byte_offset % elem:
            raise StagingError(f"byte_offset {self.byte_offset} is negative or not a multiple of {elem}")


@dataclass(frozen=True)
class RowRange:
    """Where one step's rows are: ring slot, first row, row count (validated by the reader)."""

    ring_slot: int
    row_offset: int
    num_rows: int


class StagingWriter(Protocol):
    descriptor: BufferDescriptor

    def write(self, ring_slot: int, rows: torch.Tensor) -> bytes:
        """Stage ``rows`` [n, hidden] at the start of ``ring_slot``; return bytes to inline (b"" if none)."""
        ...

    def close(self) -> None: ...


class StagingReader(Protocol):
    def read(self, rng: RowRange, inline: bytes = b"") -> torch.Tensor:
        """[num_rows, hidden] rows of a validated range (a view where the transport allows)."""
        ...

    def close(self) -> None: ...


def check_range(desc: BufferDescriptor, rng: RowRange) -> None:
    """Refuse any peer-supplied range that does not lie inside the ring."""
    if not 0 <= rng.ring_slot < desc.ring_slots:
        raise StagingError(f"ring slot {rng.ring_slot} outside 0..{desc.ring_slots - 1}")
    if rng.row_offset < 0 or rng.num_rows < 0 or rng.row_offset + rng.num_rows > desc.rows_per_slot:
        raise StagingError(
            f"rows {rng.row_offset}..{rng.row_offset + rng.num_rows} outside a {desc.rows_per_slot}-row step slot"
        )
