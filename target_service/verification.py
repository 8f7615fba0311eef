"""How one sequence's block of drafts is verified: strict greedy, relaxed (thinking spans), speculative
sampling, optionally with a forced accepted count. Resolved once per request, applied per step."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from target_service.relaxed_acceptance import RelaxedRule, ThinkingSpan, accept_relaxed
from target_service.spec_sampling import SamplingRule, accept_sampling


@dataclass(frozen=True)
class AcceptanceDefaults:
    """Server-wide settings (flags) that requests may override."""

    span: ThinkingSpan | None = None  # thinking-span delimiters; relaxed acceptance needs them
    relaxed: RelaxedRule = RelaxedRule(top_k=3, delta=0.1)
    force_accept: int = -1  # drafts accepted regardless of the target (benchmarking only); -1 = off


@dataclass(frozen=True)
class Verification:
    mode: str  # "greedy" | "relaxed" | "sampling"
    sampling: SamplingRule | None = None  # set for "sampling"
    relaxed: RelaxedRule | None = None  # set for "relaxed"
    span: ThinkingSpan | None = None  # set for "relaxed"
    forced: int = -1  # -1 = off

    @property
    def label(self) -> str:
        """What the final message reports, e.g. "greedy", "sampling", "relaxed+forced"."""
        return self.mode + ("+forced" if self.forced >= 0 else "")

    @property
    def is_strict_greedy(self) -> bool:
        return self.mode == "greedy" and self.forced < 0


@dataclass
class VerifyState:
    """Per-sequence mutable state: the seeded generator and the thinking-span flag."""

    generator: torch.Generator
    in_span: bool = False


def resolve(params, defaults: AcceptanceDefaults) -> Verification:
    """A request's verification from its SamplingParams (validated by the frontend) and the server defaults."""
    forced = defaults.force_accept if params.force_accept is None else params.force_accept
    if params.temperature > 0:
        rule = SamplingRule(params.temperature, params.top_k, params.top_p)
        return Verification("sampling", sampling=rule, forced=forced)
    if params.acceptance == "relaxed":
        if defaults.span is None:
            raise ValueError("relaxed acceptance needs a thinking span (--think-begin-token/--think-end-token)")
        top_k = params.relaxed_top_k or defaults.relaxed.top_k
        delta = defaults.relaxed.delta if params.relaxed_delta is None else params.relaxed_delta
        return Verification("relaxed", relaxed=RelaxedRule(top_k, delta), span=defaults.span, forced=forced)
    return Verification("greedy", forced=forced)


def new_state(v: Verification, seed: int | None, prompt: tuple[int, ...]) -> VerifyState:
    gen = torch.Generator()
    gen.manual_seed(seed if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1)
    in_span = v.span.after(False, prompt) if v.span is not None else False
    return VerifyState(gen, in_span)


def verify(v: Verification, logits: torch.Tensor, drafts: list[int], state: VerifyState) -> list[int]:
    """logits [n + 1, vocab] at the block's positions; drafts [n]. Returns the emitted block (>= 1 token)."""
    logits = logits.float().cpu()  # the request's seeded generator is a CPU generator, whatever the model's device
    if v.forced >= 0:
        kept = drafts[: v.forced]
        block = kept + [_bonus(v, logits[len(kept)], state)]
        if v.span is not None:
            state.in_span = v.span.after(state.in_span, block)
        return block
    if v.mode == "sampling":
        return accept_sampling(v.sampling.probs(logits), drafts, state.generator)
    if v.mode == "relaxed":
        probs = torch.softmax(logits.float(), dim=-1)
        block, state.in_span = accept_relaxed(probs, drafts, state.in_span, v.span, v.relaxed)
        return block
    best = torch.argmax(logits, dim=-1).tolist()
    n = 0
    while n < len(drafts) and drafts[n] == best[n]:
        n += 1
    return drafts[:n] + [best[n]]


def _bonus(v: Verification, row: torch.Tensor, state: VerifyState) -> int:
    if v.mode == "sampling":
        return int(torch.multinomial(v.sampling.probs(row[None])[0], 1, generator=state.generator))
    return int(torch.argmax(row))
