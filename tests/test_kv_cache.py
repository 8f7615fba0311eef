"""The project's KV cache behind transformers' attention interface matches the stock model."""

from __future__ import annotations

import pytest
import torch

from target_service.model_runner import ForwardBatch, ModelRunner
from tests.helpers import clone_model, tiny_model

ATOL = 1e-5


def reference_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def forward(runner, seqs):
    """seqs: list of (slot, start, token ids); logits for every token."""
    ids = [t for _, _, toks in seqs for t in toks]
    batch = ForwardBatch(
        input_ids=torch.tensor(ids),
        slots=[s for s, _, _ in seqs],
        starts=[st for _, st, _ in seqs],
        q_lens=[len(t) for _, _, t in seqs],
        logit_rows=torch.arange(len(ids)),
    )
    return runner.forward(batch)


@pytest.mark.parametrize("kernels", ["eager", "onednn"])
@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "deepseek_v3", "glm4_moe"])
def test_packed_prefill_verify_and_rewind_match_stock_model(family, kernels):
    ref = tiny_model(family, seed_std=0.02)
    runner = ModelRunner(clone_model(ref), num_slots=3, max_seq_len=64, kernels=kernels)
    assert runner.kernels == kernels
    g = torch.Generator().manual_seed(1)
    a = torch.randint(0, 256, (14,), generator=g).tolist()
    b = torch.randint(0, 256, (9,), generator=g).tolist()
    la, lb = reference_logits(ref, a), reference_logits(ref, b)

    # varlen prefill of two sequences in one step, in slots 2 and 0
    out = forward(runner, [(2, 0, a[:10]), (0, 0, b[:6])])
    assert torch.allclose(out.logits[:10], la[:10], atol=ATOL)
    assert torch.allclose(out.logits[10:], lb[:6], atol=ATOL)
    assert out.hidden_states.shape == (16, ref.config.hidden_size)

    # a 4-token verification block beside a 1-token decode
    out = forward(runner, [(2, 10, a[10:14]), (0, 6, b[6:7])])
    assert torch.allclose(out.logits[:4], la[10:14], atol=ATOL)
    assert torch.allclose(out.logits[4], lb[6], atol=ATOL)

    # rewind sequence a to 11 tokens (3 rejected) and continue with other tokens
    c = a[:11] + [5, 6]
    out = forward(runner, [(2, 11, c[11:])])
    assert torch.allclose(out.logits, reference_logits(ref, c)[11:], atol=ATOL)

    # the other slot was not disturbed
    out = forward(runner, [(0, 7, b[7:9])])
    assert torch.allclose(out.logits, lb[7:9], atol=ATOL)


@pytest.mark.parametrize("order", [[0, 1, 2], [2, 0, 1]])
def test_sequences_of_different_block_lengths_attend_one_by_one(order):
    """Three sequences verify 1, 3 and 1 tokens (slots in order or not): every logit equals the stock model's."""
    ref = tiny_model("llama", seed_std=0.02)
    runner = ModelRunner(clone_model(ref), num_slots=3, max_seq_len=64, kernels="onednn")
    g = torch.Generator().manual_seed(2)
    texts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (9, 12, 7)]
    refs = [reference_logits(ref, t) for t in texts]
    prompt = [(slot, 0, t[:-3]) for slot, t in zip(order, texts)]
    forward(runner, prompt)
    step = [(slot, len(t) - 3, t[len(t) - 3 : len(t) - 3 + q]) for slot, t, q in zip(order, texts, (1, 3, 1))]
    out = forward(runner, step)
    expected = torch.cat([r[len(t) - 3 : len(t) - 3 + q] for r, t, q in zip(refs, texts, (1, 3, 1))])
    assert torch.allclose(out.logits, expected, atol=ATOL)


@pytest.mark.parametrize(
    ("q_lens", "slots", "dense"),
    [
        ((1, 3, 1, 2), [0, 1, 2, 3], True),  # drafts for some sequences only: one call, queries padded to 3
        ((4, 1, 1, 1), [0, 1, 2, 3], True),
        ((1, 3, 1, 2), [1, 0, 2, 3], False),  # slots out of order: one call per sequence
    ],
)
def test_sequences_verifying_different_numbers_of_drafts_share_one_call(q_lens, slots, dense):
    """Every logit equals the stock model's, the padding queries' outputs dropped, none written to the cache."""
    from tandem_core.kv_cache import AttentionBatch

    ref = tiny_model("llama", seed_std=0.02)
    runner = ModelRunner(clone_model(ref), num_slots=4, max_seq_len=64, kernels="onednn")
    g = torch.Generator().manual_seed(4)
    texts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (20, 18, 21, 19)]
    starts = [len(t) - 4 for t in texts]
    forward(runner, [(slot, 0, t[:st]) for slot, st, t in zip(slots, starts, texts)])
    batch = AttentionBatch.build(slots, starts, list(q_lens))
    assert (batch.dense is not None) == dense
    out = forward(runner, [(slot, st, t[st : st + q]) for slot, st, t, q in zip(slots, starts, texts, q_lens)])
    refs = [reference_logits(ref, t) for t in texts]
    expected = torch.cat([r[st : st + q] for r, st, q in zip(refs, starts, q_lens)])
    assert torch.allclose(out.logits, expected, atol=ATOL)
    going_on = [i for i, q in enumerate(q_lens) if q < 4]
    rest = [(slots[i], starts[i] + q_lens[i], texts[i][starts[i] + q_lens[i] :]) for i in going_on]
    after = forward(runner, rest)  # the cache holds exactly the real tokens: the rest follows on from them
    expected = torch.cat([refs[i][starts[i] + q_lens[i] :] for i in going_on])
    assert torch.allclose(after.logits, expected, atol=ATOL)


def test_a_prefill_chunk_beside_decodes_is_not_padded_into_one_call():
    from tandem_core.kv_cache import DENSE_MAX_PADDED_Q, runs_dense

    assert runs_dense([0, 1], [100, 100], [1, DENSE_MAX_PADDED_Q])
    assert not runs_dense([0, 1], [100, 100], [1, DENSE_MAX_PADDED_Q + 1])
    assert runs_dense([0, 1], [100, 100], [64, 64])  # equal chunks: no query padding


def test_queries_are_padded_only_where_that_costs_less_than_the_calls_it_saves():
    from tandem_core.kv_cache import pads_queries

    assert pads_queries([300] * 8, [2] + [1] * 7)  # one sequence verifies a draft, short contexts
    assert not pads_queries([1400] * 8, [2] + [1] * 7)  # long contexts: 7 padded queries cost more
    assert pads_queries([1000] * 8, [1, 2] * 4)  # half of them verify: 4 padded, 4 calls saved
    assert pads_queries([5000] * 8, [3] * 8)  # nothing padded


@pytest.mark.parametrize(
    ("lengths", "slots", "dense"),
    [
        ((20, 18, 19), [0, 1, 2], True),  # equal blocks, similar lengths, slots in order: one batched call
        ((900, 6, 19), [0, 1, 2], False),  # padding all to the longest would waste: one call per sequence
        ((20, 18, 19), [1, 2, 0], False),  # slots out of order: one call per sequence, no gathered copy
    ],
)
def test_batched_and_per_sequence_attention_both_match_the_stock_model(lengths, slots, dense):
    from tandem_core.kv_cache import AttentionBatch

    ref = tiny_model("llama", seed_std=0.02)
    runner = ModelRunner(clone_model(ref), num_slots=3, max_seq_len=1000, kernels="onednn")
    g = torch.Generator().manual_seed(3)
    texts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]
    forward(runner, [(slot, 0, t[:-2]) for slot, t in zip(slots, texts)])
    starts = [len(t) - 2 for t in texts]
    assert (AttentionBatch.build(slots, starts, [2] * 3).dense is not None) == dense
    out = forward(runner, [(slot, st, t[st:]) for slot, st, t in zip(slots, starts, texts)])
    expected = torch.cat([reference_logits(ref, t)[-2:] for t in texts])
    assert torch.allclose(out.logits, expected, atol=ATOL)


def test_hidden_states_are_the_final_normed_states():
    ref = tiny_model("llama")
    runner = ModelRunner(clone_model(ref), num_slots=1, max_seq_len=32)
    ids = [3, 1, 4, 1, 5]
    with torch.no_grad():
        expected = ref.model(torch.tensor([ids])).last_hidden_state[0]
    out = forward(runner, [(0, 0, ids)])
    assert torch.allclose(out.hidden_states, expected, atol=ATOL)


def test_mla_keys_and_values_are_cached_at_their_own_widths():
    runner = ModelRunner(tiny_model("deepseek_v3"), num_slots=2, max_seq_len=16)
    c = runner.model.config
    assert runner.cache.keys[0].shape == (2, c.num_attention_heads, 16, c.qk_nope_head_dim + c.qk_rope_head_dim)
    assert runner.cache.values[0].shape == (2, c.num_attention_heads, 16, c.v_head_dim)


def test_a_linear_attention_target_is_refused_with_the_reason():
    from tandem_core.families import UnsupportedModelError

    with pytest.raises(UnsupportedModelError, match="linear attention.*rewind"):
        ModelRunner(tiny_model("qwen3_next"), num_slots=1, max_seq_len=16)


def test_a_step_builds_its_masks_once_stacked_per_query_head_and_additive():
    from tandem_core.kv_cache import AttentionBatch

    step = AttentionBatch.build([0, 1], [5, 3], [2, 2], group=3, dtype=torch.float32)
    mask = step.dense.mask  # [2 sequences, 1, 3 query heads x 2 queries, 7 keys]
    assert mask.shape == (2, 1, 6, 7) and mask.dtype == torch.float32
    plain = AttentionBatch.build([0, 1], [5, 3], [2, 2]).dense.mask  # [2, 1, 2, 7] bool, one query head
    assert torch.equal(mask, torch.zeros(2, 1, 6, 7).masked_fill(~plain.repeat(1, 1, 3, 1), float("-inf")))
    assert torch.equal(mask[1, 0, 1] == 0, torch.arange(7) <= 4)  # sequence 1's second query: keys 0..4
    assert AttentionBatch.build([0, 1], [4, 4], [1, 1], group=3, dtype=torch.float32).dense.mask is None  # all seen
    split = AttentionBatch.build([1, 0], [5, 3], [2, 1], group=3, dtype=torch.float32)
    assert split.dense is None and split.spans[0].mask.shape == (1, 1, 6, 7) and split.spans[1].mask is None
