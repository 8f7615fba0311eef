"""Process entry point of the draft service."""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path

import torch

from draft_service.checkpoint import build_heads, load_target_pieces
from draft_service.config import DraftConfig, parse_draft_config
from draft_service.mtp_worker import MTPMode
from draft_service.server import DraftServicer, build_draft_server
from target_service.model_loader import DEFAULT_MODEL, DTYPES, default_gguf_path, ensure_converted

log = logging.getLogger("tandem.draft")


def model_directory(spec: str) -> Path:
    if spec == DEFAULT_MODEL:
        return ensure_converted(default_gguf_path())
    if spec.endswith(".gguf"):
        return ensure_converted(Path(spec))
    return Path(spec)


def serve(config: DraftConfig) -> None:
    if config.torch_threads > 0:
        torch.set_num_threads(config.torch_threads)
    mode = MTPMode(config.mode)
    directory = model_directory(config.model)
    target = load_target_pieces(directory, DTYPES[config.dtype]).to(config.device)
    num_modules = config.num_draft_tokens if mode is MTPMode.VANILLA else 1
    checkpoint = Path(config.mtp_checkpoint) if config.mtp_checkpoint else None
    target_layers = json.loads((directory / "config.json").read_text()).get("num_hidden_layers", 0)
    heads, report = build_heads(target, num_modules, checkpoint, config.seed, target_layers, config.mtp_layout)
    heads.to(config.device)
    if report is not None:
        log.info(
            "MTP weights: %s layout, %d tensors consumed, %d shared copies dropped",
            report.layout,
            len(report.consumed),
            len(report.dropped),
        )
    servicer = DraftServicer(
        heads, mode, config.num_draft_tokens, config.max_slots, config.max_seq_len, empty_mtp=config.empty_mtp
    )
    server, port = build_draft_server(servicer, config.host, config.port, config.max_message_bytes, config.auth_token)
    server.start()
    log.info(
        "draft service on %s:%d: %s mode, k=%d, heads=%s",
        config.host,
        port,
        mode.value,
        config.num_draft_tokens,
        checkpoint or f"random(seed={config.seed})",
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(2).wait()


def main(argv: list[str] | None = None) -> None:
    config = parse_draft_config(argv)
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(config)


if __name__ == "__main__":
    main()
