"""Forced acceptance (benchmarking only): a fixed number of drafts is accepted whatever the target says."""

from __future__ import annotations

import torch

from target_service.acceptance.base import Acceptor


class ForcedAcceptor:
    """Wraps another method: keeps the first ``forced`` drafts, then that method's bonus token."""

    batched_greedy = False

    def __init__(self, inner: Acceptor, forced: int):
        self.inner, self.forced = inner, forced
        self.label = inner.label + "+forced"

    def accept(self, logits: torch.Tensor, drafts: list[int]) -> list[int]:
        kept = drafts[: self.forced]
        self.inner.observe(kept)
        bonus = self.inner.bonus(logits[len(kept)])
        self.inner.observe([bonus])
        return kept + [bonus]

    def bonus(self, row: torch.Tensor) -> int:
        return self.inner.bonus(row)

    def observe(self, tokens: list[int]) -> None:
        self.inner.observe(tokens)
