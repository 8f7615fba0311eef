"""Inline staging: the rows travel as bytes inside the step message (drafter on another host).

Costs hidden_size x dtype bytes per row on the wire, measured by the draft benchmark.
"""

from __future__ import annotations

import torch

from tandem_core.transport.base import DTYPE_NAMES, DTYPES, BufferDescriptor, RowRange, StagingError, check_range


class InlineWriter:
    def __init__(
        self, ring_slots: int, rows_per_slot: int, hidden_size: int, dtype: torch.dtype, device="cpu", epoch: int = 0
    ):
        self.descriptor = BufferDescriptor(
            "inline", "", ring_slots, rows_per_slot, hidden_size, DTYPE_NAMES[dtype], epoch=epoch
        )

    def write(self, ring_slot: int, rows: torch.Tensor) -> bytes:
        return rows.contiguous().view(torch.uint8).numpy().tobytes()

    def close(self) -> None:
        return None


class InlineReader:
    def __init__(self, desc: BufferDescriptor):
        self.descriptor = desc
        self._dtype = DTYPES[desc.dtype]
        self._row_bytes = desc.hidden_size * torch.empty((), dtype=self._dtype).element_size()

    def read(self, rng: RowRange, inline: bytes = b"") -> torch.Tensor:
        check_range(self.descriptor, rng)
        start, end = rng.row_offset * self._row_bytes, (rng.row_offset + rng.num_rows) * self._row_bytes
        if end > len(inline):
            raise StagingError(f"inline payload has {len(inline)} bytes, rows need {end}")
        raw = torch.frombuffer(bytearray(inline[start:end]), dtype=torch.uint8)
        return raw.view(self._dtype).view(rng.num_rows, self.descriptor.hidden_size)

    def close(self) -> None:
        return None
