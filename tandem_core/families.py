"""The decoder families Tandem runs, and what differs between them for the engine and the MTP drafter.

A family is recognised by its config's ``model_type`` (README, "Model families", lists them with what
the tests verify for each). The engine runs any family whose decoder layers
all go through transformers' attention interface (the project's paged KV cache); the drafter builds an
MTP block as the checkpoint's MTP layer is built (MoE where that layer has experts, full attention
where the target mixes layer types).
"""

from __future__ import annotations

import json
from pathlib import Path


class UnsupportedModelError(ValueError):
    """A model the engine cannot run; the message says why."""


QWEN3_NEXT_REFUSAL = (
    "Qwen3-Next cannot run as a target: three of its four layers are gated-delta-net linear attention, whose "
    "recurrent state per sequence would need its own slot storage and an exact rewind to the last accepted token "
    "(the project's KV cache rewinds only attention keys and values). Its MTP layer can still be loaded by the "
    "draft service."
)


# model types without a transformers class of their own, and the architecture that runs them
ALIASES = {"mimo": "qwen2"}  # MiMo-7B: a Qwen2 decoder (its MTP layers are read by the draft service)


def load_config(directory: Path):
    """The transformers config of a local model directory, aliases resolved (never downloads)."""
    from transformers import AutoConfig

    raw = json.loads((directory / "config.json").read_text())
    alias = ALIASES.get(raw.get("model_type", ""))
    if alias is None:
        return AutoConfig.from_pretrained(str(directory), local_files_only=True)
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "auto_map")}
    return AutoConfig.for_model(alias, **fields)


def text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def check_target(config) -> None:
    """Raise UnsupportedModelError if the engine cannot run ``config``'s model as a target."""
    text = text_config(config)
    kinds = set(getattr(text, "layer_types", None) or ())
    if "linear_attention" in kinds or text.model_type == "qwen3_next":
        raise UnsupportedModelError(QWEN3_NEXT_REFUSAL)
    if kinds - {"full_attention"}:
        raise UnsupportedModelError(
            f"{text.model_type}: layer types {sorted(kinds)}; the engine runs full-attention layers only"
        )


def mtp_layer_index(config) -> int:
    """The decoder-layer index to build an MTP block as: the layer that follows the target's last one.

    DeepSeek-V3 and GLM-4.5 build that index as MoE (it is past ``first_k_dense_replace``); configs that list
    a type per layer (Qwen2's, Qwen3-Next's) take their first full-attention layer instead, whose MLP is the
    one their MTP layer has (Qwen3-Next: MoE on every layer).
    """
    text = text_config(config)
    kinds = getattr(text, "layer_types", None)
    if kinds:
        return kinds.index("full_attention")
    return text.num_hidden_layers
