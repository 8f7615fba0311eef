"""Typed results of the Tandem client (no protobuf beyond this package's edge)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SpeculativeStats:
    num_steps: int
    num_drafted: int
    num_accepted: int
    mean_acceptance_length: float  # tokens emitted per verification step
    acceptance_rate_per_position: tuple[float, ...]  # [k]
    drafted_per_position: tuple[int, ...] = ()  # [k] steps that verified a draft at position j
    accepted_per_position: tuple[int, ...] = ()  # [k] steps that accepted it
    acceptance_mode: str = ""  # "greedy", "relaxed" or "sampling", "+forced" when forced
    steps_skipped_by_policy: int = 0  # steps without drafts: the draft policy judged them not worth it
    steps_without_drafts: int = 0  # steps without drafts although asked (drafter absent or late)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Chunk:
    """Tokens accepted in one engine step (one or more)."""

    request_id: str
    token_ids: tuple[int, ...]
    text: str


@dataclass(frozen=True)
class Completion:
    """The whole result of a generation."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str  # "stop" | "length" | "aborted"
    usage: Usage
    stats: SpeculativeStats
    message: str = ""


@dataclass(frozen=True)
class DrafterStatus:
    attached: bool = False
    steps: int = 0
    request_bytes: int = 0
    max_request_bytes: int = 0
    failures: int = 0
    attaches: int = 0


@dataclass(frozen=True)
class EngineProfile:
    """Cumulative seconds of the engine's step phases since the server started."""

    steps: int = 0
    forward_s: float = 0.0
    draft_s: float = 0.0
    other_s: float = 0.0


@dataclass(frozen=True)
class ModelInfo:
    model: str
    model_type: str
    vocab_size: int
    hidden_size: int
    dtype: str
    max_seq_len: int
    max_tokens_limit: int
    num_draft_tokens: int
    drafter: str
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)
    drafter_status: DrafterStatus = field(default_factory=DrafterStatus)
    profile: EngineProfile = field(default_factory=EngineProfile)
    kernels: str = ""  # matmul kernels of the target ("eager" or "onednn")
    draft_policy: dict = field(default_factory=dict)  # mode and cost model of the draft-length policy
