"""Loading what the drafter needs: the target's embedding and LM head, and the MTP modules.

Only those tensors are read from the target checkpoint (safetensors, sharded or not): the drafter
builds a one-layer skeleton of the target's architecture for its classes and rotary embedding and
fills in ``embed_tokens`` (and ``lm_head`` when it is not tied).

MTP weights come from the project's own format (``mtp.safetensors`` with the keys of
``MTPHeads.layers`` and ``mtp.json``), from a published layout inside a checkpoint directory
(DeepSeek-V3/R1, MiMo, Qwen3-Next: see layouts.py), or are initialised at random from a seed
(acceptance is then near zero; useful for plumbing and cost).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from draft_service.layouts import LoadReport, detect_layout, fuse_experts, get_layout, num_modules_in, read_layout
from draft_service.mtp_module import MTPHeads
from tandem_core.families import load_config

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
    from transformers import AutoModelForCausalLM

    config = load_config(directory)
    num_layers, config.num_hidden_layers = config.num_hidden_layers, 1
    skeleton = AutoModelForCausalLM.from_config(config).to(dtype).eval()
    skeleton.config.num_hidden_layers = num_layers  # what the MTP block's layer type depends on
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


def build_heads(
    target: torch.nn.Module,
    num_modules: int,
    checkpoint: Path | None,
    seed: int,
    num_target_layers: int = 0,
    layout: str = "auto",
) -> tuple[MTPHeads, LoadReport | None]:
    """MTP heads from the project's format, a published layout (auto-detected), or random (seeded).

    A published checkpoint with fewer than ``num_modules`` MTP layers gives as many modules as it has; the
    drafter maps deeper draft depths onto them in turn.
    """
    torch.manual_seed(seed)
    if checkpoint is None:
        return MTPHeads(target, num_modules).eval(), None
    if layout in ("auto", "own") and (checkpoint / MTP_CONFIG).is_file():
        heads = MTPHeads(target, num_modules)
        load_mtp_checkpoint(heads, checkpoint)
        return heads.eval(), None
    if layout == "auto":
        layout = detect_layout(_all_keys(checkpoint), num_target_layers) or ""
        if not layout:
            raise KeyError(f"{checkpoint}: no MTP weights found (neither {MTP_CONFIG} nor a known layout)")
    state, report = read_layout(checkpoint, layout, num_target_layers)
    heads = MTPHeads(target, min(num_modules, num_modules_in(state)), hidden_first=get_layout(layout).hidden_first)
    heads.chain_normed = True  # published MTP layers were trained on the normed output of the previous depth
    _load_exact(heads, fuse_experts(state, set(heads.layers.state_dict())))
    return heads.eval(), report


def _all_keys(directory: Path) -> set[str]:
    from safetensors import safe_open

    keys: set[str] = set()
    for path in _safetensor_files(directory):
        with safe_open(str(path), framework="pt") as f:
            keys.update(f.keys())
    return keys


def save_mtp_checkpoint(
    heads: MTPHeads, directory: Path, mode: str, extra: dict | None = None, dtype: torch.dtype | None = None
) -> None:
    """Write the modules (optionally cast, e.g. float16 to halve what the repository ships) and mtp.json."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.to(dtype or v.dtype).contiguous() for k, v in heads.layers.state_dict().items()}
    save_file(state, str(directory / MTP_WEIGHTS))
    meta = {
        "mode": mode,
        "num_modules": len(heads.layers),
        "vocab_size": heads.config.vocab_size,
        "hidden_size": heads.config.hidden_size,
        **(extra or {}),
    }
    (directory / MTP_CONFIG).write_text(json.dumps(meta, indent=2))


def validation_prior(directory: Path | None, mode: str) -> tuple[float, ...]:
    """Conditional acceptance rate per draft position from the heads' own validation record in mtp.json
    (``validation.accept_prefix``: the chance the first i+1 drafts all pass); () without one, or when
    the heads were trained for the other mode."""
    path = directory / MTP_CONFIG if directory is not None else None
    if path is None or not path.is_file():
        return ()
    meta = json.loads(path.read_text())
    prefix = meta.get("validation", {}).get("accept_prefix", [])
    if meta.get("mode") != mode or not prefix:
        return ()
    rates, before = [], 1.0
    for p in prefix:
        rates.append(min(1.0, p / before) if before > 0 else 0.0)
        before = p
    return tuple(rates)


def load_mtp_checkpoint(heads: MTPHeads, directory: Path) -> None:
    """Load the project's format; every tensor must be consumed and none missing."""
    from safetensors.torch import load_file

    _load_exact(heads, load_file(str(directory / MTP_WEIGHTS)))


def _load_exact(heads: MTPHeads, state: dict[str, torch.Tensor]) -> None:
    """Every tensor of the modules in use must be present and every given tensor must be used.

    A checkpoint with more modules than used (vanilla weights in Eagle mode) keeps its extra modules unread.
    """
    own = heads.layers.state_dict()
    state = {k: v for k, v in state.items() if int(k.split(".")[0]) < len(heads.layers)}
    missing, unexpected = own.keys() - state.keys(), state.keys() - own.keys()
    if missing or unexpected:
        raise KeyError(f"MTP checkpoint mismatch: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    heads.layers.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})
