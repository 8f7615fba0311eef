"""The drafter's bookkeeping on the reference's worked example (prompt ABCD, k=3), vanilla and Eagle.

At every step: the tokens each module saw, the positions, which hidden-state rows it used, and its
KV length. Then the exactness of the drafter's KV rewind: after accept-some and accept-none steps,
its drafts equal those of a fresh drafter fed the same accepted history in one go.
"""

from __future__ import annotations

import pytest
import torch

from draft_service.mtp_module import MTPHeads
from draft_service.mtp_worker import DraftBatch, DraftProtocolError, MTPMode, MTPWorker, Trace
from tests.helpers import tiny_model

A, B, C, D, E, F, G, X, K = 10, 11, 12, 13, 14, 15, 16, 17, 18
K_DRAFTS = 3


@pytest.fixture(scope="module")
def heads():
    torch.manual_seed(3)
    return MTPHeads(tiny_model("llama"), num_modules=K_DRAFTS)


def hidden_rows(names: str) -> torch.Tensor:
    """H_x: a distinct, recognisable hidden row per letter (row value encodes the letter)."""
    g = torch.Generator().manual_seed(0)
    table = torch.randn(26, 64, generator=g)
    return torch.stack([table[ord(c) - ord("A")] for c in names])


def batch(start: int, tokens: list[int], rows: str, want: int = K_DRAFTS, slot: int = 0) -> DraftBatch:
    return DraftBatch([slot], [start], [len(tokens)], torch.tensor(tokens), hidden_rows(rows), [want])


def same_rows(hidden: torch.Tensor, names: str) -> bool:
    return torch.equal(hidden, hidden_rows(names))


@pytest.mark.parametrize("mode", [MTPMode.EAGLE, MTPMode.VANILLA])
def test_reference_example_step_by_step(heads, mode):
    worker = MTPWorker(heads, mode, K_DRAFTS, num_slots=2, max_seq_len=64)
    worker.trace = Trace()

    # Context: target saw ABCD and sampled E. Pairs (B,H_A) (C,H_B) (D,H_C) (E,H_D) at q = 0..3.
    drafts = worker.step(batch(0, [B, C, D, E], "ABCD"))[0]
    assert len(drafts) == K_DRAFTS
    calls = worker.trace.calls
    first = calls[0]
    assert (first.module, first.tokens, first.positions, first.kv_len_after) == (0, [B, C, D, E], [0, 1, 2, 3], 4)
    assert same_rows(first.hidden, "ABCD")
    if mode is MTPMode.EAGLE:  # module 0 again on (d1, h) at q=4, then (d2, h) at q=5
        assert [(c.module, c.tokens, c.positions) for c in calls[1:]] == [
            (0, [drafts[0]], [4]),
            (0, [drafts[1]], [5]),
        ]
    else:  # module j runs the 4 real pairs plus j draft pairs
        assert [(c.module, c.tokens, c.positions) for c in calls[1:]] == [
            (1, [B, C, D, E, drafts[0]], [0, 1, 2, 3, 4]),
            (2, [B, C, D, E, drafts[0], drafts[1]], [0, 1, 2, 3, 4, 5]),
        ]
        assert same_rows(calls[1].hidden[:4], "ABCD") and same_rows(calls[2].hidden[:4], "ABCD")
    assert worker.kv_len[0] == 4

    # Generation 1: target verified E + FGH, accepted F, G and bonus X. New pairs (F,H_E) (G,H_F) (X,H_G).
    worker.trace = Trace()
    worker.step(batch(4, [F, G, X], "EFG"))
    first = worker.trace.calls[0]
    assert (first.tokens, first.positions, first.kv_len_after) == ([F, G, X], [4, 5, 6], 7)
    assert same_rows(first.hidden, "EFG")
    assert worker.kv_len[0] == 7

    # Generation 2: target verified X + NOP, accepted none, bonus K. One new pair (K, H_X) at q=7:
    # everything the drafter wrote past 7 (its drafts) is rewound.
    worker.trace = Trace()
    worker.step(batch(7, [K], "X"))
    first = worker.trace.calls[0]
    assert (first.tokens, first.positions, first.kv_len_after) == ([K], [7], 8)
    assert same_rows(first.hidden, "X")
    assert worker.kv_len[0] == 8


@pytest.mark.parametrize("mode", [MTPMode.EAGLE, MTPMode.VANILLA])
def test_rewind_is_exact_against_a_fresh_drafter(heads, mode):
    stepped = MTPWorker(heads, mode, K_DRAFTS, num_slots=2, max_seq_len=64)
    stepped.step(batch(0, [B, C, D, E], "ABCD", slot=1))
    stepped.step(batch(4, [F, G, X], "EFG", slot=1))
    incremental = stepped.step(batch(7, [K], "X", slot=1))[0]

    fresh = MTPWorker(heads, mode, K_DRAFTS, num_slots=2, max_seq_len=64)
    one_go = fresh.step(batch(0, [B, C, D, E, F, G, X, K], "ABCDEFGX", slot=1))[0]
    assert incremental == one_go


def test_batched_sequences_match_each_alone(heads):
    together = MTPWorker(heads, MTPMode.VANILLA, K_DRAFTS, num_slots=2, max_seq_len=64)
    both = DraftBatch([0, 1], [0, 0], [4, 2], torch.tensor([B, C, D, E, X, K]), hidden_rows("ABCDGX"), [3, 2])
    out = together.step(both)
    alone = MTPWorker(heads, MTPMode.VANILLA, K_DRAFTS, num_slots=2, max_seq_len=64)
    assert out[0] == alone.step(batch(0, [B, C, D, E], "ABCD"))[0]
    assert out[1] == alone.step(batch(0, [X, K], "GX", want=2, slot=1))[0]
    assert len(out[1]) == 2


def test_inconsistent_steps_are_refused(heads):
    worker = MTPWorker(heads, MTPMode.EAGLE, K_DRAFTS, num_slots=2, max_seq_len=64)
    with pytest.raises(DraftProtocolError, match="only 0 are held"):
        worker.step(batch(3, [B], "A"))
    with pytest.raises(DraftProtocolError, match="slot 5"):
        worker.step(batch(0, [B], "A", slot=5))
    with pytest.raises(DraftProtocolError, match="drafts asked"):
        worker.step(batch(0, [B], "A", want=4))


def test_drafts_are_cut_at_the_end_of_a_slot_instead_of_failing(heads):
    worker = MTPWorker(heads, MTPMode.EAGLE, K_DRAFTS, num_slots=1, max_seq_len=6)
    assert len(worker.step(batch(0, [B, C, D, E], "ABCD"))[0]) == 3  # draft pairs at 4, 5
    assert len(worker.step(batch(4, [F], "E"))[0]) == 2  # one pair at 4 -> draft pair at 5 only
    with pytest.raises(DraftProtocolError, match="max_seq_len"):
        worker.step(batch(5, [G, X], "FG"))


def test_negative_starts_and_repeated_slots_are_refused(heads):
    worker = MTPWorker(heads, MTPMode.VANILLA, K_DRAFTS, num_slots=2, max_seq_len=64)
    with pytest.raises(DraftProtocolError, match="negative start"):
        worker.step(batch(-2, [B], "A"))
    two = DraftBatch([0, 0], [0, 0], [1, 1], torch.tensor([B, C]), hidden_rows("AB"), [1, 1])
    with pytest.raises(DraftProtocolError, match="twice"):
        worker.step(two)


def test_vanilla_drafts_stay_inside_the_slot(heads):
    worker = MTPWorker(heads, MTPMode.VANILLA, K_DRAFTS, num_slots=1, max_seq_len=6)
    # 6 pairs fill the slot: depth 0 needs no draft pair, depth 1 would put one at position 6
    assert len(worker.step(batch(0, [B, C, D, E, F, G], "ABCDEF", want=3))[0]) == 1
    worker.reset(0)
    assert len(worker.step(batch(0, [B, C, D, E, F], "ABCDE", want=3))[0]) == 2  # draft pair at 5 fits


def test_vanilla_depths_run_only_when_they_draft_and_catch_up_exactly(heads):
    """Steps asking one draft run depth 0 alone; when a step asks three, depths 1 and 2 first run the
    real pairs they skipped, and the drafts equal those of a drafter that ran every depth every step."""
    worker = MTPWorker(heads, MTPMode.VANILLA, K_DRAFTS, num_slots=2, max_seq_len=64)
    worker.trace = Trace()
    worker.step(batch(0, [B, C, D, E], "ABCD", want=1, slot=1))
    worker.step(batch(4, [F, G, X], "EFG", want=1, slot=1))
    assert {c.module for c in worker.trace.calls} == {0}
    worker.trace = Trace()
    deferred = worker.step(batch(7, [K], "X", slot=1))[0]
    deep = [(c.module, c.positions, c.tokens[:8]) for c in worker.trace.calls if c.module > 0]
    assert deep == [(1, list(range(9)), [B, C, D, E, F, G, X, K]), (2, list(range(10)), [B, C, D, E, F, G, X, K])]
    assert same_rows(worker.trace.calls[1].hidden[:8], "ABCDEFGX")

    every = MTPWorker(heads, MTPMode.VANILLA, K_DRAFTS, num_slots=2, max_seq_len=64)
    every.step(batch(0, [B, C, D, E], "ABCD", slot=1))
    every.step(batch(4, [F, G, X], "EFG", slot=1))
    assert deferred == every.step(batch(7, [K], "X", slot=1))[0]


def test_a_vanilla_depth_catches_up_once_too_many_pairs_wait(heads, monkeypatch):
    import draft_service.mtp_worker as mw

    monkeypatch.setattr(mw, "MAX_LAG", 5)
    worker = MTPWorker(heads, MTPMode.VANILLA, K_DRAFTS, num_slots=1, max_seq_len=64)
    worker.trace = Trace()
    worker.step(batch(0, [B, C, D, E], "ABCD", want=1))
    assert worker.depth_len == [[4], [0], [0]] and len(worker.logs[0].tokens) == 4
    worker.step(batch(4, [F, G], "EF", want=0))  # 6 pairs wait for depths 1 and 2: they run them
    assert worker.depth_len == [[4], [6], [6]]
    assert [(c.module, c.positions) for c in worker.trace.calls[1:]] == [(1, list(range(6))), (2, list(range(6)))]
    assert worker.logs[0].base == 4 and len(worker.logs[0].tokens) == 2  # only depth 0 still needs (F, H_E), (G, H_F)
