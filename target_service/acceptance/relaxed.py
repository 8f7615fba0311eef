"""Relaxed acceptance inside thinking spans (lossy, opt-in per request).

Inside a thinking span (after a begin token, before the matching end token) a draft is accepted when
it is among the target's ``top_k`` candidates and its probability is at least the top-1 probability
minus ``delta``; outside a span acceptance is strict greedy. The span state follows the prompt and
every emitted token, so a span that opens or closes inside an accepted block switches the rule for
the drafts after it. Outputs can differ from greedy decoding: this trades exactness for acceptance.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ThinkingSpan:
    begin_id: int  # token that opens a span
    end_id: int  # token that closes it

    def after(self, in_span: bool, tokens: Iterable[int]) -> bool:
        """The span state after ``tokens``, starting from ``in_span``."""
        for t in tokens:
            if t == self.begin_id:
                in_span = True
            elif t == self.end_id:
                in_span = False
        return in_span


@dataclass(frozen=True)
class RelaxedRule:
    top_k: int  # candidates considered inside a span (>= 1)
    delta: float  # probability slack below the top-1 probability (>= 0)

    def accepts(self, probs: torch.Tensor, draft: int) -> bool:  # probs [vocab] of one position
        top = torch.topk(probs, min(self.top_k, probs.shape[-1]))
        return draft in top.indices.tolist() and float(probs[draft]) >= float(top.values[0]) - self.delta


def accept_relaxed(
    probs: torch.Tensor,  # [n + 1, vocab] target probabilities (temperature 1) at the block's positions
    drafts: list[int],  # [n] proposed drafts
    in_span: bool,  # span state before the block
    span: ThinkingSpan,
    rule: RelaxedRule,
) -> tuple[list[int], bool]:
    """Emitted block (accepted drafts + the target's greedy bonus) and the span state after it."""
    emitted: list[int] = []
    for j, d in enumerate(drafts):
        ok = rule.accepts(probs[j], d) if in_span else d == int(torch.argmax(probs[j]))
        if not ok:
            break
        emitted.append(d)
        in_span = span.after(in_span, [d])
    bonus = int(torch.argmax(probs[len(emitted)]))
    return emitted + [bonus], span.after(in_span, [bonus])


class RelaxedAcceptor:
    """Relaxed inside thinking spans, strict greedy outside; follows the span through every emitted token."""

    label = "relaxed"
    batched_greedy = False

    def __init__(self, rule: RelaxedRule, span: ThinkingSpan, in_span: bool):
        self.rule, self.span, self.in_span = rule, span, in_span

    def accept(self, logits: torch.Tensor, drafts: list[int]) -> list[int]:
        block, self.in_span = accept_relaxed(torch.softmax(logits, dim=-1), drafts, self.in_span, self.span, self.rule)
        return block

    def bonus(self, row: torch.Tensor) -> int:
        return int(torch.argmax(row))

    def observe(self, tokens: list[int]) -> None:
        self.in_span = self.span.after(self.in_span, tokens)
