"""One step's acceptance: strict greedy rows batched under a mask, every other method row by row."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from target_service.acceptance.base import Acceptor
from target_service.acceptance.greedy import AcceptanceResult, accept_greedy, greedy_tokens


@dataclass(frozen=True)
class VerifyBlock:
    """One sequence's block in the step: its logits are ``len(drafts) + 1`` consecutive rows."""

    acceptor: Acceptor
    drafts: list[int]  # [n] drafts verified (0 for a prefill chunk's last row or a step without drafts)


def accept_batch(logits: torch.Tensor, blocks: list[VerifyBlock | None]) -> AcceptanceResult:
    """logits [rows, vocab], packed block after block; ``None``: the sequence samples nothing (0 tokens)."""
    k_max = max((len(b.drafts) for b in blocks if b is not None), default=0)
    tokens = torch.zeros((len(blocks), k_max + 1), dtype=torch.long)
    counts = torch.zeros(len(blocks), dtype=torch.long)
    first_row, row = [], 0
    for b in blocks:
        first_row.append(row)
        row += len(b.drafts) + 1 if b is not None else 0
    greedy = [i for i, b in enumerate(blocks) if b is not None and b.acceptor.batched_greedy]
    if greedy:
        _accept_greedy_rows(logits, blocks, first_row, greedy, tokens, counts)
    for i, b in enumerate(blocks):
        if b is None or b.acceptor.batched_greedy:
            continue
        n = len(b.drafts) + 1
        block = b.acceptor.accept(logits[first_row[i] : first_row[i] + n].float().cpu(), b.drafts)
        tokens[i, : len(block)] = torch.tensor(block)
        counts[i] = len(block)
    return AcceptanceResult(tokens, counts)


def _accept_greedy_rows(logits, blocks, first_row, greedy, tokens, counts) -> None:
    k_max = tokens.shape[1] - 1
    chosen = greedy_tokens(logits).cpu()  # [rows]
    target = torch.zeros((len(greedy), k_max + 1), dtype=torch.long)
    drafts = torch.full((len(greedy), k_max), -1, dtype=torch.long)
    num_drafts = torch.zeros(len(greedy), dtype=torch.long)
    for j, i in enumerate(greedy):
        n = len(blocks[i].drafts)
        target[j, : n + 1] = chosen[first_row[i] : first_row[i] + n + 1]
        drafts[j, :n] = torch.tensor(blocks[i].drafts, dtype=torch.long)
        num_drafts[j] = n
    result = accept_greedy(target, drafts, num_drafts)
    tokens[greedy] = result.accepted_tokens
    counts[greedy] = result.num_accepted
