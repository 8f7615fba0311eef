"""Acceptance of draft tokens: one class per method, one batched entry point for a step.

greedy.py (strict, lossless), relaxed.py (thinking spans, lossy, opt-in), sampling.py (lossless
speculative sampling), forced.py (benchmarking wrapper), resolve.py (which one a request gets),
batch.py (``accept_batch``: greedy rows batched under a mask, the others row by row).
"""

from target_service.acceptance.base import Acceptor
from target_service.acceptance.batch import VerifyBlock, accept_batch
from target_service.acceptance.greedy import AcceptanceResult, GreedyAcceptor, accept_greedy, greedy_tokens
from target_service.acceptance.resolve import AcceptanceDefaults, acceptor_for

__all__ = [
    "AcceptanceDefaults",
    "AcceptanceResult",
    "Acceptor",
    "GreedyAcceptor",
    "VerifyBlock",
    "accept_batch",
    "accept_greedy",
    "acceptor_for",
    "greedy_tokens",
]
