"""Hidden-state staging between the target (writer, owner) and the drafter (reader).

One interface, chosen by name: ``shm`` (POSIX shared memory, default on CPU), ``inline`` (rows
travel inside the step message, for a drafter on another host) and ``cuda_ipc`` (not built yet).
"""

import torch

from tandem_core.transport.base import BufferDescriptor, RowRange, StagingError, StagingReader, StagingWriter
from tandem_core.transport.inline import InlineReader, InlineWriter
from tandem_core.transport.shm import ShmReader, ShmWriter


def resolve_kind(kind: str, device: torch.device | str = "cpu") -> str:
    """``auto``: cuda_ipc when the model is on a GPU, shm otherwise."""
    if kind != "auto":
        return kind
    return "cuda_ipc" if torch.device(device).type == "cuda" else "shm"


def make_writer(
    kind: str, ring_slots: int, rows_per_slot: int, hidden_size: int, dtype, device="cpu", epoch: int = 0
) -> StagingWriter:
    kind = resolve_kind(kind, device)
    if kind == "cuda_ipc":
        from tandem_core.transport.cuda_ipc import CudaIpcWriter

        return CudaIpcWriter(ring_slots, rows_per_slot, hidden_size, dtype, device, epoch)
    if kind == "shm":
        return ShmWriter(ring_slots, rows_per_slot, hidden_size, dtype)
    if kind == "inline":
        return InlineWriter(ring_slots, rows_per_slot, hidden_size, dtype)
    raise ValueError(f"transport {kind!r} is not available (auto, shm, inline, cuda_ipc)")


def open_reader(desc: BufferDescriptor) -> StagingReader:
    if desc.kind == "shm":
        return ShmReader(desc)
    if desc.kind == "inline":
        return InlineReader(desc)
    if desc.kind == "cuda_ipc":
        from tandem_core.transport.cuda_ipc import CudaIpcReader

        return CudaIpcReader(desc)
    raise StagingError(f"transport {desc.kind!r} is not supported by this drafter")


__all__ = [
    "BufferDescriptor",
    "RowRange",
    "StagingError",
    "StagingReader",
    "StagingWriter",
    "make_writer",
    "open_reader",
]
