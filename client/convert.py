"""Request building and response parsing shared by the sync and asyncio clients."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.json_format import MessageToDict

from client.types import Chunk, Completion, DrafterStatus, EngineProfile, ModelInfo, SpeculativeStats, Usage
from protos.mtp.v1 import target_service_pb2 as pb

Prompt = str | Sequence[dict] | Sequence[int]
_REASONS = {pb.FINISH_REASON_STOP: "stop", pb.FINISH_REASON_LENGTH: "length", pb.FINISH_REASON_ABORTED: "aborted"}


def build_input(
    prompt: Prompt,
    *,
    max_tokens: int = 0,
    stop: Sequence[str] = (),
    stop_token_ids: Sequence[int] = (),
    ignore_eos: bool = False,
    num_draft_tokens: int | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    acceptance: str = "",
    relaxed_top_k: int = 0,
    relaxed_delta: float | None = None,
    force_accept: int | None = None,
    draft_length: str = "",
    request_id: str = "",
) -> pb.GenerationInput:
    """``prompt``: text, chat messages ([{"role": ..., "content": ...}]) or token ids.

    temperature 0 is greedy; above 0 the server samples (lossless speculative sampling). ``acceptance``
    "relaxed" (greedy only) relaxes acceptance inside thinking spans; ``force_accept`` is for benchmarks.
    """
    params = pb.GenerationParams(
        max_tokens=max_tokens,
        stop=list(stop),
        stop_token_ids=list(stop_token_ids),
        ignore_eos=ignore_eos,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        acceptance=acceptance,
        relaxed_top_k=relaxed_top_k,
        draft_length=draft_length,
    )
    for name, value in (
        ("num_draft_tokens", num_draft_tokens),
        ("seed", seed),
        ("relaxed_delta", relaxed_delta),
        ("force_accept", force_accept),
    ):
        if value is not None:
            setattr(params, name, value)
    inp = pb.GenerationInput(request_id=request_id, params=params)
    if isinstance(prompt, str):
        inp.text = prompt
    elif prompt and all(isinstance(m, dict) for m in prompt):
        inp.chat.messages.extend(pb.ChatMessage(role=m.get("role", ""), content=m.get("content", "")) for m in prompt)
    elif all(isinstance(t, int) for t in prompt):
        inp.token_ids.ids.extend(prompt)
        if not prompt:
            inp.text = ""
    else:
        raise TypeError("prompt must be a str, a list of chat message dicts, or a list of token ids")
    return inp


def stats_from_pb(s: pb.SpeculativeStats) -> SpeculativeStats:
    return SpeculativeStats(
        s.num_steps,
        s.num_drafted,
        s.num_accepted,
        s.mean_acceptance_length,
        tuple(s.acceptance_rate_per_position),
        tuple(s.drafted_per_position),
        tuple(s.accepted_per_position),
        s.acceptance_mode,
        s.steps_skipped_by_policy,
        s.steps_without_drafts,
    )


def completion_from_final(request_id: str, text: str, ids: list[int], r: pb.GenerationResult) -> Completion:
    return Completion(
        request_id=request_id,
        text=text,
        token_ids=tuple(ids),
        finish_reason=_REASONS.get(r.finish_reason, "unspecified"),
        usage=Usage(r.usage.prompt_tokens, r.usage.completion_tokens),
        stats=stats_from_pb(r.stats),
        message=r.message,
    )


def completion_from_pb(resp: pb.GenerateResponse) -> Completion:
    return completion_from_final(resp.request_id, resp.text, list(resp.token_ids), resp.result)


def chunk_from_pb(msg: pb.GenerateStreamResponse) -> Chunk:
    return Chunk(msg.request_id, tuple(msg.chunk.token_ids), msg.chunk.text)


def model_info_from_pb(m: pb.GetModelInfoResponse) -> ModelInfo:
    return ModelInfo(
        m.model,
        m.model_type,
        m.vocab_size,
        m.hidden_size,
        m.dtype,
        m.max_seq_len,
        m.max_tokens_limit,
        m.num_draft_tokens,
        m.drafter,
        tuple(m.eos_token_ids),
        DrafterStatus(
            m.drafter_status.attached,
            m.drafter_status.steps,
            m.drafter_status.request_bytes,
            m.drafter_status.max_request_bytes,
            m.drafter_status.failures,
            m.drafter_status.attaches,
        ),
        EngineProfile(m.profile.steps, m.profile.forward_s, m.profile.draft_s, m.profile.other_s),
        m.kernels,
        MessageToDict(m.draft_policy, preserving_proto_field_name=True),
    )


class StreamAccumulator:
    """Collects a stream into chunks and, at the end, a Completion."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.ids: list[int] = []
        self.completion: Completion | None = None

    def add(self, msg: pb.GenerateStreamResponse) -> Chunk | None:
        """Return the chunk to yield (the final held-back text comes as a last chunk), if any."""
        if msg.WhichOneof("event") == "chunk":
            chunk = chunk_from_pb(msg)
            self.text.append(chunk.text)
            self.ids.extend(chunk.token_ids)
            return chunk
        final = msg.final
        self.text.append(final.text)
        self.completion = completion_from_final(msg.request_id, "".join(self.text), self.ids, final)
        return Chunk(msg.request_id, (), final.text) if final.text else None
