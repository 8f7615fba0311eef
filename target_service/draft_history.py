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

    def record(
        self, slots: list[int], request_ids: list[str], pairs: list[SequencePairs], hidden: torch.Tensor
    ) -> None:
        """Store one step's pairs (``hidden`` [num_tokens, hidden]: the step's packed hidden states; slot and
        request id per pair list) in one copy; a sequence starts at position 0."""
        dst, src = [], []
        width = self.rows.shape[1]
        for slot, rid, p in zip(slots, request_ids, pairs, strict=True):
            if p.start == 0:
                self.owner[slot] = rid
            if self.owner[slot] != rid or p.start > len(self.tokens[slot]):
                self.owner[slot] = None  # a gap: this sequence cannot be replayed (it never will be asked to)
                continue
            end = p.start + len(p.tokens)
            if end > width:
                raise ValueError(f"slot {slot}: pairs up to position {end}, the history holds {width}")
            dst.extend(range(slot * width + p.start, slot * width + end))
            src.extend(p.rows)
            self.tokens[slot][p.start :] = p.tokens  # a rewind drops the tail
        if dst:
            index = torch.tensor(src, dtype=torch.long, device=hidden.device)
            flat = self.rows.view(-1, self.rows.shape[2])  # [slot * max_seq_len + pos, hidden]
            flat.index_copy_(
                0,
                torch.tensor(dst, dtype=torch.long, device=self.rows.device),
                hidden.index_select(0, index).to(self.rows.dtype),
            )

    def holds(self, slot: int, request_id: str) -> bool:
        return self.owner[slot] == request_id

    def span(self, slot: int, start: int, end: int) -> tuple[list[int], torch.Tensor]:
        """Tokens and rows [end - start, hidden] of positions start..end-1."""
        return self.tokens[slot][start:end], self.rows[slot, start:end]
