"""Request parameters and the engine's per-sequence state."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from target_service.acceptance import Acceptor, GreedyAcceptor


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    num_draft_tokens: int | None = None  # None: the server's default k; 0 disables speculation
    temperature: float = 0.0  # 0 = greedy; > 0 = speculative sampling (lossless)
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int | None = None  # per-request sampling seed (None = random)
    acceptance: str = "strict"  # "strict" | "relaxed" (greedy only; lossy inside thinking spans)
    relaxed_top_k: int | None = None  # None: the server's default
    relaxed_delta: float | None = None
    force_accept: int | None = None  # drafts accepted regardless of the target (benchmarking); None: server's
    draft_length: str = ""  # "auto" | "fixed" | "" (the server's --draft-length)


@dataclass(frozen=True)
class EngineRequest:
    request_id: str
    prompt_ids: tuple[int, ...]
    params: SamplingParams


class FinishReason(enum.Enum):
    STOP = "stop"  # EOS, a stop token id or a stop string
    LENGTH = "length"  # max_tokens reached
    ABORTED = "aborted"  # cancelled by the client or the server


@dataclass
class SpecStats:
    """Speculative statistics of one request (generation steps only)."""

    num_steps: int = 0  # verification steps (each emits >= 1 token)
    num_drafted: int = 0  # draft tokens proposed and verified
    num_accepted: int = 0  # draft tokens accepted
    mode: str = "greedy"  # how drafts were verified: greedy, relaxed, sampling (+forced)
    drafted_per_position: list[int] = field(default_factory=list)  # [k]
    accepted_per_position: list[int] = field(default_factory=list)  # [k]
    skipped_by_policy: int = 0  # steps without drafts because the draft policy judged them not worth it
    skipped_no_drafts: int = 0  # steps without drafts although some were asked (drafter absent or late)

    def record(self, num_drafts: int, num_accepted_drafts: int) -> None:
        self.num_steps += 1
        self.num_drafted += num_drafts
        self.num_accepted += num_accepted_drafts
        grow = num_drafts - len(self.drafted_per_position)
        if grow > 0:
            self.drafted_per_position.extend([0] * grow)
            self.accepted_per_position.extend([0] * grow)
        for j in range(num_drafts):
            self.drafted_per_position[j] += 1
            self.accepted_per_position[j] += int(j < num_accepted_drafts)

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens emitted per verification step (1.0 without speculation)."""
        return (self.num_accepted + self.num_steps) / self.num_steps if self.num_steps else 0.0


@dataclass(frozen=True)
class TokenEvent:
    token_ids: tuple[int, ...]
    text: str


@dataclass(frozen=True)
class FinishEvent:
    reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    stats: SpecStats
    text: str = ""  # text held back until the end (stop-string look-ahead)
    message: str = ""  # why, when aborted by the server


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    """Mutable state of one request, owned by the engine thread."""

    request: EngineRequest
    num_draft_tokens: int  # k for this request, resolved against the server's limit
    slot: int = -1
    status: SeqStatus = SeqStatus.WAITING
    output_ids: list[int] = field(default_factory=list)
    num_cached: int = 0  # tokens with valid KV in the slot
    draft_ids: list[int] = field(default_factory=list)  # drafts to verify next step
    drafts_cap: int = 0  # most drafts the next step could verify (request k, max_tokens)
    drafts_asked: int = 0  # drafts the draft policy asked for the next step
    stats: SpecStats = field(default_factory=SpecStats)
    acceptor: Acceptor = field(default_factory=GreedyAcceptor)  # acceptance method and its state

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def num_tokens(self) -> int:
        return len(self.request.prompt_ids) + len(self.output_ids)

    @property
    def in_prefill(self) -> bool:
        return self.num_cached < len(self.request.prompt_ids)

    @property
    def last_token(self) -> int:
        return self.output_ids[-1] if self.output_ids else self.request.prompt_ids[-1]

    def useful_drafts(self) -> int:
        """Most drafts worth verifying: more than max_tokens - 1 past here could never be emitted."""
        remaining = self.request.params.max_tokens - len(self.output_ids)
        return max(0, min(self.num_draft_tokens, remaining - 1))
