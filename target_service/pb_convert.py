"""Protobuf <-> domain conversion for the public API (the only place that touches mtp.v1 messages)."""

from __future__ import annotations

from protos.mtp.v1 import target_service_pb2 as pb
from target_service.drafter import DrafterStatus
from target_service.frontend import Prompt, UserParams
from target_service.model_info import ModelInfo
from target_service.profile import StepProfile
from target_service.sequence import FinishEvent, FinishReason, SpecStats, TokenEvent

_REASONS = {
    FinishReason.STOP: pb.FINISH_REASON_STOP,
    FinishReason.LENGTH: pb.FINISH_REASON_LENGTH,
    FinishReason.ABORTED: pb.FINISH_REASON_ABORTED,
}


def prompt_from_pb(inp: pb.GenerationInput) -> Prompt:
    kind = inp.WhichOneof("prompt")
    if kind == "chat":
        return Prompt(messages=tuple((m.role, m.content) for m in inp.chat.messages))
    if kind == "token_ids":
        return Prompt(token_ids=tuple(inp.token_ids.ids))
    return Prompt(text=inp.text)  # also when unset: "" is reported as an empty prompt


def params_from_pb(p: pb.GenerationParams) -> UserParams:
    return UserParams(
        max_tokens=p.max_tokens,
        stop=tuple(p.stop),
        stop_token_ids=tuple(p.stop_token_ids),
        ignore_eos=p.ignore_eos,
        num_draft_tokens=p.num_draft_tokens if p.HasField("num_draft_tokens") else None,
        temperature=p.temperature,
        top_p=p.top_p or 1.0,
        top_k=p.top_k,
        seed=p.seed if p.HasField("seed") else None,
        acceptance=p.acceptance or "strict",
        relaxed_top_k=p.relaxed_top_k or None,
        relaxed_delta=p.relaxed_delta if p.HasField("relaxed_delta") else None,
        force_accept=p.force_accept if p.HasField("force_accept") else None,
        draft_length=p.draft_length,
    )


def stats_to_pb(s: SpecStats) -> pb.SpeculativeStats:
    rates = [a / d if d else 0.0 for a, d in zip(s.accepted_per_position, s.drafted_per_position, strict=False)]
    return pb.SpeculativeStats(
        num_steps=s.num_steps,
        num_drafted=s.num_drafted,
        num_accepted=s.num_accepted,
        mean_acceptance_length=s.mean_acceptance_length,
        acceptance_rate_per_position=rates,
        drafted_per_position=s.drafted_per_position,
        accepted_per_position=s.accepted_per_position,
        acceptance_mode=s.mode,
        steps_skipped_by_policy=s.skipped_by_policy,
        steps_without_drafts=s.skipped_no_drafts,
    )


def result_to_pb(e: FinishEvent, include_text: bool = True) -> pb.GenerationResult:
    return pb.GenerationResult(
        finish_reason=_REASONS[e.reason],
        usage=pb.Usage(prompt_tokens=e.prompt_tokens, completion_tokens=e.completion_tokens),
        stats=stats_to_pb(e.stats),
        text=e.text if include_text else "",
        message=e.message,
    )


def event_to_pb(request_id: str, e: TokenEvent | FinishEvent) -> pb.GenerateStreamResponse:
    if isinstance(e, TokenEvent):
        chunk = pb.TokenChunk(token_ids=list(e.token_ids), text=e.text)
        return pb.GenerateStreamResponse(request_id=request_id, chunk=chunk)
    return pb.GenerateStreamResponse(request_id=request_id, final=result_to_pb(e))


def model_info_to_pb(
    info: ModelInfo, profile: StepProfile, policy: dict, drafter: DrafterStatus | None
) -> pb.GetModelInfoResponse:
    """Start-up facts plus the live engine profile, draft policy and draft link."""
    out = pb.GetModelInfoResponse(
        model=info.model,
        model_type=info.model_type,
        vocab_size=info.vocab_size,
        hidden_size=info.hidden_size,
        dtype=info.dtype,
        max_seq_len=info.max_seq_len,
        max_tokens_limit=info.max_tokens_limit,
        num_draft_tokens=info.num_draft_tokens,
        drafter=info.drafter,
        eos_token_ids=list(info.eos_token_ids),
        kernels=info.kernels,
        profile=pb.EngineProfile(
            steps=profile.steps, forward_s=profile.forward_s, draft_s=profile.draft_s, other_s=profile.other_s
        ),
        draft_policy=pb.DraftPolicyInfo(**policy),
    )
    if drafter is not None:
        out.drafter_status.CopyFrom(
            pb.DrafterStatus(
                attached=drafter.attached,
                steps=drafter.steps,
                request_bytes=drafter.request_bytes,
                max_request_bytes=drafter.max_request_bytes,
                failures=drafter.failures,
                attaches=drafter.attaches,
            )
        )
    return out
