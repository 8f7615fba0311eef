"""Process entry point: load the model, start the engine and the gRPC server, serve until signalled."""

from __future__ import annotations

import copy
import logging
import time

import torch

from tandem_core.families import UnsupportedModelError
from tandem_core.gc_pauses import freeze_startup_objects
from tandem_core.grpc_server import wait_for_signal
from tandem_core.memory import fix_malloc_thresholds, use_huge_pages
from tandem_core.metrics_http import serve_metrics
from tandem_core.model_loader import ModelNotFoundError, load_model
from target_service.acceptance import AcceptanceDefaults
from target_service.acceptance.relaxed import RelaxedRule, ThinkingSpan
from target_service.config import TargetConfig, parse_config
from target_service.draft_policy import DraftPolicy, calibrate_step_cost
from target_service.engine import Engine, EngineLimits
from target_service.frontend import Frontend, FrontendLimits
from target_service.model_info import ModelInfo
from target_service.model_runner import ModelRunner
from target_service.profile import StepTrace
from target_service.scheduler import SchedulerLimits
from target_service.sequence import EngineRequest, FinishEvent, SamplingParams
from target_service.server import TargetServicer, build_server
from target_service.step_baton import StepBaton
from target_service.tokenizer import LockedTokenizer

log = logging.getLogger("tandem.target")


def build_engine(config: TargetConfig) -> tuple[Engine, Frontend, ModelInfo]:
    loaded = load_model(config.model, config.dtype, config.device)
    runner = ModelRunner(loaded.model, config.max_slots, config.max_seq_len, config.kernels)
    tokenizer = LockedTokenizer(loaded.tokenizer)  # the engine's (detokenizing)
    # prompts are tokenized on their own copy: a long prompt never holds the lock the engine's step needs
    prompt_tokenizer = LockedTokenizer(copy.deepcopy(loaded.tokenizer))
    limits = SchedulerLimits(
        config.max_slots, config.max_seq_len, config.max_batch_tokens, config.max_queue, config.num_draft_tokens
    )
    acceptance = acceptance_defaults(config, loaded.tokenizer, runner.vocab_size)
    policy = make_policy(config, runner)
    drafter = make_drafter(config, runner, policy)
    trace = StepTrace(config.step_trace) if config.step_trace else None
    limits = EngineLimits(limits, config.num_draft_tokens)
    engine = Engine(runner, tokenizer, limits, drafter, acceptance, policy, trace)
    engine.baton = StepBaton(config.step_baton) if config.step_baton else None
    frontend = Frontend(
        prompt_tokenizer,
        FrontendLimits(
            runner.vocab_size,
            config.max_seq_len,
            config.default_max_tokens,
            thinking_span=acceptance.span is not None,
            max_token_chars=max(len(t) for t in loaded.tokenizer.get_vocab()),
        ),
    )
    text_config = loaded.model.config
    info = ModelInfo(
        model=loaded.source,
        model_type=text_config.model_type,
        vocab_size=runner.vocab_size,
        hidden_size=text_config.hidden_size,
        dtype=config.dtype,
        max_seq_len=config.max_seq_len,
        max_tokens_limit=config.max_seq_len - 1,
        num_draft_tokens=config.num_draft_tokens,
        drafter=config.drafter,
        eos_token_ids=tuple(sorted(engine.eos_ids)),
        kernels=runner.kernels,
    )
    return engine, frontend, info


def token_id(tokenizer, spec: str, vocab_size: int) -> int:
    """A token given as an id ("151667") or as its text ("<think>")."""
    tid = int(spec) if spec.isdigit() else tokenizer.convert_tokens_to_ids(spec)
    if tid is None or not 0 <= tid < vocab_size or (not spec.isdigit() and tid == tokenizer.unk_token_id):
        raise SystemExit(f"thinking-span token {spec!r} is not a single token of this model's vocabulary")
    return tid


def acceptance_defaults(config: TargetConfig, tokenizer, vocab_size: int) -> AcceptanceDefaults:
    span = None
    if config.think_begin_token:
        begin = token_id(tokenizer, config.think_begin_token, vocab_size)
        span = ThinkingSpan(begin, token_id(tokenizer, config.think_end_token, vocab_size))
    return AcceptanceDefaults(span, RelaxedRule(config.relaxed_top_k, config.relaxed_delta), config.force_accept)


def make_policy(config: TargetConfig, runner: ModelRunner) -> DraftPolicy:
    """With a drafter: calibrate the target's step cost on empty slots before serving (requests may ask
    for ``auto`` on a ``fixed`` server too)."""
    if config.drafter == "none":
        return DraftPolicy(auto=False)
    t0 = time.monotonic()
    cost = calibrate_step_cost(runner, config.max_slots, config.num_draft_tokens + 1)
    log.info(
        "draft length %s: step cost %.1f ms + %.2f ms/seq + %.2f ms/token + %.2f ms/verifying seq"
        " + %.3f us/attention pair; attention split per sequence + %.2f ms/seq + %.2f us/cached token"
        " + %.2f ms/verifying seq (calibrated in %.1fs)",
        config.draft_length, cost.base * 1e3, cost.per_seq * 1e3, cost.per_token * 1e3, cost.per_verifying * 1e3,
        cost.per_pair * 1e6, cost.per_split_seq * 1e3, cost.per_split_kv * 1e6, cost.per_split_verifying * 1e3,
        time.monotonic() - t0,
    )  # fmt: skip
    return DraftPolicy(auto=config.draft_length == "auto", step_cost=cost, margin=config.draft_margin,
                       margin_per_seq=config.draft_margin_per_seq,
                       common=config.draft_choice == "common")  # fmt: skip


def make_drafter(config: TargetConfig, runner: ModelRunner, policy: DraftPolicy | None = None):
    if config.drafter == "none":
        return None
    from target_service.grpc_drafter import GrpcDrafter, GrpcDrafterConfig

    text_config = runner.model.config
    return GrpcDrafter(
        GrpcDrafterConfig(
            address=config.draft_address,
            num_draft_tokens=config.num_draft_tokens,
            mode=config.draft_mode,
            transport=config.draft_transport,
            deadline_s=config.draft_deadline_ms / 1000,
            auth_token=config.draft_auth_token,
        ),
        vocab_size=runner.vocab_size,
        hidden_size=text_config.hidden_size,
        dtype=runner.dtype,
        max_slots=config.max_slots,
        max_seq_len=config.max_seq_len,
        rows_per_step=config.max_batch_tokens,
        device=runner.device,
        on_prior=policy.use_prior if policy is not None else None,
    )


def warm_up(engine: Engine) -> None:
    """One short generation so the first user request does not pay for lazy initialisation."""
    events = engine.submit(EngineRequest("warmup", (0, 1, 2, 3), SamplingParams(max_tokens=2, ignore_eos=True)))
    while not isinstance(events.get(timeout=120), FinishEvent):
        pass


def serve(config: TargetConfig) -> None:
    use_huge_pages()  # before the first tensor: weights, caches and buffers in 2 MB pages
    fix_malloc_thresholds()  # step buffers stay in the heap; big refused requests do not pile up
    if config.torch_threads > 0:
        torch.set_num_threads(config.torch_threads)
    t0 = time.monotonic()
    engine, frontend, info = build_engine(config)
    servicer = TargetServicer(engine, frontend, info)
    engine.on_draft = servicer.metrics.draft_round_trip.observe
    serve_metrics(servicer.metrics.registry, config.host, config.metrics_port)
    server = build_server(servicer, config.host, config.port, config.max_message_bytes, frontend.max_request_bytes)
    engine.start()
    server.start()
    log.info("listening on %s:%d (NOT_SERVING until warm-up)", config.host, server.port)
    warm_up(engine)
    if config.gc_freeze:
        log.info("%d start-up objects frozen out of the garbage collector's walks", freeze_startup_objects())
    server.set_serving(True)
    kv_mib = engine.runner.cache.shape.bytes(engine.runner.dtype) / 2**20
    log.info("KV cache: %d slots x %d tokens = %.0f MiB", config.max_slots, config.max_seq_len, kv_mib)
    log.info(
        "ready in %.1fs: model=%s dtype=%s slots=%d", time.monotonic() - t0, info.model, config.dtype, config.max_slots
    )

    wait_for_signal()
    log.info("shutting down (grace %.1fs)", config.grace_seconds)
    server.stop(config.grace_seconds)
    engine.shutdown()
    engine.drafter.close()
    if engine.baton is not None:
        engine.baton.close()
    if engine.trace is not None:
        engine.trace.close()


def main(argv: list[str] | None = None) -> None:
    config = parse_config(argv)
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serve(config)
    except (ModelNotFoundError, UnsupportedModelError) as err:
        raise SystemExit(f"tandem-target: {err}") from None


if __name__ == "__main__":
    main()
