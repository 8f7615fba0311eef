"""The drafter's sub-vocabulary: its LM head restricted to the N most frequent target tokens.

Drafting cost is dominated by the LM head (vocab x hidden per draft token); the drafts that can be
accepted are almost always common tokens. ``SubVocab.ids`` lists target token ids, most frequent
first (counted over the training generations); the drafter computes logits over the first N rows
of the target's LM head only and maps its argmax back to target ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

VOCAB_FILE = "draft_vocab.safetensors"


@dataclass(frozen=True)
class SubVocab:
    ids: torch.Tensor  # [N] int64 target token ids, most frequent first

    def __post_init__(self) -> None:
        if self.ids.ndim != 1 or len(self.ids) == 0:
            raise ValueError("a sub-vocabulary needs at least one token id")
        if len(torch.unique(self.ids)) != len(self.ids):
            raise ValueError("sub-vocabulary ids must be distinct")

    @staticmethod
    def from_counts(counts: torch.Tensor, n: int) -> SubVocab:  # counts: [vocab]
        """The ``n`` most frequent ids (ties broken by the lower id, so the result is deterministic)."""
        order = sorted(range(len(counts)), key=lambda i: (-int(counts[i]), i))
        return SubVocab(torch.tensor(order[: min(n, len(counts))], dtype=torch.long))

    def truncate(self, n: int) -> SubVocab:
        """The first ``n`` ids (all when n <= 0 or n >= len)."""
        return self if n <= 0 or n >= len(self.ids) else SubVocab(self.ids[:n])

    def index_of(self, vocab_size: int) -> torch.Tensor:  # [vocab_size] int64, -1 where absent
        table = torch.full((vocab_size,), -1, dtype=torch.long)
        table[self.ids] = torch.arange(len(self.ids))
        return table

    def save(self, directory: Path) -> None:
        from safetensors.torch import save_file

        save_file({"ids": self.ids.contiguous()}, str(directory / VOCAB_FILE))

    @staticmethod
    def load(directory: Path) -> SubVocab | None:
        """The sub-vocabulary saved beside an MTP checkpoint, or None when there is none."""
        from safetensors.torch import load_file

        path = directory / VOCAB_FILE
        return SubVocab(load_file(str(path))["ids"].long()) if path.is_file() else None
