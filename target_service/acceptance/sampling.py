"""Lossless speculative sampling with per-request seeds.

The target's sampling distribution p at each position is its logits after temperature, top-k and
top-p. Served rule (``SamplingAcceptor``, greedy drafts): every output position t has its own random
draw, seeded by (request seed, t), which selects token x_t from p_t; a draft is accepted when it equals
x_t, so with probability p(d), and the first mismatch emits x_t. The output is exactly plain sampling
with the same seed, whatever was drafted. ``accept_sampling`` is the general rule of Leviathan et al.
2023 (arXiv 2211.17192) for drafts drawn from a distribution q: accept d with probability
min(1, p(d) / q(d)), else draw from the residual max(0, p - q); it is kept for sampled drafts.
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


def position_draw(probs: torch.Tensor, seed: int, position: int) -> int:
    """The token that output ``position``'s own random draw selects from ``probs`` [vocab] (Gumbel-max).

    The draw depends only on (seed, position), so the same seed gives the same tokens whatever was drafted.
    """
    gen = torch.Generator().manual_seed((seed * 1_000_003 + position) % (2**63))
    u = torch.rand(probs.shape, generator=gen).clamp_(min=1e-20)
    return int(torch.argmax(torch.log(probs) - torch.log(-torch.log(u))))


class SamplingAcceptor:
    """Lossless speculative sampling where every output position has its own seeded draw.

    The token at output position t is ``position_draw(p_t, seed, t)``; a greedy draft is accepted when it
    equals that token (probability p(d), as in rejection sampling), and the first mismatch emits the drawn
    token. The text is therefore exactly that of plain sampling with the same seed, with or without drafts.
    """

    label = "sampling"
    batched_greedy = False

    def __init__(self, rule: SamplingRule, seed: int):
        self.rule, self.seed = rule, seed
        self.position = 0  # output tokens emitted so far

    def accept(self, logits: torch.Tensor, drafts: list[int]) -> list[int]:
        probs = self.rule.probs(logits)  # [n + 1, vocab]
        block: list[int] = []
        for j in range(len(drafts) + 1):
            token = position_draw(probs[j], self.seed, self.position + j)
            block.append(token)
            if j == len(drafts) or drafts[j] != token:
                break
        self.position += len(block)
        return block

    def bonus(self, row: torch.Tensor) -> int:
        return position_draw(self.rule.probs(row[None])[0], self.seed, self.position)

    def observe(self, tokens: list[int]) -> None:
        self.position += len(tokens)
