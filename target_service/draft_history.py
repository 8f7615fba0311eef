"""Every (token, hidden row) pair the target has produced for each sequence in flight, per KV slot.

A drafter that attaches (or re-attaches after a fault) while sequences are running has seen none of
their past; the link replays it from here, a few hundred rows per step, until the drafter holds the
sequence and can draft for it again. Rows are written where the target produced them, so a rewind
(rejected drafts) simply overwrites the tail.
"""

from __future__ import annotations

import torch

from target_service.draft_pairs import SequencePairs


class DraftHistory:
    def __init__(self, max_slots: int, max_seq_len: int, hidden_size: int, dtype: torch.dtype, device="cpu"):
        self.rows = torch.zeros(max_slots, max_seq_len, hidden_size, dtype=dtype, device=device)  # [slot, pos, hidden]
        self.tokens: list[list[int]] = [[] for _ in range(max_slots)]  # per slot: the token after each row
        self.owner: list[str | None] = [None] * max_slots  # request id whose pairs the slot holds

    def record(self, slot: int, request_id: str, pairs: SequencePairs, rows: torch.Tensor) -> None:
        """Store one step's pairs of a sequence (``rows`` [n, hidden]); a sequence starts at position 0."""
        if pairs.start == 0:
            self.owner[slot] = request_id
        if self.owner[slot] != request_id or pairs.start > len(self.tokens[slot]):
            self.owner[slot] = None  # a gap: this sequence cannot be replayed (it never will be asked to)
            return
        end = pairs.start + len(pairs.tokens)
        self.rows[slot, pairs.start : end].copy_(rows)
        self.tokens[slot][pairs.start :] = pairs.tokens  # a rewind drops the tail

    def holds(self, slot: int, request_id: str) -> bool:
        return self.owner[slot] == request_id

    def span(self, slot: int, start: int, end: int) -> tuple[list[int], torch.Tensor]:
        """Tokens and rows [end - start, hidden] of positions start..end-1."""
        return self.tokens[slot][start:end], self.rows[slot, start:end]
