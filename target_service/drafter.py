"""How the engine gets draft tokens: one interface, plus the null drafter (no speculation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class StepOutput:
    """What one engine step produced, handed to the drafter (and, next issue, to the draft service).

    Sequences appear in step order; tokens are packed in the same order.
    """

    request_ids: list[str]  # [num_seqs]
    slots: torch.Tensor  # [num_seqs] int64 KV slot
    is_context: torch.Tensor  # [num_seqs] bool, True for a prefill chunk
    q_lens: torch.Tensor  # [num_seqs] int64 tokens of each sequence in this step
    input_ids: torch.Tensor  # [num_tokens] int64 packed step inputs
    positions: torch.Tensor  # [num_tokens] int64 packed positions
    hidden_states: torch.Tensor  # [num_tokens, hidden_size] final hidden states of every input token
    accepted_tokens: torch.Tensor  # [num_seqs, k_max + 1] emitted block (first num_accepted entries)
    num_accepted: torch.Tensor  # [num_seqs] tokens accepted (drafts + bonus); 0 if the step sampled none
    num_output_tokens: torch.Tensor  # [num_seqs] output length after this step
    num_draft_tokens: torch.Tensor  # [num_seqs] drafts wanted for the next step (0 = none)
    next_prompt_token: torch.Tensor  # [num_seqs] prompt token after a non-final prefill chunk, else -1
    finished: torch.Tensor  # [num_seqs] bool, the sequence ended in this step


class Drafter(Protocol):
    """Proposes draft tokens for the next step from this step's output."""

    def propose(self, step: StepOutput) -> list[list[int]]:
        """Per sequence of ``step``: up to ``num_draft_tokens[i]`` draft token ids."""
        ...

    def release(self, request_ids: list[str]) -> None:
        """These requests finished; drop their state."""
        ...


class NullDrafter:
    """No speculation: every step verifies zero drafts."""

    def propose(self, step: StepOutput) -> list[list[int]]:
        return [[] for _ in step.request_ids]

    def release(self, request_ids: list[str]) -> None:
        return None
