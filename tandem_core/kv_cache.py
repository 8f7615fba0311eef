"""The project's own KV cache, plugged in behind transformers' attention interface.

Layout: per layer one key tensor ``[num_slots, num_kv_heads, max_seq_len, key_dim]`` and one value
tensor ``[num_slots, num_kv_heads, max_seq_len, value_dim]`` (the widths differ for DeepSeek-V3's MLA,
whose keys and values are cached decompressed, one per head).
A sequence owns one slot; its valid length lives in the scheduler, so rewinding rejected draft
positions is just a shorter length (stale rows are masked out and later overwritten).

One decode step runs every scheduled sequence packed into a single row of tokens (varlen). The
attention function below writes the step's keys/values at (slot, position) and attends each
sequence's queries to its own cached prefix with a causal mask built once per step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from tandem_core.families import text_config

ATTENTION_NAME = "tandem_paged"


@dataclass(frozen=True)
class KVCacheShape:
    num_layers: int
    num_slots: int
    num_kv_heads: int
    max_seq_len: int
    key_dim: int  # width of one head's key
    value_dim: int  # width of one head's value

    def bytes(self, dtype: torch.dtype) -> int:
        per = self.num_slots * self.num_kv_heads * self.max_seq_len * (self.key_dim + self.value_dim)
        return self.num_layers * per * torch.empty((), dtype=dtype).element_size()

    def with_layers(self, num_layers: int) -> KVCacheShape:
        return replace(self, num_layers=num_layers)


def cache_shape_for(config, num_slots: int, max_seq_len: int) -> KVCacheShape:
    """KV geometry of a transformers decoder config (MLA: decompressed keys and values, one per query head)."""
    text = text_config(config)
    if getattr(text, "kv_lora_rank", None):  # DeepSeek-V2/V3 multi-head latent attention
        key_dim, value_dim = text.qk_nope_head_dim + text.qk_rope_head_dim, text.v_head_dim
        kv_heads = text.num_attention_heads
    else:
        key_dim = value_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    return KVCacheShape(text.num_hidden_layers, num_slots, kv_heads, max_seq_len, key_dim, value_dim)


class KVCache:
    """Preallocated K/V storage for ``num_slots`` sequences of up to ``max_seq_len`` tokens."""

    def __init__(self, shape: KVCacheShape, dtype: torch.dtype, device: torch.device | str = "cpu"):
        self.shape = shape
        rows = (shape.num_slots, shape.num_kv_heads, shape.max_seq_len)
        layers = range(shape.num_layers)
        self.keys = [torch.zeros((*rows, shape.key_dim), dtype=dtype, device=device) for _ in layers]
        self.values = [torch.zeros((*rows, shape.value_dim), dtype=dtype, device=device) for _ in layers]


@dataclass(frozen=True)
class AttentionBatch:
    """Where one step's packed tokens live in the cache and what each query may see."""

    token_slots: torch.Tensor  # [num_tokens] int64, cache slot of each packed token
    positions: torch.Tensor  # [num_tokens] int64, position of each packed token in its sequence
    slots: torch.Tensor  # [num_seqs] int64
    pad_index: torch.Tensor  # [num_seqs, max_q] int64, packed token index of each padded query
    valid: torch.Tensor  # [num_seqs, max_q] bool, False for padding
    mask: torch.Tensor | None  # [num_seqs, 1, max_q, max_kv] bool, None when every q_len is 1 and B=1
    max_kv: int  # keys attended per sequence (longest kv length in the step)
    uniform_q: int  # the common q_len when every sequence has the same one (no padding), else 0
    slot_range: tuple[int, int] | None  # (lo, hi) when slots == lo..hi-1 in order: K/V are a view, not a copy
    single: tuple[int, int] | None = None  # (slot, first new position) when the step has one sequence

    @staticmethod
    def build(slots: list[int], starts: list[int], q_lens: list[int], device="cpu") -> AttentionBatch:
        """``starts[i]``: cached length of sequence i before this step; ``q_lens[i]``: its new tokens."""
        num_seqs, max_q = len(slots), max(q_lens)
        q_pos = torch.empty((num_seqs, max_q), dtype=torch.long)
        pad_index = torch.empty((num_seqs, max_q), dtype=torch.long)
        valid = torch.zeros((num_seqs, max_q), dtype=torch.bool)
        offset = 0
        for i, (start, q_len) in enumerate(zip(starts, q_lens, strict=False)):
            steps = torch.arange(max_q).clamp(max=q_len - 1)
            q_pos[i] = start + steps
            pad_index[i] = offset + steps
            valid[i, :q_len] = True
            offset += q_len
        max_kv = max(s + q for s, q in zip(starts, q_lens, strict=False))
        mask = None
        if num_seqs > 1 or max_q > 1:
            mask = (torch.arange(max_kv)[None, None, :] <= q_pos[:, :, None]).unsqueeze(1)
            mask = mask.to(device)
        token_slots = torch.repeat_interleave(torch.tensor(slots), torch.tensor(q_lens))
        return AttentionBatch(
            token_slots=token_slots.to(device),
            positions=q_pos[valid].to(device),
            slots=torch.tensor(slots, dtype=torch.long, device=device),
            pad_index=pad_index.to(device),
            valid=valid.to(device),
            mask=mask,
            max_kv=max_kv,
            uniform_q=max_q if all(q == max_q for q in q_lens) else 0,
            slot_range=(slots[0], slots[0] + num_seqs) if slots == list(range(slots[0], slots[0] + num_seqs)) else None,
            single=(slots[0], starts[0]) if num_seqs == 1 else None,
        )


def paged_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [1, num_heads, num_tokens, key_dim]
    key: torch.Tensor,  # [1, num_kv_heads, num_tokens, key_dim]
    value: torch.Tensor,  # [1, num_kv_heads, num_tokens, value_dim]
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:  # ([1, num_tokens, num_heads, value_dim], None)
    cache: KVCache = kwargs["tandem_cache"]
    batch: AttentionBatch = kwargs["tandem_batch"]
    write_kv(cache, module.layer_idx, key, value, batch)
    k_store, v_store = cache.keys[module.layer_idx], cache.values[module.layer_idx]

    num_seqs, num_tokens = batch.slots.shape[0], query.shape[2]
    if batch.uniform_q:  # no padding: a reshape, not a gather
        q = query[0].unflatten(1, (num_seqs, batch.uniform_q)).transpose(0, 1)
    else:
        q = query[0][:, batch.pad_index].transpose(0, 1)  # [num_seqs, num_heads, max_q, key_dim]
    if batch.slot_range is not None:  # consecutive slots in order: attend to a view of them
        lo, hi = batch.slot_range
        k = k_store[lo:hi, :, : batch.max_kv]  # [num_seqs, kv_heads, max_kv, key_dim]
        v = v_store[lo:hi, :, : batch.max_kv]
    else:
        k = k_store[:, :, : batch.max_kv].index_select(0, batch.slots)  # [num_seqs, kv_heads, max_kv, key_dim]
        v = v_store[:, :, : batch.max_kv].index_select(0, batch.slots)
    gqa = q.shape[1] != k.shape[1]
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=batch.mask, scale=scaling, enable_gqa=gqa
    )  # [num_seqs, num_heads, max_q, value_dim]
    out = out.transpose(1, 2)  # [num_seqs, max_q, num_heads, value_dim]
    packed = out.reshape(num_tokens, *out.shape[2:]) if batch.uniform_q else out[batch.valid]
    return packed.unsqueeze(0), None  # [1, num_tokens, num_heads, value_dim]


def write_kv(
    cache: KVCache,
    layer: int,
    key: torch.Tensor,  # [1, num_kv_heads, num_tokens, key_dim]
    value: torch.Tensor,  # [1, num_kv_heads, num_tokens, value_dim]
    batch: AttentionBatch,
) -> None:
    """Store one layer's keys and values of the step's tokens at their slots and positions."""
    _write(cache.keys[layer], key, batch)
    _write(cache.values[layer], value, batch)


def _write(store: torch.Tensor, new: torch.Tensor, batch: AttentionBatch) -> None:
    """Write the step's keys or values (``new``: [1, kv_heads, num_tokens, dim]) at their slots and positions."""
    if batch.single is not None:  # one sequence: a contiguous range of positions, a plain copy
        slot, start = batch.single
        store[slot, :, start : start + new.shape[2]].copy_(new[0])
    else:
        store[batch.token_slots, :, batch.positions] = new[0].transpose(0, 1)


def _no_mask(*args, **kwargs):
    """The attention function builds its own per-sequence masks; transformers builds none."""
    return None


def register_attention() -> str:
    """Register the cache-backed attention with transformers (idempotent); return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, paged_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, _no_mask)
    return ATTENTION_NAME
