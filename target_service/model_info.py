"""What the target serves, fixed at start-up (GetModelInfo adds the live parts: profile, policy, link)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelInfo:
    model: str  # where the weights came from
    model_type: str  # transformers model_type
    vocab_size: int
    hidden_size: int
    dtype: str
    max_seq_len: int  # prompt + output tokens per sequence
    max_tokens_limit: int  # largest max_tokens a request may ask for
    num_draft_tokens: int  # server k
    drafter: str  # none | grpc
    eos_token_ids: tuple[int, ...]
    kernels: str  # eager | onednn
