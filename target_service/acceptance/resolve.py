"""A request's acceptance method, from its parameters and the server's defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass

from target_service.acceptance.base import Acceptor
from target_service.acceptance.forced import ForcedAcceptor
from target_service.acceptance.greedy import GreedyAcceptor
from target_service.acceptance.relaxed import RelaxedAcceptor, RelaxedRule, ThinkingSpan
from target_service.acceptance.sampling import SamplingAcceptor, SamplingRule


@dataclass(frozen=True)
class AcceptanceDefaults:
    """Server-wide settings (flags) that requests may override."""

    span: ThinkingSpan | None = None  # thinking-span delimiters; relaxed acceptance needs them
    relaxed: RelaxedRule = RelaxedRule(top_k=3, delta=0.1)
    force_accept: int = -1  # drafts accepted regardless of the target (benchmarking only); -1 = off


def acceptor_for(params, defaults: AcceptanceDefaults, prompt: tuple[int, ...]) -> Acceptor:
    """The acceptor of one request (SamplingParams validated by the frontend)."""
    forced = defaults.force_accept if params.force_accept is None else params.force_accept
    method = _method(params, defaults, prompt)
    return ForcedAcceptor(method, forced) if forced >= 0 else method


def _method(params, defaults: AcceptanceDefaults, prompt: tuple[int, ...]) -> Acceptor:
    if params.temperature > 0:
        rule = SamplingRule(params.temperature, params.top_k, params.top_p)
        return SamplingAcceptor(rule, _seed(params.seed))
    if params.acceptance == "relaxed":
        if defaults.span is None:
            raise ValueError("relaxed acceptance needs a thinking span (--think-begin-token/--think-end-token)")
        top_k = params.relaxed_top_k or defaults.relaxed.top_k
        delta = defaults.relaxed.delta if params.relaxed_delta is None else params.relaxed_delta
        return RelaxedAcceptor(RelaxedRule(top_k, delta), defaults.span, defaults.span.after(False, prompt))
    return GreedyAcceptor()


def _seed(seed: int | None) -> int:
    """The request's seed, or one from the OS."""
    return seed if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
