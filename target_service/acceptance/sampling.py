"""Lossless speculative sampling (Leviathan et al. 2023, arXiv 2211.17192) with per-request seeds.

The target's sampling distribution p at each position is its logits after temperature, top-k and
top-p. A draft d drawn from q is accepted with probability min(1, p(d) / q(d)); on the first
rejection the token is drawn from the residual max(0, p - q) (renormalised) and the block ends;
if every draft is accepted a bonus token is drawn from p at the next position. Greedy drafts are
the case q = one-hot(d): accept with probability p(d), residual = p without d. The emitted tokens
are distributed exactly as sampling from the target one token at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingRule:
    temperature: float  # > 0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off

    def probs(self, logits: torch.Tensor) -> torch.Tensor:  # [rows, vocab] -> [rows, vocab] float32
        x = logits.float() / self.temperature
        if self.top_k > 0 and self.top_k < x.shape[-1]:
            kth = torch.topk(x, self.top_k, dim=-1).values[..., -1:]
            x = x.masked_fill(x < kth, float("-inf"))
        probs = torch.softmax(x, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = torch.sort(probs, dim=-1, descending=True)
            before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass strictly above each token
            sorted_p = sorted_p.masked_fill(before >= self.top_p, 0.0)  # keep the smallest set reaching top_p
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
            probs = probs / probs.sum(dim=-1, keepdim=True)
        return probs


def _draw(probs: torch.Tensor, gen: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=gen))


def accept_sampling(
    probs: torch.Tensor,  # [n + 1, vocab] target sampling distribution at the block's positions
    drafts: list[int],  # [n]
    gen: torch.Generator,  # the request's own generator (seeded per request)
    draft_probs: torch.Tensor | None = None,  # [n, vocab] q of each draft; None = greedy drafts (one-hot)
) -> list[int]:
    """The emitted block: accepted drafts, then a residual draw or a bonus draw."""
    out: list[int] = []
    for j, d in enumerate(drafts):
        p_d = float(probs[j, d])
        q_d = 1.0 if draft_probs is None else float(draft_probs[j, d])
        u = float(torch.rand((), generator=gen))
        if q_d > 0 and u < min(1.0, p_d / q_d):
            out.append(d)
            continue
        if draft_probs is None:
            residual = probs[j].clone()
            residual[d] = 0.0
        else:
            residual = torch.clamp(probs[j] - draft_probs[j], min=0.0)
        total = float(residual.sum())
        out.append(_draw(residual / total, gen) if total > 0 else _draw(probs[j], gen))
        return out
    out.append(_draw(probs[len(drafts)], gen))
    return out


class SamplingAcceptor:
    """Lossless speculative sampling with the request's own seeded generator."""

    label = "sampling"
    batched_greedy = False

    def __init__(self, rule: SamplingRule, generator: torch.Generator):
        self.rule, self.generator = rule, generator

    def accept(self, logits: torch.Tensor, drafts: list[int]) -> list[int]:
        return accept_sampling(self.rule.probs(logits), drafts, self.generator)

    def bonus(self, row: torch.Tensor) -> int:
        return _draw(self.rule.probs(row[None])[0], self.generator)

    def observe(self, tokens: list[int]) -> None:
        return None
