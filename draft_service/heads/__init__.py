"""MTP heads shipped with Tandem, trained by self-distillation (training) on the default model.

Each directory holds ``mtp.safetensors`` (float16), ``mtp.json`` (mode, training configuration and the
trainer's own acceptance estimate) and ``draft_vocab.safetensors`` (the draft sub-vocabulary).
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_MODEL_HEADS = Path(__file__).resolve().parent / "smollm2-135m-instruct"


def shipped_heads(mode: str) -> Path:
    path = DEFAULT_MODEL_HEADS / mode
    if not (path / "mtp.json").is_file():
        raise FileNotFoundError(f"no shipped {mode} heads at {path}; pass --mtp-checkpoint DIR or random")
    return path
