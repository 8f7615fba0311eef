"""Hidden-state staging between the target (writer, owner) and the drafter (reader).

One interface, chosen by name from ``TRANSPORTS``: ``shm`` (POSIX shared memory, default on CPU),
``inline`` (rows travel inside the step message, for a drafter on another host) and ``cuda_ipc``
(a GPU ring shared through CUDA IPC handles, default on a GPU).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

from tandem_core.transport.base import BufferDescriptor, RowRange, StagingError, StagingReader, StagingWriter


@dataclass(frozen=True)
class Transport:
    """One staging method: the module holding its writer and reader (imported on first use: cuda_ipc needs cupy)."""

    name: str
    module: str
    writer_class: str
    reader_class: str

    def writer(
        self, ring_slots: int, rows_per_slot: int, hidden_size: int, dtype, device="cpu", epoch: int = 0
    ) -> StagingWriter:
        cls = getattr(importlib.import_module(self.module), self.writer_class)
        return cls(ring_slots, rows_per_slot, hidden_size, dtype, device, epoch)

    def reader(self, desc: BufferDescriptor) -> StagingReader:
        return getattr(importlib.import_module(self.module), self.reader_class)(desc)


TRANSPORTS = {
    t.name: t
    for t in (
        Transport("shm", "tandem_core.transport.shm", "ShmWriter", "ShmReader"),
        Transport("inline", "tandem_core.transport.inline", "InlineWriter", "InlineReader"),
        Transport("cuda_ipc", "tandem_core.transport.cuda_ipc", "CudaIpcWriter", "CudaIpcReader"),
    )
}
TRANSPORT_CHOICES = ("auto", *TRANSPORTS)  # what --transport accepts


def resolve_kind(kind: str, device: torch.device | str = "cpu") -> str:
    """``auto``: cuda_ipc when the model is on a GPU, shm otherwise."""
    if kind != "auto":
        return kind
    return "cuda_ipc" if torch.device(device).type == "cuda" else "shm"


def make_writer(
    kind: str, ring_slots: int, rows_per_slot: int, hidden_size: int, dtype, device="cpu", epoch: int = 0
) -> StagingWriter:
    kind = resolve_kind(kind, device)
    if kind not in TRANSPORTS:
        raise ValueError(f"transport {kind!r} is not available ({', '.join(TRANSPORT_CHOICES)})")
    return TRANSPORTS[kind].writer(ring_slots, rows_per_slot, hidden_size, dtype, device, epoch)


def open_reader(desc: BufferDescriptor) -> StagingReader:
    if desc.kind not in TRANSPORTS:
        raise StagingError(f"transport {desc.kind[:32]!r} is not supported by this drafter")
    return TRANSPORTS[desc.kind].reader(desc)


__all__ = [
    "TRANSPORTS",
    "TRANSPORT_CHOICES",
    "BufferDescriptor",
    "RowRange",
    "StagingError",
    "StagingReader",
    "StagingWriter",
    "Transport",
    "make_writer",
    "open_reader",
]
