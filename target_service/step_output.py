"""What one engine step produced: the drafter's whole view of the step.

Sequences appear in step order and their tokens are packed in the same order. Per-sequence
metadata are plain lists; tensors hold only hidden states, token ids, positions and accepted tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepOutput:
    request_ids: list[str]  # [num_seqs]
    slots: list[int]  # [num_seqs] KV slot
    is_context: list[bool]  # [num_seqs] True for a prefill chunk
    q_lens: list[int]  # [num_seqs] tokens of each sequence in this step
    input_ids: torch.Tensor  # [num_tokens] int64 packed step inputs
    positions: torch.Tensor  # [num_tokens] int64 packed positions
    hidden_states: torch.Tensor  # [num_tokens, hidden_size] final hidden states of every input token
    accepted_tokens: torch.Tensor  # [num_seqs, k_max + 1] int64 emitted block (first num_accepted entries)
    num_accepted: list[int]  # [num_seqs] tokens accepted (drafts + bonus); 0 if the step sampled none
    num_output_tokens: list[int]  # [num_seqs] output length after this step
    num_draft_tokens: list[int]  # [num_seqs] drafts wanted for the next step (0 = none)
    next_prompt_token: list[int]  # [num_seqs] prompt token after a non-final prefill chunk, else -1
    finished: list[bool]  # [num_seqs] the sequence ended in this step
