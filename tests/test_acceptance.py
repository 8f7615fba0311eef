"""Strict greedy acceptance: forced logits and the reference's worked examples."""

from __future__ import annotations

import torch

from target_service.acceptance import accept_greedy, greedy_tokens

VOCAB = 32
A, B, C, D, E, F, G, H, N, O, P, Q, R, S, T, X, Y = range(1, 18)


def forced_logits(tokens: list[int]) -> torch.Tensor:
    """[len(tokens), VOCAB] logits whose argmax row by row is ``tokens``."""
    logits = torch.randn(len(tokens), VOCAB)
    logits[torch.arange(len(tokens)), torch.tensor(tokens)] = 100.0
    return logits


def test_greedy_tokens_follow_forced_logits():
    assert greedy_tokens(forced_logits([3, 7, 0, 31])).tolist() == [3, 7, 0, 31]


def test_reference_generation_phase_1_accepts_fgx():
    # Input E + FGH, the target samples FGXY: F and G accepted, X is the bonus -> "FGX", 3 tokens.
    target = greedy_tokens(forced_logits([F, G, X, Y])).unsqueeze(0)
    result = accept_greedy(target, torch.tensor([[F, G, H]]), torch.tensor([3]))
    assert result.num_accepted.tolist() == [3]
    assert result.accepted_tokens[0, :3].tolist() == [F, G, X]


def test_reference_generation_phase_2_accepts_py():
    # Input X + PQR, the target samples PYST: P accepted, Y the bonus.
    target = greedy_tokens(forced_logits([P, Y, S, T])).unsqueeze(0)
    result = accept_greedy(target, torch.tensor([[P, Q, R]]), torch.tensor([3]))
    assert result.num_accepted.tolist() == [2]
    assert result.accepted_tokens[0, :2].tolist() == [P, Y]


def test_accept_none_emits_only_the_target_token():
    # Input X + NOP, the target samples KMZY: nothing accepted, K emitted.
    K, M, Z = 20, 21, 22
    target = torch.tensor([[K, M, Z, Y]])
    result = accept_greedy(target, torch.tensor([[N, O, P]]), torch.tensor([3]))
    assert result.num_accepted.tolist() == [1]
    assert result.accepted_tokens[0, 0].item() == K


def test_batched_rows_are_independent_and_padding_is_ignored():
    target = torch.tensor([[A, B, C, D], [E, F, G, H], [X, Y, 0, 0], [Q, 0, 0, 0]])
    drafts = torch.tensor([[A, B, C], [E, X, G], [X, Q, Q], [Q, Q, Q]])
    num_drafts = torch.tensor([3, 3, 1, 0])  # row 2 drafted one token; row 3 none (padding equals target)
    result = accept_greedy(target, drafts, num_drafts)
    assert result.num_accepted.tolist() == [4, 2, 2, 1]


def test_a_later_match_after_a_mismatch_is_not_accepted():
    target = torch.tensor([[A, B, C, D]])
    result = accept_greedy(target, torch.tensor([[A, X, C]]), torch.tensor([3]))
    assert result.num_accepted.tolist() == [2]


def test_zero_width_drafts():
    result = accept_greedy(torch.tensor([[A], [B]]), torch.zeros((2, 0), dtype=torch.long), torch.tensor([0, 0]))
    assert result.num_accepted.tolist() == [1, 1]


def test_accept_batch_mixes_batched_greedy_rows_per_row_methods_and_silent_chunks():
    from target_service.acceptance import GreedyAcceptor, VerifyBlock, accept_batch
    from target_service.acceptance.forced import ForcedAcceptor

    # rows: seq 0 greedy [d=1,2 | target 1,3,5]; seq 1 a prefill chunk (no rows); seq 2 forced 2 of [6,6]
    # (target 4,4,7); seq 3 greedy without drafts (target 2)
    logits = forced_logits([1, 3, 5, 4, 4, 7, 2])
    blocks = [
        VerifyBlock(GreedyAcceptor(), [1, 2]),
        None,
        VerifyBlock(ForcedAcceptor(GreedyAcceptor(), 2), [6, 6]),
        VerifyBlock(GreedyAcceptor(), []),
    ]
    result = accept_batch(logits, blocks)
    assert result.num_accepted.tolist() == [2, 0, 3, 1]
    assert result.accepted_tokens[0, :2].tolist() == [1, 3]
    assert result.accepted_tokens[2, :3].tolist() == [6, 6, 7]
    assert result.accepted_tokens[3, :1].tolist() == [2]


def test_greedy_acceptor_alone_equals_the_batched_rule():
    from target_service.acceptance import GreedyAcceptor

    logits = forced_logits([1, 3, 5, 0])
    assert GreedyAcceptor().accept(logits, [1, 3, 4]) == [1, 3, 5]
    assert GreedyAcceptor().accept(logits[:1], []) == [1]
