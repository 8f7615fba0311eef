"""Hidden-state staging between the target (writer, owner) and the drafter (reader).

One interface, chosen by name: ``shm`` (POSIX shared memory, default on CPU), ``inline`` (rows
travel inside the step message, for a drafter on another host) and ``cuda_ipc`` (not built yet).
"""

from draft_service.transport.base import BufferDescriptor, RowRange, StagingError, StagingReader, StagingWriter
from draft_service.transport.inline import InlineReader, InlineWriter
from draft_service.transport.shm import ShmReader, ShmWriter


def make_writer(kind: str, ring_slots: int, rows_per_slot: int, hidden_size: int, dtype) -> StagingWriter:
    if kind in ("shm", "auto"):
        return ShmWriter(ring_slots, rows_per_slot, hidden_size, dtype)
    if kind == "inline":
        return InlineWriter(ring_slots, rows_per_slot, hidden_size, dtype)
    raise ValueError(f"transport {kind!r} is not available (shm, inline)")


def open_reader(desc: BufferDescriptor) -> StagingReader:
    if desc.kind == "shm":
        return ShmReader(desc)
    if desc.kind == "inline":
        return InlineReader(desc)
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
