"""Loading what the drafter needs: the target's embedding and LM head, and the MTP modules.

Only those tensors are read from the target checkpoint (safetensors, sharded or not): the drafter
builds a one-layer skeleton of the target's architecture for its classes and rotary embedding and
fills in ``embed_tokens`` (and ``lm_head`` when it is not tied).

MTP weights come from the project's own format: ``mtp.safetensors`` with the keys of
``MTPHeads.layers`` and ``mtp.json`` ({"mode", "num_modules", "vocab_size", "hidden_size"}), or are
initialised at random from a seed (acceptance is then near zero; useful for plumbing and cost).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from draft_service.mtp_module import MTPHeads

MTP_WEIGHTS = "mtp.safetensors"
MTP_CONFIG = "mtp.json"


def _safetensor_files(directory: Path) -> list[Path]:
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors files in {directory}")
    return files


def load_target_pieces(directory: Path, dtype: torch.dtype) -> torch.nn.Module:
    """A one-layer skeleton of the target with its real embedding and LM head, nothing else loaded."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(directory), local_files_only=True)
    config.num_hidden_layers = 1
    skeleton = AutoModelForCausalLM.from_config(config).to(dtype).eval()
    wanted = {"model.embed_tokens.weight": skeleton.model.embed_tokens.weight}
    if not getattr(config, "tie_word_embeddings", False):
        wanted["lm_head.weight"] = skeleton.get_output_embeddings().weight
    found = set()
    for path in _safetensor_files(directory):
        with safe_open(str(path), framework="pt") as f:
            for key in wanted.keys() & set(f.keys()):
                with torch.no_grad():
                    wanted[key].copy_(f.get_tensor(key).to(dtype))
                found.add(key)
    missing = wanted.keys() - found
    if missing:
        raise KeyError(f"{directory} lacks {sorted(missing)}")
    if getattr(config, "tie_word_embeddings", False):
        skeleton.tie_weights()
    return skeleton


def build_heads(target: torch.nn.Module, num_modules: int, checkpoint: Path | None, seed: int) -> MTPHeads:
    torch.manual_seed(seed)
    heads = MTPHeads(target, num_modules)
    if checkpoint is not None:
        load_mtp_checkpoint(heads, checkpoint)
    return heads.eval()


def save_mtp_checkpoint(heads: MTPHeads, directory: Path, mode: str) -> None:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in heads.layers.state_dict().items()}
    save_file(state, str(directory / MTP_WEIGHTS))
    meta = {
        "mode": mode,
        "num_modules": len(heads.layers),
        "vocab_size": heads.config.vocab_size,
        "hidden_size": heads.config.hidden_size,
    }
    (directory / MTP_CONFIG).write_text(json.dumps(meta, indent=2))


def load_mtp_checkpoint(heads: MTPHeads, directory: Path) -> None:
    """Load the project's format; every tensor must be consumed and none missing."""
    from safetensors.torch import load_file

    state = load_file(str(directory / MTP_WEIGHTS))
    own = heads.layers.state_dict()
    state = {k: v for k, v in state.items() if int(k.split(".")[0]) < len(heads.layers)}
    missing, unexpected = own.keys() - state.keys(), state.keys() - own.keys()
    if missing or unexpected:
        raise KeyError(f"MTP checkpoint mismatch: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    heads.layers.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})
