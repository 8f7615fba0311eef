"""What one benchmarked request produced, for every kind of runner (Tandem over gRPC, transformers)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Config:
    """One benchmarked configuration."""

    name: str  # e.g. "eagle k=3", "no speculation", "transformers prompt lookup"
    runner: str  # "tandem" | "hf_generate" | "hf_prompt_lookup"
    target: str = ""  # which launched target serves it: "none", "eagle" or "vanilla"
    k: int = 0  # draft tokens per step (tandem)
    temperature: float = 0.0  # 0 = greedy
    acceptance: str = ""  # "" = the default for the sampling mode; "relaxed" for thinking spans
    draft_length: str = "fixed"  # "fixed": k drafts every step; "auto": 0..k chosen per step (k is the cap)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 and self.acceptance in ("", "strict")


@dataclass
class RequestRecord:
    config: str
    concurrency: int
    category: str
    prompt_index: int
    token_ids: list[int]
    chunk_times: list[float]  # [num_chunks] seconds since the request started, when each chunk arrived
    chunk_sizes: list[int]  # [num_chunks] tokens per chunk
    e2e_s: float  # request start to the final message
    steps: int = 0  # verification steps (tandem)
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    profile: dict[str, float] = field(default_factory=dict)  # engine phase seconds during this request (batch 1)

    @property
    def tokens(self) -> int:
        return len(self.token_ids)

    @property
    def ttft_s(self) -> float:
        return self.chunk_times[0] if self.chunk_times else self.e2e_s

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first."""
        return (self.e2e_s - self.ttft_s) / max(1, self.tokens - 1)

    def itl_per_token(self) -> list[float]:
        """Inter-token latencies counted per token: a chunk of n tokens after a gap g is n gaps of g/n."""
        out = []
        for prev, now, n in zip(self.chunk_times, self.chunk_times[1:], self.chunk_sizes[1:]):
            out += [(now - prev) / n] * n
        return out
