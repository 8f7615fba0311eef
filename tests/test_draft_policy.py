"""The draft-length policy: synthetic costs and acceptance drive the choice; in the engine it changes no output."""

from __future__ import annotations

import random

import pytest

from target_service.draft_policy import Acceptance, DraftCost, DraftPolicy, StepCost
from tests.helpers import make_engine, run_to_completion
from tests.oracle_drafter import OracleDrafter
from tests.test_engine import NEW, _requests, setup  # noqa: F401 - the module fixture


# a CPU-like target: a 4-token step costs 1.3x a 1-token step; drafting 3 ms + 3 ms per depth
class FrozenCost(StepCost):
    """A synthetic target cost that ignores the timings it is shown: the tiny test models cost next to
    nothing per token, where a real CPU step does (these tests are about the choice, not the clock)."""

    def observe(self, tokens: int, seqs: int, kv: int, seconds: float) -> None:
        pass


STEP = StepCost(base=0.050, per_seq=0.0, per_token=0.005)


def policy(rates: list[float]) -> DraftPolicy:
    p = DraftPolicy(auto=True, step_cost=StepCost(STEP.base, STEP.per_seq, STEP.per_token), prior=rates)
    p.draft_cost = DraftCost([0.003 + 0.003 * d for d in range(5)], [True] * 5)
    return p


def test_no_drafts_when_drafts_never_pass():
    assert policy([0.0] * 4).choose(["a", "b", "c"], [4, 4, 2]).drafts == [0, 0, 0]


def test_most_drafts_when_drafts_always_pass():
    assert policy([1.0] * 4).choose(["a", "b", "c"], [4, 4, 2]).drafts == [4, 4, 2]


def test_each_sequence_gets_its_own_length():
    p = policy([0.5] * 4)
    for _ in range(30):
        p.observe_verification("good", 3, 3)  # always all accepted
        p.observe_verification("bad", 3, 0)  # never
    assert p.choose(["good", "bad"], [3, 3]).drafts == [3, 0]


def test_a_costly_drafter_or_a_steep_target_turns_speculation_off():
    p = policy([0.4] * 4)
    assert p.choose(["a"], [3]).drafts[0] > 0
    p.draft_cost = DraftCost([0.003 + 0.05 * d for d in range(5)], [True] * 5)  # 50 ms per depth
    assert p.choose(["a"], [3]).drafts == [0]
    p = policy([0.4] * 4)
    p.step_cost = StepCost(base=0.05, per_seq=0.0, per_token=0.05)  # every token doubles the step
    assert p.choose(["a"], [3]).drafts == [0]


def test_a_round_trip_no_single_sequence_pays_for_is_paid_by_the_batch():
    """One sequence alone cannot pay the drafter's round trip; four sharing it can: all four draft."""
    p = policy([0.6] * 4)
    p.step_cost = StepCost(base=0.048, per_seq=0.0006, per_token=0.0038)  # a 4-sequence CPU step
    p.draft_cost = DraftCost([0.001, 0.009, 0.019, 0.037, 0.041], [True] * 5)  # as measured at 4 streams
    alone = p.throughput([Acceptance([0.6] * 4)] * 4, [1, 0, 0, 0])
    assert alone < p.throughput([Acceptance([0.6] * 4)] * 4, [0, 0, 0, 0])  # the trap: no lone sequence pays
    assert p.choose(["a", "b", "c", "d"], [3, 3, 3, 3]).drafts == [1, 1, 1, 1]


def test_a_silent_sequence_is_probed_and_recovers():
    p = policy([0.0] * 4)
    p.probe_every = 5
    choices = [p.choose(["s"], [3]) for _ in range(5)]
    assert [c.drafts[0] for c in choices] == [0, 0, 0, 0, 1] and [c.probed[0] for c in choices] == [False] * 4 + [True]
    for _ in range(20):  # its drafts turned good
        p.observe_verification("s", 1, 1)
        p.observe_verification("s", 3, 3)
    assert p.choose(["s"], [3]).drafts == [3]


def test_fixed_mode_returns_the_caps():
    assert DraftPolicy(auto=False).choose(["a", "b"], [3, 1]).drafts == [3, 1]


def test_estimates_track_what_they_observe():
    acc = Acceptance([0.5] * 4)
    for _ in range(50):
        acc.observe(3, 1)  # position 0 accepted, position 1 rejected, position 2 never tested
    assert acc.rates[0] > 0.95 and acc.rates[1] < 0.05 and acc.rates[2] == 0.5  # the prior weighs 4 of 54
    a = acc.rates
    assert acc.expected_tokens(3) == pytest.approx(1 + a[0] + a[0] * a[1] + a[0] * a[1] * a[2])

    grid = [(t, s, s * c) for s in (1, 4, 8) for t in (s, 3 * s) for c in (128, 1024)]
    fitted = StepCost.fit([(t, s, kv, 0.04 + 0.002 * s + 0.004 * t + 1e-5 * kv) for t, s, kv in grid])
    got = (fitted.base, fitted.per_seq, fitted.per_token, fitted.per_kv)
    assert got == pytest.approx((0.04, 0.002, 0.004, 1e-5), abs=1e-6)
    fitted.observe(10, 2, 256, fitted.predict(10, 2, 256) + 0.05)
    assert fitted.offset == pytest.approx(0.2 * 0.05)

    cost = DraftCost()
    cost.observe(2, 0.020)  # unseen depths move with the first sighting
    assert cost.predict(2) == 0.020 and cost.predict(3) > cost.predict(1) > 0


def test_slow_steps_do_not_make_drafts_dearer():
    """Steps measured slower than calibrated (long contexts, a busy machine) shift the step's base cost:
    one more token still costs what calibration measured, so drafts that pay keep being chosen. (A
    measured/predicted factor scaled the token price too: at 8 streams it stopped drafts that paid.)"""
    p = policy([0.6] * 4)
    p.step_cost = StepCost(base=0.040, per_seq=0.002, per_token=0.002, per_kv=1e-6)
    chosen = p.choose(list("abcdefgh"), [3] * 8, kv=4000).drafts
    for _ in range(40):
        p.observe_step(8, 8, 8000, 0.200)  # 2.4x the model's 0.084 s
    cost = p.step_cost
    assert cost.predict(16, 8, 8000) - cost.predict(8, 8, 8000) == pytest.approx(8 * 0.002)
    assert cost.predict(8, 8, 8000) == pytest.approx(0.200, rel=0.01)
    assert min(p.choose(list("abcdefgh"), [3] * 8, kv=8000).drafts) >= min(chosen) > 0


def test_a_sequence_that_stopped_drafting_drifts_back_to_the_prior():
    """Rejections stop a sequence's drafts, and then nothing updates its estimate: fading evidence lets
    it try again on its own, instead of staying stuck until a probe happens to pass."""
    p = policy([0.5] * 4)
    for _ in range(6):
        p.observe_verification("s", 1, 0)
    assert p.choose(["s"], [3]).drafts == [0]
    waited = 1
    while p.choose(["s"], [3]).drafts == [0]:
        waited += 1
    assert 2 < waited <= 10 and p.probe_every == 16  # back after a few steps, well before the probe


def _throughput(p: DraftPolicy, rates: list[float], k: int | None, steps: int = 3000) -> float:
    """Tokens per (model) second of one sequence whose drafts pass at ``rates``: ``k`` fixed, None = auto."""
    rng, tokens, seconds = random.Random(3), 0, 0.0
    for _ in range(steps):
        n = p.choose(["s"], [4]).drafts[0] if k is None else k
        accepted = 0
        while accepted < n and rng.random() < rates[accepted]:
            accepted += 1
        p.observe_verification("s", n, accepted)
        tokens += 1 + accepted
        seconds += p.step_cost.predict(1 + n, 1) + p.draft_cost.predict(n)
    return tokens / seconds


@pytest.mark.parametrize("first", [0.5, 0.35, 0.25, 0.1])
def test_auto_is_within_three_percent_of_the_best_fixed_length(first):
    """Synthetic acceptance at middling rates (where a noisy estimate used to stop drafting too often)."""
    rates = [first, 0.47, 0.68, 0.7]
    best = max(_throughput(policy([0.5] * 4), rates, k) for k in range(5))
    assert _throughput(policy([0.5] * 4), rates, None) > 0.97 * best


@pytest.mark.parametrize("corrupt_rate", [0.0, 0.5, 1.0])
def test_auto_in_the_engine_keeps_greedy_output_identical(setup, corrupt_rate):  # noqa: F811
    model, prompts, refs = setup
    rng = random.Random(7)
    corrupted = {(rid, pos) for rid in refs for pos in range(NEW) if rng.random() < corrupt_rate}
    oracle = OracleDrafter(refs, lambda rid, pos: (rid, pos) in corrupted, vocab_size=256)
    auto = DraftPolicy(auto=True, step_cost=FrozenCost(STEP.base, STEP.per_seq, STEP.per_token), probe_every=4)
    engine = make_engine(model, slots=4, batch_tokens=40, k=3, drafter=oracle, policy=auto)
    out = run_to_completion(engine, _requests(prompts))
    for rid, ref in refs.items():
        assert out[rid][0] == ref
    stats = [out[rid][2].stats for rid in refs]
    if corrupt_rate == 1.0:  # drafts never pass: the policy stops asking, probes now and then
        assert sum(s.skipped_by_policy for s in stats) > sum(s.num_steps for s in stats) / 2
    if corrupt_rate == 0.0:  # perfect drafts: it learns to ask for more than one per step
        assert sum(s.num_drafted for s in stats) > 1.5 * sum(s.num_steps for s in stats)
