"""Runs the target model over one packed step and returns logits plus final hidden states."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tandem_core.families import check_target
from tandem_core.kernels import apply_kernels
from tandem_core.kv_cache import AttentionBatch, KVCache, cache_shape_for, query_group, register_attention


@dataclass(frozen=True)
class ForwardBatch:
    """All tokens of one step, packed sequence after sequence."""

    input_ids: torch.Tensor  # [num_tokens] int64
    slots: list[int]  # [num_seqs] cache slot of each sequence
    starts: list[int]  # [num_seqs] tokens already cached for each sequence
    q_lens: list[int]  # [num_seqs] new tokens of each sequence in this step
    logit_rows: torch.Tensor  # [num_logit_rows] int64, packed rows whose logits are needed


@dataclass(frozen=True)
class ForwardOutput:
    hidden_states: torch.Tensor  # [num_tokens, hidden_size], final (post-norm) hidden states
    logits: torch.Tensor  # [num_logit_rows, vocab_size] float32
    split_attention: bool = False  # attention ran one call per sequence, not one batched call


class ModelRunner:
    """Owns the model and its KV cache; ``forward`` is the only thing the engine calls."""

    def __init__(self, model: torch.nn.Module, num_slots: int, max_seq_len: int, kernels: str = "auto"):
        check_target(model.config)
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        model.config._attn_implementation = register_attention()
        self.kernels = apply_kernels(model, kernels)  # the setting that runs: "eager" or "onednn"
        self.cache = KVCache(cache_shape_for(model.config, num_slots, max_seq_len), self.dtype, self.device)
        self.lm_head = model.get_output_embeddings()
        self._group = query_group(model.config)  # the step's masks are built stacked for it, once
        self.vocab_size = self.lm_head.weight.shape[0]

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch) -> ForwardOutput:
        attn = AttentionBatch.build(batch.slots, batch.starts, batch.q_lens, self.device, self._group, self.dtype)
        out = self.model.model(
            input_ids=batch.input_ids.to(self.device).unsqueeze(0),
            position_ids=attn.positions.unsqueeze(0),
            use_cache=False,
            tandem_cache=self.cache,
            tandem_batch=attn,
        )
        hidden = out.last_hidden_state[0]  # [num_tokens, hidden_size]
        logits = self.lm_head(hidden[batch.logit_rows.to(self.device)]).float()
        return ForwardOutput(hidden_states=hidden, logits=logits, split_attention=attn.dense is None)
