"""The DeepSeek-V3 MTP module, built from the target's own decoder-layer class.

    h'  = eh_proj([RMSNorm_e(embed(t_{q+1})) ; RMSNorm_h(h_q)])      # [T, hidden]
    h'' = DecoderBlock(h', positions)                                 # one layer, own KV cache
    logits = lm_head(RMSNorm_final(h''))                              # shared with the target

``h_q`` is the target's final (post-norm) hidden state at position q, or, deeper in the draft, the
previous depth's output: ``h''`` for the project's own heads (trained that way), ``RMSNorm_final(h'')``
for imported checkpoints (``chain_normed``: how DeepSeek-V3, MiMo and Qwen3-Next MTP layers were
trained, and what TensorRT-LLM feeds on). Embedding and LM head are the target's tensors (shared, not
copied). The decoder block is built as the target would build its MTP layer (families.mtp_layer_index):
MoE for DeepSeek-V3 and GLM-4.5, full attention for Qwen3-Next.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from draft_service.sub_vocab import SubVocab
from tandem_core.families import mtp_layer_index
from tandem_core.kernels import apply_kernels, pack_weights
from tandem_core.kv_cache import AttentionBatch, KVCache, cache_shape_for, register_attention


@dataclass(frozen=True)
class MTPInput:
    """One module call over a packed batch."""

    tokens: torch.Tensor  # [num_tokens] int64, t_{q+1} for each pair
    hidden: torch.Tensor  # [num_tokens, hidden_size] h_q for each pair
    attn: AttentionBatch  # slots/positions/masks of the packed pairs


class MTPModule(nn.Module):
    """One MTP depth: norms, eh_proj, one decoder block of the target's architecture, final norm."""

    def __init__(self, config, layer_cls: type, norm_cls: type, hidden_first: bool = False):
        super().__init__()
        self.hidden_first = hidden_first  # MiMo concatenates [hidden; embedding]
        hidden, eps = config.hidden_size, getattr(config, "rms_norm_eps", 1e-6)
        self.enorm = norm_cls(hidden, eps=eps)
        self.hnorm = norm_cls(hidden, eps=eps)
        self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.block = layer_cls(config, layer_idx=mtp_layer_index(config))
        for part in self.block.modules():  # its attention reads and writes layer 0 of the module's own cache
            if hasattr(part, "layer_idx"):
                part.layer_idx = 0
        self.final_norm = norm_cls(hidden, eps=eps)

    def forward(
        self, inp: MTPInput, embed: nn.Module, rotary: nn.Module, cache: KVCache
    ) -> torch.Tensor:  # [num_tokens, hidden_size] block output (pre final norm)
        return self.run_pairs(
            inp.tokens, inp.hidden, inp.attn.positions, embed, rotary, tandem_cache=cache, tandem_batch=inp.attn
        )

    def run_pairs(
        self,
        tokens: torch.Tensor,  # [num_tokens] int64
        hidden: torch.Tensor,  # [num_tokens, hidden_size]
        positions: torch.Tensor,  # [num_tokens] int64
        embed: nn.Module,
        rotary: nn.Module,
        **attention,  # what the attention function reads: the serving cache (or training's chain context)
    ) -> torch.Tensor:  # [num_tokens, hidden_size]
        x = self._block_input(tokens, hidden, embed)
        positions = positions.unsqueeze(0)
        out = self.block(x, position_embeddings=rotary(x, position_ids=positions), position_ids=positions, **attention)
        return out[0]

    @property
    def fills_cache_alone(self) -> bool:
        """Whether the block can store keys and values without computing outputs (kernels.FastDecoderLayer)."""
        return hasattr(self.block, "write_kv")

    def fill_cache(
        self,
        inp: MTPInput,  # pairs whose outputs are not needed: only their keys and values are stored
        embed: nn.Module,
        rotary: nn.Module,
        cache: KVCache,
    ) -> None:
        x = self._block_input(inp.tokens, inp.hidden, embed)
        embeddings = rotary(x, position_ids=inp.attn.positions.unsqueeze(0))
        self.block.write_kv(x, embeddings, tandem_cache=cache, tandem_batch=inp.attn)

    def _block_input(self, tokens: torch.Tensor, hidden: torch.Tensor, embed: nn.Module) -> torch.Tensor:
        """``eh_proj([enorm(embed(t)) ; hnorm(h)])`` -> [1, num_tokens, hidden_size]."""
        parts = [self.enorm(embed(tokens)), self.hnorm(hidden)]
        x = torch.cat(parts[::-1] if self.hidden_first else parts, dim=-1)
        return self.eh_proj(x).unsqueeze(0)


class MTPHeads(nn.Module):
    """``num_modules`` MTP modules plus the target's shared embedding, LM head and rotary embedding."""

    def __init__(self, target_model: nn.Module, num_modules: int, hidden_first: bool = False):
        super().__init__()
        config = type(target_model.config)(**target_model.config.to_dict())
        config._attn_implementation = register_attention()
        base = target_model.model
        self.config = config
        self.embed = base.embed_tokens
        self.lm_head = target_model.get_output_embeddings()
        self.rotary = type(base.rotary_emb)(config=config)
        layer_cls, norm_cls = type(base.layers[0]), type(base.norm)
        self.layers = nn.ModuleList(MTPModule(config, layer_cls, norm_cls, hidden_first) for _ in range(num_modules))
        dtype = next(target_model.parameters()).dtype
        self.layers.to(dtype)
        self.rotary.to(dtype)
        self.chain_normed = False  # feed the next depth final_norm(output) (imported checkpoints) or the output
        self.sub_vocab: SubVocab | None = None
        self.sub_head: nn.Module | None = None  # weight [N, hidden_size]: the LM head rows of the sub-vocabulary
        self.kernels = "eager"
        self.weights = "float32"  # of the prepacked GEMMs (``use_kernels``)

    def use_sub_vocab(self, sub_vocab: SubVocab | None) -> None:
        """Restrict drafting to ``sub_vocab`` (None: the whole vocabulary)."""
        self.sub_vocab = sub_vocab
        self.sub_head = None
        if sub_vocab is not None:
            ids = sub_vocab.ids.to(self.lm_head.weight.device)
            rows = self.lm_head.weight.detach().index_select(0, ids)  # [N, hidden_size]
            self.sub_head = nn.Linear(rows.shape[1], rows.shape[0], bias=False, device=rows.device, dtype=rows.dtype)
            self.sub_head.weight = nn.Parameter(rows, requires_grad=False)
            self.use_kernels(self.kernels, self.weights)

    def use_kernels(self, choice: str, weights: str = "float32") -> str:
        """Run the modules and heads on ``choice`` (tandem_core.kernels), their prepacked GEMMs' weights in
        ``weights`` (``kernels.pack_weights``); return the kernel setting applied.

        Serving only: prepacked weights take no gradients, so training keeps ``eager``.
        """
        self.kernels = apply_kernels(self, choice)
        self.weights = pack_weights(self, weights) if self.kernels == "onednn" else "float32"
        return self.kernels

    def new_caches(self, count: int, num_slots: int, max_seq_len: int) -> list[KVCache]:
        """``count`` single-layer KV caches (one per draft depth that runs its own pairs)."""
        one_layer = cache_shape_for(self.config, num_slots, max_seq_len).with_layers(1)
        return [KVCache(one_layer, self.eh_dtype, self.device) for _ in range(count)]

    def module_for_depth(self, depth: int) -> int:
        """Depths beyond the modules there are reuse them in turn (TensorRT-LLM's modulo mapping)."""
        return depth % len(self.layers)

    def chain_hidden(self, module: int, output: torch.Tensor) -> torch.Tensor:  # [rows, H] -> [rows, H]
        """What the next depth receives as its hidden input from ``module``'s block output."""
        return self.layers[module].final_norm(output) if self.chain_normed else output

    @property
    def device(self) -> torch.device:
        return self.layers[0].eh_proj.weight.device

    @property
    def eh_dtype(self) -> torch.dtype:
        return self.layers[0].eh_proj.weight.dtype

    def logits(self, module: int, hidden: torch.Tensor) -> torch.Tensor:  # [rows, vocab or N]
        """Draft logits over the whole vocabulary, or over the sub-vocabulary's N ids when one is set."""
        normed = self.layers[module].final_norm(hidden)
        head = self.lm_head if self.sub_head is None else self.sub_head
        return head(normed).float()

    def to_target_ids(self, index: torch.Tensor) -> torch.Tensor:
        """Map argmax indices of ``logits`` back to target token ids."""
        if self.sub_vocab is None:
            return index
        return self.sub_vocab.ids.to(index.device)[index]

    def greedy(self, module: int, hidden: torch.Tensor) -> list[int]:  # hidden [rows, H] -> [rows] ids
        return self.to_target_ids(torch.argmax(self.logits(module, hidden), dim=-1)).tolist()
