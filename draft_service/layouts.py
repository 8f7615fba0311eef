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


@dataclass(frozen=True)
class Layout:
    """Where one family keeps module ``i``: prefixes are templates with ``{i}`` (counted from ``after_target``)."""

    name: str
    module: str  # prefix of module i's own tensors (no "{i}": one module only)
    block: str  # prefix of module i's decoder layer
    parts: dict[str, str]  # our part -> their tensor name under ``module`` (without ".weight")
    shared: tuple[str, ...] = ()  # their names under ``module`` for copies of the target's tensors (dropped)
    after_target: bool = False  # module indices continue after the target's decoder layers
    hidden_first: bool = False  # concatenation order of eh_proj's input is [hidden; embedding]

    def to_own(self, key: str, num_target_layers: int) -> str | None:
        """Our key for a checkpoint key; "" for a shared copy to drop; None if not an MTP tensor."""
        base = num_target_layers if self.after_target else 0
        if self.block != self.module:
            found = _match(self.block, key, base)
            if found is not None:
                return f"{found[0]}.block.{found[1]}"
        found = _match(self.module, key, base)
        if found is None:
            return None
        i, rest = found
        if rest in self.shared:
            return ""
        for own, theirs in self.parts.items():
            if rest == f"{theirs}.weight":
                return f"{i}.{own}.weight"
        return f"{i}.block.{rest}" if self.block == self.module else None

    def from_own(self, key: str, num_target_layers: int) -> str:
        """The checkpoint key of one of our keys (used to write test checkpoints)."""
        i, rest = key.split(".", 1)
        index = int(i) + (num_target_layers if self.after_target else 0)
        if rest.startswith("block."):
            return self.block.format(i=index) + rest[len("block.") :]
        return self.module.format(i=index) + self.parts[rest.split(".")[0]] + ".weight"


def _match(template: str, key: str, base: int) -> tuple[int, str] | None:
    """(module index, rest of the key) if ``key`` lies under ``template``; None otherwise."""
    head, indexed, tail = template.partition("{i}")
    if not key.startswith(head):
        return None
    if not indexed:
        return 0, key[len(head) :]
    m = re.match(r"(\d+)" + re.escape(tail), key[len(head) :])
    if m is None or int(m.group(1)) < base:
        return None
    return int(m.group(1)) - base, key[len(head) + m.end() :]


_LAYOUTS = (
    Layout(
        "mimo",
        module="model.mtp_layers.{i}.",
        block="model.mtp_layers.{i}.",
        parts={
            "enorm": "token_layernorm",
            "hnorm": "hidden_layernorm",
            "eh_proj": "input_proj",
            "final_norm": "final_layernorm",
        },
        hidden_first=True,
    ),
    Layout(
        "qwen3_next",
        module="mtp.",
        block="mtp.layers.{i}.",
        parts={"enorm": "pre_fc_norm_embedding", "hnorm": "pre_fc_norm_hidden", "eh_proj": "fc", "final_norm": "norm"},
    ),
    Layout(
        "deepseek",
        module="model.layers.{i}.",
        block="model.layers.{i}.",
        parts={"enorm": "enorm", "hnorm": "hnorm", "eh_proj": "eh_proj", "final_norm": "shared_head.norm"},
        shared=("embed_tokens.weight", "shared_head.head.weight"),
        after_target=True,
    ),
)
LAYOUTS = tuple(layout.name for layout in _LAYOUTS)
_BY_NAME = {layout.name: layout for layout in _LAYOUTS}


def get_layout(name: str) -> Layout:
    if name not in _BY_NAME:
        raise ValueError(f"unknown MTP layout {name!r}; one of {LAYOUTS}")
    return _BY_NAME[name]


def detect_layout(keys: set[str], num_target_layers: int) -> str | None:
    """The first layout (in table order) that finds one of a module's own tensors (not its block) in ``keys``."""
    for layout in _LAYOUTS:
        if any(".block." not in (layout.to_own(k, num_target_layers) or ".block.") for k in keys):
            return layout.name
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


_EXPERT = re.compile(r"(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def fuse_experts(state: dict[str, torch.Tensor], wanted: set[str]) -> dict[str, torch.Tensor]:
    """Per-expert tensors as checkpoints store them, stacked the way transformers holds MoE experts in memory.

    ``{p}.experts.{e}.gate_proj/up_proj/down_proj.weight`` become ``{p}.experts.gate_up_proj`` [E, 2I, H]
    (gate rows, then up rows) and ``{p}.experts.down_proj`` [E, H, I], when ``wanted`` (the module's own
    keys) has those fused names; otherwise ``state`` is returned as it is.
    """
    groups: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    rest = {}
    for key, value in state.items():
        m = _EXPERT.match(key)
        if m is None or f"{m.group(1)}.down_proj" not in wanted:
            rest[key] = value
            continue
        groups.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = value
    for prefix, experts in groups.items():
        order = [experts[e] for e in sorted(experts)]
        rest[f"{prefix}.gate_up_proj"] = torch.stack([torch.cat([x["gate_proj"], x["up_proj"]]) for x in order])
        rest[f"{prefix}.down_proj"] = torch.stack([x["down_proj"] for x in order])
    return rest


def num_modules_in(state: dict[str, torch.Tensor]) -> int:
    return 1 + max((int(k.split(".")[0]) for k in state), default=-1)
