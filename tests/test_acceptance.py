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
