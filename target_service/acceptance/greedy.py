"""Strict greedy acceptance of draft tokens: a pure batched function and its per-sequence acceptor."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AcceptanceResult:
    accepted_tokens: torch.Tensor  # [num_seqs, k + 1] the first num_accepted[i] entries are emitted
    num_accepted: torch.Tensor  # [num_seqs] accepted drafts + 1 bonus token, in 1..k+1


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """[rows, vocab] -> [rows]: the target's greedy choice at each row."""
    return torch.argmax(logits, dim=-1)


def accept_greedy(
    target_tokens: torch.Tensor,  # [num_seqs, k + 1] target greedy token after each input position
    draft_tokens: torch.Tensor,  # [num_seqs, k] proposed drafts (padding is ignored)
    num_drafts: torch.Tensor,  # [num_seqs] drafts actually proposed per sequence, 0..k
) -> AcceptanceResult:
    """Accept the longest draft prefix that matches the target's greedy tokens, plus one bonus token.

    Row i verifies input ``[last, d_1 .. d_k]``: ``target_tokens[i, j]`` is what the target emits
    after position j. Draft d_{j+1} is accepted when it equals ``target_tokens[i, j]`` and every
    earlier draft was accepted; the target token after the last accepted draft is the bonus.
    Accepted drafts equal the target tokens at their positions, so ``target_tokens`` itself holds
    the emitted block.
    """
    k = draft_tokens.shape[1]
    in_range = torch.arange(k, device=draft_tokens.device)[None, :] < num_drafts[:, None]
    match = (draft_tokens == target_tokens[:, :k]) & in_range
    num_accepted = torch.cumprod(match.to(torch.long), dim=1).sum(dim=1) + 1
    return AcceptanceResult(accepted_tokens=target_tokens, num_accepted=num_accepted)


class GreedyAcceptor:
    """Strict greedy: lossless; the step verifies these rows batched (batch.py)."""

    label = "greedy"
    batched_greedy = True

    def accept(self, logits: torch.Tensor, drafts: list[int]) -> list[int]:
        best = greedy_tokens(logits)[None]  # [1, n + 1]
        result = accept_greedy(best, torch.tensor([drafts], dtype=torch.long).view(1, -1), torch.tensor([len(drafts)]))
        return best[0, : int(result.num_accepted[0])].tolist()

    def bonus(self, row: torch.Tensor) -> int:
        return int(torch.argmax(row))

    def observe(self, tokens: list[int]) -> None:
        return None
