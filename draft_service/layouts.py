"""MTP checkpoint layouts: where each published family keeps its MTP weights, mapped to ours.

Our names (``MTPHeads.layers`` state dict), module i:
    {i}.enorm.weight  {i}.hnorm.weight  {i}.eh_proj.weight  {i}.final_norm.weight  {i}.block.<decoder layer>

* deepseek (DeepSeek-V3/R1): module i at ``model.layers.{num_hidden_layers + i}.`` with enorm, hnorm,
  eh_proj, shared_head.norm; its embed_tokens and shared_head.head copy the target's (consumed, dropped).
* mimo: module i at ``model.mtp_layers.{i}.`` with token_layernorm, hidden_layernorm, input_proj,
  final_layernorm; eh_proj's input is [hidden; embedding] (reversed).
* qwen3_next: one module under ``mtp.``: pre_fc_norm_embedding, pre_fc_norm_hidden, fc, norm, and its
  block at ``mtp.layers.0.``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

LAYOUTS = ("deepseek", "mimo", "qwen3_next")
_OWN_PARTS = ("enorm", "hnorm", "eh_proj", "final_norm")


@dataclass(frozen=True)
class Layout:
    name: str
    hidden_first: bool  # concatenation order of eh_proj's input

    def to_own(self, key: str, num_target_layers: int) -> str | None:
        """Our key for a checkpoint key; "" for a shared copy to drop; None if not an MTP tensor."""
        if self.name == "deepseek":
            m = re.match(r"model\.layers\.(\d+)\.(.+)$", key)
            if not m or int(m.group(1)) < num_target_layers:
                return None
            i, rest = int(m.group(1)) - num_target_layers, m.group(2)
            if rest in ("embed_tokens.weight", "shared_head.head.weight"):
                return ""
            parts = {
                "enorm.weight": "enorm",
                "hnorm.weight": "hnorm",
                "eh_proj.weight": "eh_proj",
                "shared_head.norm.weight": "final_norm",
            }
        elif self.name == "mimo":
            m = re.match(r"model\.mtp_layers\.(\d+)\.(.+)$", key)
            if not m:
                return None
            i, rest = int(m.group(1)), m.group(2)
            parts = {
                "token_layernorm.weight": "enorm",
                "hidden_layernorm.weight": "hnorm",
                "input_proj.weight": "eh_proj",
                "final_layernorm.weight": "final_norm",
            }
        else:
            if not key.startswith("mtp."):
                return None
            rest = key[len("mtp.") :]
            m = re.match(r"layers\.(\d+)\.(.+)$", rest)
            if m:
                return f"{m.group(1)}.block.{m.group(2)}"
            parts = {
                "pre_fc_norm_embedding.weight": "enorm",
                "pre_fc_norm_hidden.weight": "hnorm",
                "fc.weight": "eh_proj",
                "norm.weight": "final_norm",
            }
            return f"0.{parts[rest]}.weight" if rest in parts else None
        if rest in parts:
            return f"{i}.{parts[rest]}.weight"
        return f"{i}.block.{rest}"

    def from_own(self, key: str, num_target_layers: int) -> str:
        """The checkpoint key of one of our keys (used to write test checkpoints)."""
        i, rest = key.split(".", 1)
        part = rest.split(".")[0]
        if self.name == "qwen3_next":
            if rest.startswith("block."):
                return f"mtp.layers.{i}.{rest[len('block.') :]}"
            names = {
                "enorm": "pre_fc_norm_embedding",
                "hnorm": "pre_fc_norm_hidden",
                "eh_proj": "fc",
                "final_norm": "norm",
            }
            return f"mtp.{names[part]}.weight"
        prefix = f"model.layers.{num_target_layers + int(i)}." if self.name == "deepseek" else f"model.mtp_layers.{i}."
        if rest.startswith("block."):
            return prefix + rest[len("block.") :]
        if self.name == "deepseek":
            names = {"enorm": "enorm", "hnorm": "hnorm", "eh_proj": "eh_proj", "final_norm": "shared_head.norm"}
        else:
            names = {
                "enorm": "token_layernorm",
                "hnorm": "hidden_layernorm",
                "eh_proj": "input_proj",
                "final_norm": "final_layernorm",
            }
        return f"{prefix}{names[part]}.weight"


def get_layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise ValueError(f"unknown MTP layout {name!r}; one of {LAYOUTS}")
    return Layout(name, hidden_first=name == "mimo")


def detect_layout(keys: set[str], num_target_layers: int) -> str | None:
    if any(k.startswith("model.mtp_layers.") for k in keys):
        return "mimo"
    if any(k.startswith("mtp.") for k in keys):
        return "qwen3_next"
    deepseek = get_layout("deepseek")
    if any(deepseek.to_own(k, num_target_layers) for k in keys if k.endswith("eh_proj.weight")):
        return "deepseek"
    return None


@dataclass(frozen=True)
class LoadReport:
    layout: str
    consumed: frozenset[str]  # checkpoint keys mapped onto the MTP modules
    dropped: frozenset[str]  # shared copies (embedding / head) that the target already provides


def read_layout(directory: Path, layout_name: str, num_target_layers: int) -> tuple[dict, LoadReport]:
    """Read only the MTP tensors of ``directory``'s safetensors files; return (our state dict, report)."""
    from safetensors import safe_open

    layout = get_layout(layout_name)
    state, consumed, dropped = {}, set(), set()
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                own = layout.to_own(key, num_target_layers)
                if own is None:
                    continue
                if own == "":
                    dropped.add(key)
                    continue
                state[own] = f.get_tensor(key)
                consumed.add(key)
    return state, LoadReport(layout_name, frozenset(consumed), frozenset(dropped))


def num_modules_in(state: dict[str, torch.Tensor]) -> int:
    return 1 + max((int(k.split(".")[0]) for k in state), default=-1)
