"""What every acceptance method is: a per-sequence object that turns one verified block into tokens."""

from __future__ import annotations

from typing import Protocol

import torch


class Acceptor(Protocol):
    """One sequence's acceptance method and its state (generator, thinking-span flag)."""

    label: str  # what the final message reports: greedy, relaxed, sampling (+forced)
    batched_greedy: bool  # strict greedy: verified together with the other such rows, under a mask

    def accept(self, logits: torch.Tensor, drafts: list[int]) -> list[int]:
        """logits [n + 1, vocab] float32 on CPU at the block's positions; drafts [n]. The emitted block."""
        ...

    def bonus(self, row: torch.Tensor) -> int:
        """The token the method emits at a position with no draft to check (row [vocab])."""
        ...

    def observe(self, tokens: list[int]) -> None:
        """Tokens emitted outside ``accept`` (forced blocks): update the state they affect."""
        ...
