"""The project's own KV cache, plugged in behind transformers' attention interface.

Layout: per layer one key tensor ``[num_slots, num_kv_heads, max_seq_len, key_dim]`` and one value
tensor ``[num_slots, num_kv_heads, max_seq_len, value_dim]`` (the widths differ for DeepSeek-V3's MLA,
whose keys and values are cached decompressed, one per head).
A sequence owns one slot; its valid length lives in the scheduler, so rewinding rejected draft
positions is just a shorter length (stale rows are masked out and later overwritten).

One decode step runs every scheduled sequence packed into a single row of tokens (varlen). The
attention function below writes the step's keys/values at (slot, position) and attends each
sequence's queries to its own cached prefix, with causal masks built once per step.
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


def query_group(config) -> int:
    """Query heads per key head of a decoder config (1 for MLA, where every head has its own keys)."""
    text = text_config(config)
    return text.num_attention_heads // cache_shape_for(config, 1, 1).num_kv_heads


class KVCache:
    """Preallocated K/V storage for ``num_slots`` sequences of up to ``max_seq_len`` tokens."""

    def __init__(self, shape: KVCacheShape, dtype: torch.dtype, device: torch.device | str = "cpu"):
        self.shape = shape
        rows = (shape.num_slots, shape.num_kv_heads, shape.max_seq_len)
        layers = range(shape.num_layers)
        self.keys = [torch.zeros((*rows, shape.key_dim), dtype=dtype, device=device) for _ in layers]
        self.values = [torch.zeros((*rows, shape.value_dim), dtype=dtype, device=device) for _ in layers]


# One batched call while padding every sequence's keys to the longest adds at most this many keys per
# sequence on average, or at most this share of the keys; beyond both, one call per sequence. A call
# per sequence and layer costs a fixed overhead, which short contexts cannot earn back, and long ones
# keep the batched call ahead even when a share is padding. Default model, 8 sequences (`python -m
# bench.dense_split`, docs/benchmarks.md): one call won by 9% with 140 padded keys a sequence (contexts
# 300-580) and by 3-4% with 400 (600-1,400, 1.40x the keys), and lost by 7% with 440 (20-900, 1.96x,
# 2 new tokens).
DENSE_PADDED_KEYS_PER_SEQ = 350
DENSE_WASTE = 1.5


@dataclass(frozen=True)
class SeqSpan:
    """One sequence of the step: where its queries sit in the packed row and its keys in the cache."""

    slot: int
    start: int  # cached length before this step
    q_len: int  # new tokens this step
    row: int  # first packed row of its queries
    mask: torch.Tensor | None  # [1, 1, group * q_len, start + q_len] causal mask (_MaskForm); None for one new token


@dataclass(frozen=True)
class DenseStep:
    """The whole step as one attention call: slots lo..hi-1 in order, similar lengths.

    Sequences with fewer new tokens than the step's longest (``q_len``) are padded to it: their
    queries are gathered into ``[n, q_len]`` rows (a padding row repeats the sequence's last query and
    sees what it sees) and only the real rows are taken back. Without this a step where the draft
    policy gave drafts to some sequences only ran one call per sequence and layer: 8 sequences at 300
    cached tokens cost 53.6 ms with one of them verifying a draft against 45.1 ms with none
    (`docs/benchmarks.md`)."""

    slot_range: tuple[int, int]  # (lo, hi): the keys and values are a view of these slots, no copy
    q_len: int  # the most new tokens of any sequence
    max_kv: int  # keys attended per sequence (the longest sequence's)
    mask: torch.Tensor | None  # [n, 1, group * q_len, max_kv] (_MaskForm); None where every query sees every key
    gather: torch.Tensor | None = None  # [n * q_len] packed row of each padded query; None: no padding
    take: torch.Tensor | None = None  # [num_tokens] padded row of each packed token; None: no padding


@dataclass(frozen=True)
class AttentionBatch:
    """Where one step's packed tokens live in the cache and what each query may see.

    Either one batched call over a view of consecutive slots (``dense``), when padding every sequence
    to the longest (keys, and queries where their new-token counts differ) wastes little; or one call per
    sequence over a view of its own slot, exactly as long as it is. Gathering the keys of scattered
    slots into one padded batch copied every layer's cache each step and cost more than the attention
    itself (default model, 8 sequences, scattered slots: 198 ms a step, now 91; `docs/benchmarks.md`)."""

    token_slots: torch.Tensor  # [num_tokens] int64, cache slot of each packed token
    positions: torch.Tensor  # [num_tokens] int64, position of each packed token in its sequence
    spans: tuple[SeqSpan, ...]  # [num_seqs] in packed order
    dense: DenseStep | None  # set when the step runs as one batched call
    single: tuple[int, int] | None = None  # (slot, first new position) when the step has one sequence

    @staticmethod
    def build(
        slots: list[int], starts: list[int], q_lens: list[int], device="cpu", group: int = 1, dtype=None
    ) -> AttentionBatch:
        """``starts[i]``: cached length of sequence i before this step; ``q_lens[i]``: its new tokens.

        The masks are built once for the step in the form the attention call takes them, not once per
        layer: stacked ``group`` times (query heads per key head, as ``_grouped_sdpa`` stacks the
        queries) and, with ``dtype``, additive (0 where a key is seen, -inf where not) instead of bool."""
        positions = torch.cat([torch.arange(s, s + q) for s, q in zip(starts, q_lens, strict=True)])
        token_slots = torch.repeat_interleave(torch.tensor(slots), torch.tensor(q_lens))
        form = _MaskForm(group, dtype)
        dense = _dense(slots, starts, q_lens, device, form)
        rows = torch.tensor([0, *q_lens]).cumsum(0).tolist()
        spans = tuple(
            SeqSpan(slot, start, q, row, _span_mask(dense, start, q, device, form))
            for slot, start, q, row in zip(slots, starts, q_lens, rows)
        )
        return AttentionBatch(
            token_slots=token_slots.to(device),
            positions=positions.to(device),
            spans=spans,
            dense=dense,
            single=(slots[0], starts[0]) if len(slots) == 1 else None,
        )


DENSE_MAX_PADDED_Q = 8  # sequences of different new-token counts share one call only up to this many
# Padding queries costs more than the calls it saves beyond about this many padded query-key pairs per
# sequence (default model, 8 sequences, one of them verifying a draft: at 300 cached tokens one call
# took 50.0 ms against 53.6 split; at 1,400, in a first trial that padded every step, 91.4 against
# 85.2; `docs/benchmarks.md`).
DENSE_PADDED_PAIRS_PER_SEQ = 800


def runs_dense(slots: list[int], starts: list[int], q_lens: list[int]) -> bool:
    """Whether a step's attention runs as one batched call (see ``AttentionBatch``): the slots are
    consecutive in order, padding every sequence's keys to the longest wastes little
    (``DENSE_PADDED_KEYS_PER_SEQ``, ``DENSE_WASTE``), and padding its queries too pays (``pads_queries``)."""
    n = len(slots)
    if slots != list(range(slots[0], slots[0] + n)) or not pads_queries(starts, q_lens):
        return False
    max_kv = max(s + q for s, q in zip(starts, q_lens, strict=True))
    keys = sum(starts) + sum(q_lens)
    return n * max_kv - keys <= DENSE_PADDED_KEYS_PER_SEQ * n or n * max_kv <= DENSE_WASTE * keys


def pads_queries(starts: list[int], q_lens: list[int]) -> bool:
    """Whether sequences with different numbers of new tokens (drafts verified) should share one call,
    each padded to the most: no more than ``DENSE_MAX_PADDED_Q`` new tokens (a prefill chunk beside
    decodes would pad every sequence to the chunk) and at most ``DENSE_PADDED_PAIRS_PER_SEQ`` padded
    query-key pairs per sequence. True where they all have as many."""
    top = max(q_lens)
    if all(q == top for q in q_lens):
        return True
    padded = sum((top - q) * (s + top) for s, q in zip(starts, q_lens, strict=True))
    return top <= DENSE_MAX_PADDED_Q and padded <= DENSE_PADDED_PAIRS_PER_SEQ * len(q_lens)


def _span_mask(dense: DenseStep | None, start: int, q_len: int, device, form: _MaskForm) -> torch.Tensor | None:
    """A split sequence's own causal mask (None in a batched step, or for one new token)."""
    return None if dense or q_len == 1 else form.of(_causal_mask([start], q_len, start + q_len, device))


@dataclass(frozen=True)
class _MaskForm:
    """How the attention call takes a step's masks: stacked per query head of a key head, bool or additive."""

    group: int  # query heads per key head
    dtype: torch.dtype | None  # additive masks in this dtype; None: bool

    def of(self, mask: torch.Tensor | None) -> torch.Tensor | None:
        """[n, 1, q_len, kv] bool -> [n, 1, group * q_len, kv] in this form (None: nothing to mask)."""
        if mask is None or bool(mask.all()):  # every query sees every key: no mask at all
            return None
        if self.group > 1:
            mask = mask.repeat(1, 1, self.group, 1)
        if self.dtype is None:
            return mask
        return torch.zeros(mask.shape, dtype=self.dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def _dense(slots: list[int], starts: list[int], q_lens: list[int], device, form: _MaskForm) -> DenseStep | None:
    if not runs_dense(slots, starts, q_lens):
        return None
    q_len, max_kv = max(q_lens), max(s + q for s, q in zip(starts, q_lens, strict=True))
    lo, hi = slots[0], slots[0] + len(slots)
    mask = form.of(_causal_mask(starts, q_len, max_kv, device, q_lens))
    if all(q == q_len for q in q_lens):
        return DenseStep((lo, hi), q_len, max_kv, mask)
    gather, take = _padding_rows(q_lens, q_len)
    return DenseStep((lo, hi), q_len, max_kv, mask, gather.to(device), take.to(device))


def _padding_rows(q_lens: list[int], q_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """([n * q_len] packed row of each padded query row, [num_tokens] padded row of each packed token)."""
    first = torch.tensor([0, *q_lens[:-1]]).cumsum(0)  # [n] first packed row of each sequence
    lens = torch.tensor(q_lens)
    j = torch.arange(q_len)
    gather = first[:, None] + torch.minimum(j[None, :], lens[:, None] - 1)  # [n, q_len]
    take = torch.cat([i * q_len + torch.arange(q) for i, q in enumerate(q_lens)])
    return gather.flatten(), take


def _causal_mask(
    starts: list[int], q_len: int, max_kv: int, device, q_lens: list[int] | None = None
) -> torch.Tensor | None:
    """[n, 1, q_len, max_kv] bool: query j of sequence i sees keys 0..starts[i]+j (None: one sequence, one
    token). With ``q_lens``, a padding query (j >= q_lens[i]) sees what the sequence's last one sees."""
    if len(starts) == 1 and q_len == 1:
        return None
    j = torch.arange(q_len)[None, :]
    if q_lens is not None:
        j = torch.minimum(j, torch.tensor(q_lens)[:, None] - 1)
    q_pos = torch.tensor(starts)[:, None] + j  # [n, q_len]
    return (torch.arange(max_kv)[None, None, :] <= q_pos[:, :, None]).unsqueeze(1).to(device)


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
    if batch.dense is not None:
        return _attend_dense(query[0], k_store, v_store, batch.dense, scaling).unsqueeze(0), None
    out = query.new_empty((query.shape[2], query.shape[1], v_store.shape[-1]))
    for span in batch.spans:
        out[span.row : span.row + span.q_len] = _attend_one(query[0], k_store, v_store, span, scaling)
    return out.unsqueeze(0), None


def _attend_dense(
    query: torch.Tensor,  # [num_heads, n * q_len, key_dim], sequence after sequence
    k_store: torch.Tensor,
    v_store: torch.Tensor,
    d: DenseStep,
    scaling: float | None,
) -> torch.Tensor:  # [n * q_len, num_heads, value_dim]
    if d.gather is not None:
        query = query.index_select(1, d.gather)  # [num_heads, n * q_len, key_dim], padded
    q = query.unflatten(1, (-1, d.q_len)).transpose(0, 1)  # [n, num_heads, q_len, key_dim]
    lo, hi = d.slot_range
    k, v = k_store[lo:hi, :, : d.max_kv], v_store[lo:hi, :, : d.max_kv]  # [n, kv_heads, max_kv, dim]
    out = _grouped_sdpa(q, k, v, d.mask, scaling)  # [n, num_heads, q_len, value_dim]
    out = out.transpose(1, 2).reshape(-1, out.shape[1], out.shape[-1])  # [n * q_len, num_heads, value_dim]
    return out if d.take is None else out.index_select(0, d.take)


def _attend_one(
    query: torch.Tensor,  # [num_heads, num_tokens, key_dim], the whole step
    k_store: torch.Tensor,
    v_store: torch.Tensor,
    s: SeqSpan,
    scaling: float | None,
) -> torch.Tensor:  # [q_len, num_heads, value_dim]
    q = query[None, :, s.row : s.row + s.q_len]  # [1, num_heads, q_len, key_dim]
    end = s.start + s.q_len
    k, v = k_store[s.slot : s.slot + 1, :, :end], v_store[s.slot : s.slot + 1, :, :end]  # [1, kv_heads, end, dim]
    return _grouped_sdpa(q, k, v, s.mask, scaling)[0].transpose(0, 1)


def _grouped_sdpa(
    q: torch.Tensor,  # [n, num_heads, q_len, key_dim]
    k: torch.Tensor,  # [n, kv_heads, kv_len, key_dim]
    v: torch.Tensor,  # [n, kv_heads, kv_len, value_dim]
    mask: torch.Tensor | None,  # [n or 1, 1, group * q_len, kv_len], stacked as the queries (_MaskForm)
    scaling: float | None,
) -> torch.Tensor:  # [n, num_heads, q_len, value_dim]
    """Attention with the query heads that share a key head stacked as extra query rows of that head.

    One call then reads each key head once for all its query heads and multiplies ``group * q_len``
    rows at a time. On CPU that made a 3-query verification over 1,700 cached tokens cost about half
    of ``enable_gqa`` (which runs each query head on its own: 404 vs 204 us a call, 9 query heads over
    3 key heads; `docs/benchmarks.md`)."""
    n, heads, q_len, _ = q.shape
    group = heads // k.shape[1]
    if group > 1:
        q = q.reshape(n, k.shape[1], group * q_len, q.shape[-1])  # head h = kv head h // group, row (h % group, j)
        if mask is not None and mask.shape[-2] != group * q_len:  # a mask built for one query head per key head
            mask = mask.repeat(1, 1, group, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling)
    return out.reshape(n, heads, q_len, out.shape[-1])


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
