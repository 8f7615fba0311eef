"""Process entry point of the draft service."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from draft_service.checkpoint import build_heads, load_target_pieces, validation_prior
from draft_service.config import DraftConfig, parse_draft_config
from draft_service.heads import shipped_heads
from draft_service.mtp_worker import MTPMode
from draft_service.server import DraftServicer, build_draft_server
from draft_service.sub_vocab import VOCAB_FILE, SubVocab
from tandem_core.draft_link import write_local_token
from tandem_core.gc_pauses import freeze_startup_objects
from tandem_core.grpc_server import free_port, wait_for_signal
from tandem_core.memory import fix_malloc_thresholds, use_huge_pages
from tandem_core.metrics_http import serve_metrics
from tandem_core.model_loader import DEFAULT_MODEL, DTYPES, default_gguf_path, ensure_converted

log = logging.getLogger("tandem.draft")


def model_directory(spec: str) -> Path:
    if spec == DEFAULT_MODEL:
        return ensure_converted(default_gguf_path())
    if spec.endswith(".gguf"):
        return ensure_converted(Path(spec))
    return Path(spec)


def resolve_checkpoint(config: DraftConfig) -> Path | None:
    """``--mtp-checkpoint``: "" = the shipped heads of the default model, "random" = none."""
    if config.mtp_checkpoint == "random":
        return None
    if config.mtp_checkpoint:
        return Path(config.mtp_checkpoint)
    if config.model == DEFAULT_MODEL:
        return shipped_heads(config.mode)
    log.warning("no --mtp-checkpoint for %s: MTP heads are random, drafts will be rejected", config.model)
    return None


def pick_sub_vocab(checkpoint: Path | None, size: int) -> SubVocab | None:
    if size == 0:
        return None
    saved = SubVocab.load(checkpoint) if checkpoint is not None else None
    if saved is None:
        if size > 0:
            raise SystemExit(f"--draft-vocab {size}: {checkpoint or 'random heads'} has no {VOCAB_FILE}")
        return None
    return saved.truncate(size)


def serve(config: DraftConfig) -> None:
    use_huge_pages()  # before the first tensor: weights, caches and buffers in 2 MB pages
    fix_malloc_thresholds()  # step buffers stay in the heap; big messages do not pile up
    if config.torch_threads > 0:
        torch.set_num_threads(config.torch_threads)
    mode = MTPMode(config.mode)
    directory = model_directory(config.model)
    target = load_target_pieces(directory, DTYPES[config.dtype]).to(config.device)
    num_modules = config.num_draft_tokens if mode is MTPMode.VANILLA else 1
    checkpoint = resolve_checkpoint(config)
    target_layers = json.loads((directory / "config.json").read_text()).get("num_hidden_layers", 0)
    heads, report = build_heads(target, num_modules, checkpoint, config.seed, target_layers, config.mtp_layout)
    heads.use_sub_vocab(pick_sub_vocab(checkpoint, config.draft_vocab))
    heads.to(config.device)
    heads.use_kernels(config.kernels, config.head_weights)
    if report is not None:
        log.info(
            "MTP weights: %s layout, %d tensors consumed, %d shared copies dropped",
            report.layout,
            len(report.consumed),
            len(report.dropped),
        )
    prior = validation_prior(checkpoint, mode.value)
    servicer = DraftServicer(
        heads, mode, config.num_draft_tokens, config.max_slots, config.max_seq_len, config.empty_mtp, prior
    )
    serve_metrics(servicer.metrics.registry, config.host, config.metrics_port)
    token, token_file = config.auth_token, None
    if not token:  # no token given: a per-start secret, handed to local targets through an owner-only file
        port = config.port or free_port(config.host)
        token, token_file = write_local_token(port)
    else:
        port = config.port
    server = build_draft_server(servicer, config.host, port, config.max_message_bytes, token)
    if config.gc_freeze:
        log.info("%d start-up objects frozen out of the garbage collector's walks", freeze_startup_objects())
    server.start()
    if token_file is not None:
        log.info("auth token for local targets in %s", token_file)
    log.info(
        "draft service on %s:%d: %s mode, k=%d, heads=%s, draft vocabulary=%s, kernels=%s (weights %s)",
        config.host,
        server.port,
        mode.value,
        config.num_draft_tokens,
        checkpoint or f"random(seed={config.seed})",
        len(heads.sub_vocab.ids) if heads.sub_vocab is not None else "whole",
        heads.kernels,
        heads.weights,
    )
    wait_for_signal()
    server.stop(2)
    if token_file is not None:
        token_file.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    config = parse_draft_config(argv)
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(config)


if __name__ == "__main__":
    main()
