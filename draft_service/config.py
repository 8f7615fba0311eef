"""The draft service's configuration: one frozen dataclass, from flags and TANDEM_DRAFT_* variables."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from tandem_core.flags import add_flags, is_loopback
from tandem_core.kernels import KERNELS, WEIGHTS
from tandem_core.limits import MAX_DRAFT_TOKENS


@dataclass(frozen=True)
class DraftConfig:
    host: str = "127.0.0.1"  # internal service: loopback unless an auth token is set
    port: int = 50061
    metrics_port: int = 0  # Prometheus /metrics over HTTP on --host (0 = off)
    model: str = "default"  # the target's model: "default", a HF directory or a .gguf file
    dtype: str = "float32"
    device: str = "cpu"  # cpu | cuda | cuda:N (cuda_ipc needs the target's GPU)
    kernels: str = "auto"  # auto | eager | onednn (tandem_core/kernels.py); auto = onednn on CPU float32
    # weights of the heads' prepacked GEMMs (onednn only): auto | float32 | bfloat16; auto = bfloat16 where the
    # CPU runs it natively. Drafts only propose: the target verifies them in its own dtype either way
    head_weights: str = "auto"
    mode: str = "vanilla"  # vanilla | eagle
    num_draft_tokens: int = 3  # k, 1..4
    # "" = the heads shipped for the default model (random for other models), "random", or a directory with
    # mtp.safetensors + mtp.json (own format) or a checkpoint with published MTP layers
    mtp_checkpoint: str = ""
    draft_vocab: int = -1  # -1: the checkpoint's sub-vocabulary as saved; 0: whole vocabulary; N: its first N ids
    mtp_layout: str = "auto"  # auto | own | deepseek | mimo | qwen3_next
    seed: int = 0  # seed of random heads
    empty_mtp: bool = False  # no MTP compute at all (benchmarks the transport and protocol)
    auth_token: str = ""  # required bearer token (env TANDEM_DRAFT_AUTH_TOKEN); mandatory off loopback
    max_slots: int = 64  # most slots a target may attach with
    max_seq_len: int = 8192  # longest sequence a target may attach with
    max_message_bytes: int = 16 * 1024 * 1024
    torch_threads: int = 0
    gc_freeze: bool = True  # freeze the objects alive after start-up out of the garbage collector's walks
    log_level: str = "INFO"


def parse_draft_config(argv: list[str] | None = None, env: dict[str, str] | None = None) -> DraftConfig:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog="tandem-draft", description="Tandem MTP draft service (internal)")
    add_flags(parser, DraftConfig, env, "TANDEM_DRAFT_")
    config = DraftConfig(**vars(parser.parse_args(argv)))
    if config.mode not in ("vanilla", "eagle"):
        parser.error("--mode must be vanilla or eagle")
    if config.kernels not in KERNELS:
        parser.error(f"--kernels must be one of {', '.join(KERNELS)}")
    if config.head_weights not in WEIGHTS:
        parser.error(f"--head-weights must be one of {', '.join(WEIGHTS)}")
    if not 1 <= config.num_draft_tokens <= MAX_DRAFT_TOKENS:
        parser.error(f"--num-draft-tokens must be in 1..{MAX_DRAFT_TOKENS}")
    if not is_loopback(config.host) and not config.auth_token:
        parser.error("the draft service is internal: binding to a non-loopback address needs --auth-token")
    return config
