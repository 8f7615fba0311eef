"""The draft-length policy: synthetic costs and acceptance drive the choice; in the engine it changes no output."""

from __future__ import annotations

import random

import pytest

from target_service.draft_policy import (
    COLD_ROUND_TRIPS,
    Acceptance,
    DraftCost,
    DraftPolicy,
    StepCost,
    StepShape,
)
from tests.helpers import make_engine, run_to_completion
from tests.oracle_drafter import OracleDrafter
from tests.test_engine import NEW, _requests, setup  # noqa: F401 - the module fixture


# a CPU-like target: a 4-token step costs 1.3x a 1-token step; drafting 3 ms + 3 ms per depth
class FrozenCost(StepCost):
    """A synthetic target cost that ignores the timings it is shown: the tiny test models cost next to
    nothing per token, where a real CPU step does (these tests are about the choice, not the clock)."""

    def observe(self, shape: StepShape, seconds: float) -> None:
        pass


STEP = StepCost(base=0.050, per_seq=0.0, per_token=0.005)


def policy(rates: list[float]) -> DraftPolicy:
    p = DraftPolicy(auto=True, step_cost=StepCost(STEP.base, STEP.per_seq, STEP.per_token), prior=rates)
    p.draft_cost = DraftCost([0.003 + 0.003 * d for d in range(5)], [True] * 5)
    return p


def failing(promise: float = 1.0, tests: int = 200) -> DraftPolicy:
    """Heads whose validation figures promise that drafts pass at ``promise``, whose drafts failed their
    last ``tests`` tests: the choice drafts for nobody, and probes look for what the heads promise."""
    p = policy([promise] * 4)
    for _ in range(tests):
        p.observe_verification("past", 1, 0)
    p.forget("past")
    return p


def test_no_drafts_when_drafts_never_pass():
    assert policy([0.0] * 4).choose(["a", "b", "c"], [4, 4, 2]).drafts == [0, 0, 0]


def test_most_drafts_when_drafts_always_pass():
    assert policy([1.0] * 4).choose(["a", "b", "c"], [4, 4, 2]).drafts == [4, 4, 2]


def test_each_sequence_gets_its_own_length():
    p = policy([0.5] * 4)
    p.common = False  # --draft-choice each
    for _ in range(30):
        p.observe_verification("good", 3, 3)  # always all accepted
        p.observe_verification("bad", 3, 0)  # never
    assert p.choose(["good", "bad"], [3, 3]).drafts == [3, 0]


@pytest.mark.parametrize("bad_seqs, expected", [(1, [3, 3]), (3, [0, 0, 0, 0])])
def test_a_common_choice_gives_every_sequence_the_same_length(bad_seqs, expected):
    """``--draft-choice common`` (the default): the batch's best common length, each sequence capped, from
    what they expect together (one that always passes beside one that never does drafts for both)."""
    p = policy([0.5] * 4)
    assert p.common
    bad = [f"bad{i}" for i in range(bad_seqs)]
    for _ in range(30):
        p.observe_verification("good", 3, 3)
        for rid in bad:
            p.observe_verification(rid, 3, 0)
    assert p.choose(["good", *bad], [3] * (1 + bad_seqs)).drafts == expected
    assert p.choose(["good", "bad0"], [3, 1]).drafts == [3, 1]  # a cap stays a cap


def test_a_costly_drafter_or_a_steep_target_turns_speculation_off():
    p = policy([0.4] * 4)
    assert p.choose(["a"], [3]).drafts[0] > 0
    p.draft_cost = DraftCost([0.003 + 0.05 * d for d in range(5)], [True] * 5)  # 50 ms per depth
    assert p.choose(["a"], [3]).drafts == [0]
    p = policy([0.4] * 4)
    p.step_cost = StepCost(base=0.05, per_seq=0.0, per_token=0.05)  # every token doubles the step
    assert p.choose(["a"], [3]).drafts == [0]


def test_drafts_must_clear_the_margin_not_just_break_even():
    """One draft costs 8 ms over a 58 ms step (a 13.8% gain breaks even); the margin asks 15% more of it."""
    for rate, margin, drafts in ((0.15, 0.0, [1]), (0.15, 0.15, [0]), (0.4, 0.15, [1])):
        p = policy([rate] * 4)
        p.margin, p.margin_per_seq = margin, 0.04  # one sequence: no per-sequence part
        assert p.choose(["a"], [1]).drafts == drafts, (rate, margin)


def test_the_margin_grows_with_the_batch():
    """8 sequences: one draft each adds 43 ms to 93 (46%); at 0.6 acceptance that clears a margin of 0.15
    (0.53 needed) but not 0.15 + 7 x 0.04 (0.66 needed): a batch that drafts thins out before it ends."""
    ids = [f"s{i}" for i in range(8)]
    for per_seq, drafts in ((0.0, [1] * 8), (0.04, [0] * 8)):
        p = policy([0.6, 0.0, 0.0, 0.0])
        p.margin, p.margin_per_seq = 0.15, per_seq
        assert p.choose(ids, [1] * 8).drafts == drafts, per_seq
    assert p.choose(["a"], [1]).drafts == [1]  # one sequence alone still drafts at 0.6


def test_the_steps_other_work_is_in_every_price():
    p = policy([0.5] * 4)
    before = p._seconds([1, 0], p.prices([3, 3]))
    for _ in range(50):
        p.observe_other(0.004)
    assert p._seconds([1, 0], p.prices([3, 3])) == pytest.approx(before + 0.004, abs=1e-6)
    assert p.describe()["step_other_s"] == pytest.approx(0.004, abs=1e-6)


def test_a_round_trip_no_single_sequence_pays_for_is_paid_by_the_batch():
    """One sequence alone cannot pay the drafter's round trip; four sharing it can: all four draft."""
    p = policy([0.6] * 4)
    p.step_cost = StepCost(base=0.048, per_seq=0.0006, per_token=0.0038)  # a 4-sequence CPU step
    p.draft_cost = DraftCost([0.001, 0.009, 0.019, 0.037, 0.041], [True] * 5)  # as measured at 4 streams
    alone = p.throughput([Acceptance([0.6] * 4)] * 4, [1, 0, 0, 0])
    assert alone < p.throughput([Acceptance([0.6] * 4)] * 4, [0, 0, 0, 0])  # the trap: no lone sequence pays
    assert p.choose(["a", "b", "c", "d"], [3, 3, 3, 3]).drafts == [1, 1, 1, 1]


def test_a_silent_sequence_is_probed_and_recovers():
    p = failing()
    p.probe_every, p.probe_share = 5, 1.0  # probes as cheap as can be: this is about recovering
    choices = [p.choose(["s"], [3]) for _ in range(5)]
    assert [c.drafts[0] for c in choices] == [0, 0, 0, 0, 1] and [c.probed[0] for c in choices] == [False] * 4 + [True]
    for _ in range(20):  # its drafts turned good
        p.observe_verification("s", 1, 1)
        p.observe_verification("s", 3, 3)
    assert p.choose(["s"], [3]).drafts == [3]


def test_fixed_mode_returns_the_caps():
    assert DraftPolicy(auto=False).choose(["a", "b"], [3, 1]).drafts == [3, 1]


def test_the_shared_estimate_learns_deep_positions_that_are_rarely_tested():
    """Position 1 is tested only when the first draft passed: fading the shared estimate every step kept
    it near its prior (the heads' validation figure), far above what serving saw; fading per test lets
    the tests it gets decide."""
    p = policy([0.5, 0.8, 0.8, 0.8])
    for step in range(400):  # first drafts pass one step in ten, second drafts never
        p.choose(["s"], [2])
        p.observe_verification("s", 2, 1 if step % 10 == 0 else 0)
    assert p.overall.rate(0) == pytest.approx(0.1, abs=0.03)
    assert p.overall.rate(1) < 0.12  # 40 tests of position 1, all failed, against a prior of weight 4 (per step: 0.24)


def _calibration_grid() -> list[StepShape]:
    """Shapes like calibration's: 1, 4 and 8 sequences, 1-5 new tokens, two contexts, batched and split."""
    return [
        StepShape.of([c] * s, [q] * s, split)
        for s in (1, 4, 8)
        for q in (1, 2, 5)
        for c in (128, 1024)
        for split in ((False, True) if s > 1 else (False,))
    ]


def test_estimates_track_what_they_observe():
    acc = Acceptance([0.5] * 4)
    for _ in range(50):
        acc.observe(3, 1)  # position 0 accepted, position 1 rejected, position 2 never tested
    assert acc.rates[0] > 0.95 and acc.rates[1] < 0.05 and acc.rates[2] == 0.5  # the prior weighs 4 of 54
    a = acc.rates
    assert acc.expected_tokens(3) == pytest.approx(1 + a[0] + a[0] * a[1] + a[0] * a[1] * a[2])

    truth = StepCost(0.04, 0.002, 0.004, 1e-5, 1e-7, 0.001, 0.0015, 2e-6)
    grid = _calibration_grid()
    fitted = StepCost.fit([(shape, truth.predict(shape)) for shape in grid])
    assert fitted.coefficients == pytest.approx(truth.coefficients, abs=1e-8)
    mixed = StepShape.of([100, 2000, 700], [1, 4, 2], split=True)
    split_terms = 3 * 0.0015 + 2800 * 2e-6
    assert fitted.predict(mixed) == pytest.approx(0.04 + 0.006 + 0.028 + 0.028 + 1e-7 * 9521 + 0.002 + split_terms)
    fitted.observe(mixed, fitted.predict(mixed) + 0.05)
    assert fitted.offset == pytest.approx(0.2 * 0.05)

    cost = DraftCost(cold_left=0)  # past the session's cold round trips
    cost.observe(2, 0.020)  # unseen depths move with the first sighting
    assert cost.predict(2) == 0.020 and cost.predict(3) > cost.predict(1) > 0


def test_steps_of_fewer_rows_than_the_kernels_pad_to_cost_as_many():
    """With the matmuls padded to 4 rows, one sequence verifying 0-3 drafts pays the same token price.
    Fitted on padded samples the model is exact; fitted as if unpadded it charges a whole token for
    a single sequence's first draft, which costs no matmul rows."""
    truth = StepCost(0.03, 0.001, 0.004, min_rows=4)
    single = [truth.predict(StepShape.of([256], [q])) for q in (1, 2, 3, 4, 5)]
    assert single[0] == single[1] == single[2] == single[3] < single[4]
    truth = StepCost(0.03, 0.001, 0.004, 1e-5, 1e-7, 0.001, 0.0015, 2e-6, min_rows=4)
    grid = _calibration_grid()
    samples = [(shape, truth.predict(shape)) for shape in grid]
    assert StepCost.fit(samples, min_rows=4).coefficients == pytest.approx(truth.coefficients, abs=1e-8)
    unaware = StepCost.fit(samples)
    one, two = StepShape.of([128], [1]), StepShape.of([128], [2])
    assert truth.predict(two) - truth.predict(one) == pytest.approx(1e-7 * 131 + 0.001)  # pairs, mask
    assert unaware.predict(two) - unaware.predict(one) > truth.predict(two) - truth.predict(one) + 0.003

    p = DraftPolicy(auto=True, step_cost=StepCost(0.03, 0.001, 0.004, min_rows=4), prior=[0.3] * 4)
    p.draft_cost = DraftCost(by_depth=[0.0] * 5, seen=[True] * 5)  # drafting is free here
    prices = p.prices([3], [256])
    assert prices.target([0]) == prices.target([1]) == prices.target([3])  # 1 or 4 tokens: 4 rows either way
    assert p.choose(["a"], [3], contexts=[256]).drafts == [3]  # drafts that cost nothing are all taken
    eights = p.prices([1] * 8, [256] * 8)
    assert eights.target([1] * 8) - eights.target([0] * 8) == pytest.approx(8 * 0.004)


def test_verifying_in_split_attention_is_its_own_term_and_leaves_batched_drafts_priced_right():
    """Calibration times every shape over slots in order (one call) and reversed (one call per sequence,
    a causal mask each where they verify drafts). Fitted without a term for that mask, the split
    samples' extra cost lands on ``per_verifying`` and a batched step's drafts are overpriced."""
    truth = StepCost(0.03, 0.001, 0.002, 1e-5, 1e-7, 0.0002, 0.0015, 2e-6, per_split_verifying=0.003, min_rows=4)
    samples = [(shape, truth.predict(shape)) for shape in _calibration_grid()]
    fitted, without = StepCost.fit(samples, 4), StepCost.fit(samples, 4, split_verifying=False)
    assert fitted.coefficients == pytest.approx(truth.coefficients, abs=1e-8)
    assert without.per_split_verifying == 0.0 and without.per_verifying > truth.per_verifying + 0.001
    none, one_each = StepShape.of([100] * 8, [1] * 8), StepShape.of([100] * 8, [2] * 8)
    draft = truth.predict(one_each) - truth.predict(none)
    assert fitted.predict(one_each) - fitted.predict(none) == pytest.approx(draft)
    assert without.predict(one_each) - without.predict(none) > draft + 0.005


def test_slow_steps_do_not_make_drafts_dearer():
    """Steps measured slower than calibrated (long contexts, a busy machine) shift the step's base cost:
    one more token still costs what calibration measured, so drafts that pay keep being chosen. (A
    measured/predicted factor scaled the token price too: at 8 streams it stopped drafts that paid.)"""
    p = policy([0.6] * 4)
    p.step_cost = StepCost(base=0.040, per_seq=0.002, per_token=0.002, per_kv=1e-6)
    chosen = p.choose(list("abcdefgh"), [3] * 8, contexts=[500] * 8).drafts
    one, two = StepShape.of([1000] * 8, [1] * 8), StepShape.of([1000] * 8, [2] * 8)
    for _ in range(40):
        p.observe_step(one, 0.200)  # 2.4x the model's 0.084 s
    cost = p.step_cost
    assert cost.predict(two) - cost.predict(one) == pytest.approx(8 * 0.002)
    assert cost.predict(one) == pytest.approx(0.200, rel=0.01)
    assert min(p.choose(list("abcdefgh"), [3] * 8, contexts=[1000] * 8).drafts) >= min(chosen) > 0


@pytest.mark.parametrize("split", [False, True])
def test_a_sequences_costs_by_drafts_are_the_models_terms(split):
    cost = StepCost(0.03, 0.001, 0.002, 1e-5, 3e-7, 0.004, 0.0005, 2e-5, 0.006, offset=0.01, min_rows=4)
    for context in (0, 7, 300, 1500):
        want = [cost._model(StepShape.of([context], [1 + n], split), padded=False) - cost.base for n in range(5)]
        assert cost.seq_costs(context, 4, split) == pytest.approx(want, rel=1e-12)


def test_a_long_context_makes_drafts_dearer():
    """Attention over a long context prices each verified token higher (query-key pairs): the same
    acceptance pays for fewer drafts there than over a short one."""
    p = policy([0.6] * 4)
    p.common = False  # --draft-choice each
    p.step_cost = StepCost(base=0.040, per_token=0.002, per_pair=2e-6, per_verifying=0.002)
    short, long = p.choose(["short", "long"], [4, 4], contexts=[100, 4000]).drafts
    assert short > long


def test_in_one_batched_call_the_first_draft_of_a_step_pays_for_every_sequence():
    """In one batched attention call (consecutive slots, ``dense_ok``) every sequence attends with as many
    queries as the step's longest: the first draft of a step costs the whole batch's wider attention,
    each further sequence's draft at that depth only its own rows. A sequence with middling drafts then
    drafts beside a good one, and not alone (choosing per sequence)."""
    p = policy([0.5] * 4)
    p.common = False  # --draft-choice each
    p.step_cost = StepCost(base=0.040, per_seq=0.002, per_token=0.002, per_pair=1e-7, per_verifying=0.0002,
                           per_split_seq=0.003, per_split_kv=2e-6)  # fmt: skip
    prices = p.prices([2] * 8, [300] * 8, dense_ok=True)
    wider = 8 * (0.0002 + 1e-7 * (2 * 302 - 301))  # every sequence: a mask and a second query
    assert prices.target([1] + [0] * 7) - prices.target([0] * 8) == pytest.approx(0.002 + wider)
    assert prices.target([1] * 8) - prices.target([1] + [0] * 7) == pytest.approx(7 * 0.002)
    split = p.prices([2] * 8, [300] * 8, dense_ok=False)
    assert split.target([1] + [0] * 7) - split.target([0] * 8) == pytest.approx(0.002 + 0.0002 + 1e-7 * 303)
    # at long contexts padding 7 sequences' queries costs more than the calls it saves: priced split
    long, long_split = p.prices([2] * 8, [1000] * 8, dense_ok=True), p.prices([2] * 8, [1000] * 8)
    assert long.target([1] + [0] * 7) == long_split.target([1] + [0] * 7)
    assert long.target([1, 0] * 4) < long_split.target([1, 0] * 4)

    ids = list("abcdefgh")
    for _ in range(30):
        for rid in ids[2:]:
            p.observe_verification(rid, 1, 0)
    for i in range(30):
        p.observe_verification("b", 1, int(i % 3 == 0))  # a third of b's drafts pass
    p.probe_every, p.margin, p.margin_per_seq = 10**6, 0.0, 0.0  # this is about the price, not the margin
    alone = p.choose(ids, [1] * 8, contexts=[300] * 8, dense_ok=True).drafts
    for _ in range(30):
        p.observe_verification("a", 1, 1)  # every draft of a passes
    beside = p.choose(ids, [1] * 8, contexts=[300] * 8, dense_ok=True).drafts
    assert alone == [0] * 8 and beside == [1, 1] + [0] * 6


def test_a_sequence_that_stopped_drafting_drifts_back_to_the_prior():
    """Rejections stop a sequence's drafts, and then nothing updates its estimate: fading evidence lets
    it try again on its own, instead of staying stuck until a probe happens to pass."""
    p = policy([0.5] * 4)
    for i in range(40):  # the other sequences' first drafts pass 40% of the time
        p.observe_verification(f"o{i}", 1, int(i % 5 < 2))
    for _ in range(10):
        p.observe_verification("s", 1, 0)
    assert p.choose(["s"], [3]).drafts == [0]
    waited = 1
    while p.choose(["s"], [3]).drafts == [0]:
        waited += 1
    assert 2 < waited <= 10 and p.probe_every == 16  # back after a few steps, well before the probe


def test_a_step_without_drafts_owes_its_row_to_the_drafter():
    """Steps without drafts defer their rows; the drafter takes them before it drafts again. The policy
    learns what a caught-up row costs and no longer counts a step without drafts as free of drafting:
    a sequence just past the break-even point drafts, where it would not if rows were free."""
    cost = DraftCost([0.003 + 0.003 * d for d in range(5)], [True] * 5, cold_left=0)
    cost.observe(1, 0.006 + 10 * 0.0005, rows=10)  # a depth-1 round trip that caught up on 10 rows
    cost.observe(1, 0.006 + 20 * 0.0010, rows=20)
    assert cost.per_row == pytest.approx((0.95 * 0.005 + 0.02) / (0.95 * 10 + 20)) and cost.predict(1) == 0.006
    cost.observe(1, 0.006 - 0.001, rows=2)  # faster than a plain round trip: noise, not a free row; kept
    assert cost.per_row == pytest.approx((0.95 * (0.95 * 0.005 + 0.02) - 0.001) / (0.95 * (0.95 * 10 + 20) + 2))
    for _ in range(5):  # a run of cheap catch-ups (one depth of several ran) does not wipe out the dear ones
        cost.observe(1, 0.006 - 0.003, rows=256)
    assert cost.per_row > 0.0

    p = policy([0.12] * 4)  # one draft: +12% tokens for +14% time (5 ms target, 3 ms drafting, over 58)
    p.probe_every = 10**6
    assert p.choose(["s"], [3]).drafts == [0]
    p.draft_cost.per_row = 0.002  # not drafting leaves 2 ms of catching up for later
    prices = p.prices([3, 0])
    assert prices.deferred([0, 0]) == pytest.approx(0.002) and prices.deferred([1, 0]) == 0.0
    assert p.choose(["s"], [3]).drafts == [1]


def test_a_cold_first_round_trip_and_catch_ups_do_not_price_one_draft_out():
    """What a vanilla target at 4 streams met: its first round trip (4 drafts, cold) moved every depth
    not yet seen, one slow catch-up of 9 rows followed, and from then on only probes asked for one draft,
    each catching up on 16 steps' rows. One draft stayed priced at 24.7 ms (it was never seen without
    rows) at 2.6 ms a row, so ``auto`` never drafted again where its drafts passed 62% of the time."""
    cost = DraftCost.with_row_prior()
    cost.cold_left = 0  # these came after the session's cold round trips (see the next test)
    cost.observe(4, 0.0337)
    assert cost.predict(1) == pytest.approx(0.005 + 0.0337 - 0.014)  # moved with the first sighting
    cost.observe(4, 0.049, rows=9)
    assert cost.per_row < 0.0002  # the prior's 256 rows at 0.1 ms: one slow catch-up moves it, not sets it
    for _ in range(5):
        cost.observe(1, 0.0125, rows=64)
    assert cost.predict(1) < 0.006 and 0.0001 < cost.per_row < 0.0002


def test_the_first_round_trips_of_a_drafter_session_are_left_out_of_its_price():
    """A drafter session's first round trips are cold (2-4x a warm one). Priced, vanilla's first (two
    drafts, 29 ms for about 9 warm) moved every unseen depth with it and `auto` stopped drafting for
    good: drafts that pay were never asked again, so never measured warm. Left out, the prior stands
    until warm round trips come; a new session (the drafter restarted) is cold again."""
    p = policy([0.6] * 4)
    p.draft_cost = DraftCost.with_row_prior()
    p.observe_draft(0, 0.0002, session=1)  # a step that only records: not a round trip, always priced
    assert p.draft_cost.predict(0) == 0.0002
    warm = p.choose(list("abcd"), [4] * 4).drafts
    assert min(warm) > 0
    for _ in range(COLD_ROUND_TRIPS):
        p.observe_draft(2, 0.029, session=1)
        assert p.choose(list("abcd"), [4] * 4).drafts == warm
    p.observe_draft(2, 0.009, session=1)
    assert p.draft_cost.predict(2) == 0.009
    p.observe_draft(0, 0.0002)  # the engine names no session for a step that only records
    p.observe_draft(2, 0.010, session=1)
    assert p.draft_cost.predict(2) == pytest.approx(0.0092)  # still warm: priced
    p.observe_draft(2, 0.040, session=2)  # the drafter came back: its first round trips are cold again
    assert p.draft_cost.predict(2) == pytest.approx(0.0092) and p.draft_cost.cold_left == COLD_ROUND_TRIPS - 1

    cold = policy([0.6] * 4)
    cold.draft_cost = DraftCost.with_row_prior()
    cold.draft_cost.cold_left = 0
    cold.observe_draft(0, 0.0002)
    cold.observe_draft(2, 0.029)
    assert cold.choose(list("abcd"), [4] * 4).drafts == [0] * 4  # what a priced cold round trip did


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
        seconds += p.step_cost.predict(StepShape.of([0], [1 + n])) + p.draft_cost.predict(n)
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


def test_the_probes_of_a_batch_fall_on_the_same_step():
    """The drafting round trip is paid once per step up to the deepest draft asked: probes spread over
    the steps would make many steps draft deeper for the whole batch; together they make one in 16."""
    p = failing()  # drafts fail: the choice is no drafts
    p.probe_share = 1.0  # probes as often as probe_every allows, however many find nothing
    choices = [p.choose(list("abcd"), [3, 3, 3, 0]) for _ in range(48)]
    probing = [c for c in choices if any(c.probed)]
    assert len(probing) == 48 // p.probe_every
    assert all(c.drafts == [1, 1, 1, 0] and c.probed == [True, True, True, False] for c in probing)
    assert all(c.drafts == [0, 0, 0, 0] for c in choices if not any(c.probed))


def test_probes_while_nothing_drafts_are_paid_from_their_share():
    """8 sequences whose drafts fail, the choice drafting for none: priced bare
    and less the tokens it was expected to take, a probe looked free and came every probe_every steps
    (at 8 streams on this CPU each cost about a step's tenth). Priced with the margin and in full, probes
    come only as their share of the time allows, and back off while they find nothing to draft."""
    p = failing()
    choices = [p.choose(list("abcdefgh"), [3] * 8) for _ in range(640)]
    assert not any(any(c.drafts) for c in choices if not any(c.probed))
    assert 0 < sum(any(c.probed) for c in choices) < 640 // 16 / 2


def test_probes_look_only_where_drafts_as_good_as_the_heads_promise_would_pay():
    """At 8 streams on this CPU one draft each costs about 1.3x a step, and drafts as good as the heads'
    validation figures (the first passing 53% of the time) do not clear the margin there: probes could
    only find drafts the choice would not use, and earn no share. Heads that promise 90% are probed."""
    counts = {}
    for promise in (0.53, 0.9):
        p = failing(promise)
        p.step_cost = StepCost(base=0.050, per_seq=0.0, per_token=0.0012)  # 59.6 ms for 8 tokens
        p.draft_cost = DraftCost([0.0002, 0.010, 0.013, 0.016, 0.019], [True] * 5)  # 1 draft each: 1.33x
        choices = [p.choose(list("abcdefgh"), [3] * 8) for _ in range(640)]
        assert not any(any(c.drafts) for c in choices if not any(c.probed))
        counts[promise] = sum(any(c.probed) for c in choices)
    assert counts[0.53] == 0 < counts[0.9]


def test_dear_probes_come_less_often_and_spend_their_share():
    """Probes are at least probe_every steps apart, and further where one costs more than it is expected
    to return: over a long run they spend about probe_share of the predicted time, never much more."""
    cheap, dear = failing(), failing()
    dear.draft_cost = DraftCost([0.003, 0.040, 0.050, 0.060, 0.070], [True] * 5)  # a 40 ms round trip
    dear.draft_cost.per_row = 0.001  # and 1 ms a deferred row at catch-up (priced where deferred)
    counts = {}
    for name, p in (("cheap", cheap), ("dear", dear)):
        choices = [p.choose(list("abcdefgh"), [3] * 8) for _ in range(640)]
        counts[name] = sum(any(c.probed) for c in choices)
        step = p._seconds([0] * 8, p.prices([3] * 8))
        one = p._seconds([1] * 8, p.prices([3] * 8)) - step
        assert counts[name] * one <= p.probe_share * 640 * step + one  # the share, give or take one probe
    assert 0 < counts["dear"] < counts["cheap"] <= 640 // cheap.probe_every


def test_probes_that_find_nothing_back_off_and_one_that_finds_drafts_restores_them():
    """A probe after which the choice still drafts for no sequence halves the share later probes earn,
    down to PROBE_BACKOFF of it: where drafts never pass, probes come several times less often. Once
    probed drafts pass and the choice drafts again, the full share is back."""
    from target_service.draft_policy import PROBE_BACKOFF

    ids, counts = list("abcdefgh"), {}
    for backoff in (False, True):
        p = failing()
        for _ in range(1280):
            choice = p.choose(ids, [3] * 8)
            counts[backoff] = counts.get(backoff, 0) + any(choice.probed)
            for rid, n in zip(ids, choice.drafts):
                p.observe_verification(rid, n, 0)
            if not backoff:
                p._share_scale = 1.0
    assert p._share_scale == PROBE_BACKOFF
    assert 0 < counts[True] < counts[False] / 3
    for _ in range(5000):  # from now on every draft passes: the probes' evidence turns the choice
        choice = p.choose(ids, [3] * 8)
        if any(n and not probed for n, probed in zip(choice.drafts, choice.probed)):
            break
        for rid, n in zip(ids, choice.drafts):
            p.observe_verification(rid, n, n)
    else:
        raise AssertionError("passing drafts never made the choice draft again")
    assert p._share_scale == 1.0


def test_a_probe_pays_for_the_rows_its_sequences_deferred():
    """A probe makes the drafter catch up on every row its sequences deferred since they last asked for
    drafts: priced into the probe, a growing backlog spaces probes out, and probes with their catch-ups
    spend about probe_share of the time (none at all where the rows cost more a step than the share
    earns); a sequence that asks for drafts again starts a new backlog."""
    counts, spent = {}, {}
    ids = list("abcdefgh")
    for per_row in (0.0, 0.0001, 0.001):
        p = failing()
        p.draft_cost.per_row = per_row
        step = p._seconds([0] * 8, p.prices([3] * 8))
        one = p._seconds([1] * 8, p.prices([3] * 8)) - step
        counts[per_row], spent[per_row] = 0, 0.0
        for t in range(640):
            contexts = [1 + t] * 8  # one token a step, from a one-token prompt
            backlog = sum(p._backlog(ids, contexts))
            choice = p.choose(ids, [3] * 8, contexts=contexts)
            if any(choice.probed):
                counts[per_row] += 1
                spent[per_row] += one + per_row * backlog
        assert spent[per_row] <= p.probe_share * 640 * step + one  # the share, give or take one probe
    assert counts[0.0] > counts[0.0001] > counts[0.001] == 0
    assert p._backlog(["a", "z"], [700, 700]) == [699, 699]  # never asked: all it cached but the step's row
    p.unanswered("a")
    assert p.choose(["a"], [3], contexts=[700]).drafts == [1]
    p._note_held(["a"], [703])  # as the next choice does: its drafting step sent everything cached
    assert p._backlog(["a"], [703]) == [0] and p._backlog(["a"], [710]) == [6]


def test_drafting_pays_its_share_of_the_catch_up_over_what_is_left_to_generate():
    """A sequence that asks for drafts for the first time makes the drafter catch up on its whole past
    first: a long prompt with little left to generate does not pay for it, the same prompt with much
    left to generate (or a short one) does, as long as the next CATCH_UP_HORIZON tokens earn it back."""
    from target_service.draft_policy import CATCH_UP_HORIZON

    p = policy([0.5] * 4)  # a draft returns half a token: worth a 55 ms step's 11 ms more
    p.probe_every = 10**6
    p.draft_cost.per_row = 0.00005  # 50 us a row: 50 ms for a 1000-token prompt
    assert p.choose(["long"], [3], contexts=[1000], remaining=[2]).drafts == [0]
    assert p.choose(["long2"], [3], contexts=[1000], remaining=[2000]).drafts[0] > 0
    assert p.choose(["short"], [3], contexts=[10], remaining=[2]).drafts[0] > 0
    assert p.choose(["free"], [3], contexts=[1000]).drafts[0] > 0  # no remaining given: not priced
    p.draft_cost.per_row = 0.001  # 1 ms a row, a second for the prompt: not earned back within the horizon
    assert p.choose(["long3"], [3], contexts=[1000], remaining=[2000]).drafts == [0]
    assert p.choose(["long4"], [3], contexts=[1000], remaining=[CATCH_UP_HORIZON]).drafts == [0]
    assert p.choose(["short2"], [3], contexts=[10], remaining=[2000]).drafts[0] > 0


def test_a_probe_skips_sequences_the_drafter_is_far_behind_on():
    """A probe of a sequence that deferred its whole past makes the drafter catch up on all of it first,
    paced over many steps: probes ask only sequences at most PROBE_MAX_BACKLOG rows behind."""
    from target_service.draft_policy import PROBE_MAX_BACKLOG

    p = failing()  # drafts fail: the choice is 0, only probes draft
    p.probe_every, p.probe_share = 1, 1.0
    p._held["near"] = 1000  # the drafter holds its first 1,000 rows; "far" never asked for drafts
    contexts = [1001 + PROBE_MAX_BACKLOG, 1001 + PROBE_MAX_BACKLOG]
    assert p._backlog(["near", "far"], contexts) == [PROBE_MAX_BACKLOG, 1000 + PROBE_MAX_BACKLOG]
    choice = p.choose(["near", "far"], [3, 3], contexts=contexts)
    assert choice.probed == [True, False] and choice.drafts == [1, 0]
    p.unanswered("far")  # a sequence owed an answer still asks, however far behind
    assert p.choose(["far"], [3], contexts=[2000]).drafts == [1]


def test_after_a_workload_of_poor_drafts_probes_bring_drafting_back():
    """16 sequences whose drafts pass 15% of the time, then 16 at 70% (prompts of 40-110 tokens, 4 at a
    time, modelled costs): the poor ones leave the shared estimate low, and only probes can show the good
    ones are worth drafting for. With probes limited to sequences at most 64 rows behind, a sequence
    whose prompt was longer was never probed, and ``auto`` took 0.92x k=1's tokens per second here."""
    from bench.policy_sim import run

    phases = [(16, [0.15]), (16, [0.7])]
    auto = [run(None, phases, seed) for seed in range(2)]
    none, k1 = run(0, phases)[0]["tok_s"], sum(run(1, phases, seed)[1]["tok_s"] for seed in range(2)) / 2
    assert min(r[0]["tok_s"] for r in auto) > 0.98 * none  # the poor phase: next to no drafts
    assert sum(r[1]["tok_s"] for r in auto) / 2 > 0.97 * k1


def _random_policy(rng: random.Random, screen: bool) -> DraftPolicy:
    highs = (0.05, 0.002, 0.004, 2e-6, 2e-7, 0.003, 0.002, 2e-6, 0.003)  # StepCost's coefficients, in order
    cost = StepCost(*(rng.choice([0.0, rng.uniform(0, hi)]) for hi in highs), min_rows=rng.choice([1, 4]))
    cost.offset = rng.uniform(-0.01, 0.01)
    p = DraftPolicy(auto=True, step_cost=cost, prior=[rng.random() for _ in range(4)], probe_every=10**6, common=False)
    p.draft_cost = DraftCost([rng.uniform(0, 0.004) + rng.uniform(0, 0.004) * d for d in range(5)], [True] * 5)
    p.draft_cost.per_row = rng.choice([0.0, rng.uniform(0, 1e-3)])
    p.other, p.screen = rng.uniform(0, 0.004), screen
    return p


def test_the_screen_for_steps_nothing_pays_in_chooses_what_the_ascent_does():
    """Where no sequence drafting alone beats the step without drafts, ``choose`` skips the ascent (its
    first pass would try exactly those moves and stay): on random costs, acceptance, contexts, backlogs
    and batches it picks what the full ascent picks, and it does skip in a good share of them."""
    rng, screened, total = random.Random(11), 0, 3000
    for case in range(total):
        seed, n = rng.random(), rng.randint(1, 8)
        ids = [f"s{i}" for i in range(n)]
        caps = [rng.randint(0, 4) for _ in range(n)]
        contexts = [rng.randint(1, 2000) for _ in range(n)]
        remaining = [rng.randint(1, 200) for _ in range(n)]
        dense_ok, other = rng.random() < 0.7, rng.choice([None, StepShape(1, 64, 0, 64 * 65, 1, True)])
        choices = []
        for screen in (True, False):
            case_rng = random.Random(seed)
            p = _random_policy(case_rng, screen)
            for rid in ids:  # each sequence's own evidence, so estimates differ
                for _ in range(case_rng.randint(0, 3)):
                    p.observe_verification(rid, 4, case_rng.randint(0, 4))
            calls: list[bool] = []
            if screen:
                real = p._alone_none_pays
                p._alone_none_pays = lambda *a, real=real, calls=calls: calls.append(real(*a)) or calls[-1]
            choices.append(p.choose(ids, caps, contexts=contexts, other=other, dense_ok=dense_ok, remaining=remaining))
            screened += any(calls)
        assert choices[0].drafts == choices[1].drafts, case
    assert screened > total // 10


def test_calibration_runs_the_grid_in_rounds_so_a_burst_of_load_costs_no_shape_its_time(monkeypatch):
    """Another process busy for a while (a draft service warming up) slows the forwards timed then: the
    grid runs in rounds, one forward of each shape a round, so a burst spanning several forwards in a
    row still leaves every shape a fast round, and the fit sees each shape's own time."""
    from types import SimpleNamespace

    from target_service import draft_policy

    calls = []

    def timed(runner, batch):  # [seconds] 1 ms a new token; the first 8 forwards run 100x slower
        calls.append(batch)
        return sum(batch.q_lens) * 0.001 * (100 if len(calls) <= 8 else 1)

    monkeypatch.setattr(draft_policy, "_timed", timed)
    runner = SimpleNamespace(cache=SimpleNamespace(shape=SimpleNamespace(max_seq_len=2048)))
    samples = draft_policy.calibration_samples(runner, 8, 5, rounds=3)
    assert len(calls) == 3 * len(samples) and len(samples) > 8
    assert all(seconds == pytest.approx(shape.tokens * 0.001) for shape, seconds in samples)


def test_a_sequence_whose_drafts_did_not_come_asks_again_next_step():
    """A probe can find the drafter still catching up on a sequence's past (paced per step): it got no
    drafts, so it asks again next step instead of waiting for the next probe."""
    p = policy([0.0] * 4)
    p.unanswered("a")
    first = p.choose(["a", "b"], [3, 3])
    assert (first.drafts, first.probed, first.expected) == ([1, 0], [True, False], [1.0, 1.0])  # rates 0: 1 token
    assert p.choose(["a", "b"], [3, 3]).drafts == [0, 0]


def test_the_scheduler_says_whether_the_next_step_prefills():
    from target_service.scheduler import Scheduler, SchedulerLimits
    from target_service.sequence import Sequence
    from tests.helpers import request

    sched = Scheduler(SchedulerLimits(max_slots=2, max_seq_len=512, max_batch_tokens=64, max_queue=4))
    assert not sched.will_prefill(0) and sched.joining() == []
    for rid, n in (("a", 10), ("b", 100), ("c", 5)):
        sched.add(Sequence(request(rid, list(range(n)), 8), 3))
    assert sched.will_prefill(0)  # waiting requests and free slots
    assert sched.joining() == [10, 100]  # c waits for a slot, not to join the next steps
    first = sched.schedule()  # a's whole prompt and 54 tokens of b; c waits for a slot
    sched.update_from_output(first, [1] * len(first))
    assert sched.will_prefill(2) and not sched.will_prefill(64)  # b goes on, unless generation takes the budget
    assert sched.joining() == [100]
    second = sched.schedule()  # a decodes, b's last 46
    sched.update_from_output(second, [1] * len(second))
    assert not sched.will_prefill(2) and sched.joining() == []  # both slots decode; c still waits


def test_while_a_batch_fills_a_new_sequence_waits_where_the_full_batch_could_not_gain():
    """One sequence alone gains from drafts; eight together do not, not even at the heads' promise. Beside
    seven joining sequences a new one asks for none (drafting now would start its prompt's catch-up for
    a few steps of drafts); beside one, where two together gain, it drafts; one already drafting goes on."""
    assert policy([0.6] * 4).choose(["a"], [3], contexts=[600]).drafts[0] > 0
    p = policy([0.6] * 4)
    waits = p.choose(["a"], [3], contexts=[600], joining=[600] * 7)
    assert waits.drafts == [0] and waits.probed == [False]
    assert p.choose(["a"], [3], contexts=[601], joining=[600]).drafts[0] > 0
    assert p.choose(["a"], [3], contexts=[603], joining=[600] * 7).drafts[0] > 0  # it drafts already
    assert p.choose(["b"], [3], contexts=[600], joining=[600] * 7).drafts == [0]


def test_the_step_trace_records_every_step(setup, tmp_path):  # noqa: F811
    import json

    from target_service.profile import StepTrace

    model, prompts, refs = setup
    oracle = OracleDrafter(refs, lambda rid, pos: pos % 3 == 0, vocab_size=256)
    auto = DraftPolicy(auto=True, step_cost=FrozenCost(STEP.base, STEP.per_seq, STEP.per_token))
    engine = make_engine(model, slots=2, batch_tokens=24, k=3, drafter=oracle, policy=auto)
    engine.trace = StepTrace(str(tmp_path / "steps.jsonl"))
    run_to_completion(engine, _requests(prompts))
    engine.trace.close()
    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert len(steps) == engine.profile.steps
    assert sum(not s["decode"] for s in steps) > 0 and sum(s["decode"] for s in steps) > 0
    assert all(s["predicted_s"] > 0 for s in steps if s["decode"])
    assert all(len(s["q_lens"]) == len(s["starts"]) == len(s["drafts_asked"]) == len(s["accepted"]) for s in steps)
    assert all(1 <= a <= q for s in steps if s["decode"] for a, q in zip(s["accepted"], s["q_lens"]))
    assert all(s["other_s"] >= 0 for s in steps)
    assert sum(s["other_s"] for s in steps) <= engine.profile.other_s  # each record is written before its step ends
    assert sum(q - 1 for s in steps if s["decode"] for q in s["q_lens"]) > 0  # drafts were verified

    from bench.trace_summary import calibration, summarise, workloads

    rows = [summarise(i, w) for i, w in enumerate(workloads(steps))]
    assert sum(w.steps for w in rows) == len(steps) and sum(w.decode_steps for w in rows) == sum(
        s["decode"] for s in steps
    )
    decode_tokens = sum(sum(s["accepted"]) for s in steps if s["decode"])
    assert sum(w.tokens_per_decode_step * w.decode_steps for w in rows) == pytest.approx(decode_tokens)
    calib = calibration(steps)  # the oracle passes every third position: what the policy expected vs took
    assert calib and all(c.samples > 0 and c.took >= 1 and c.expected >= 1 for c in calib)


def test_trace_summary_picks_workloads_and_groups_forwards_by_shape(tmp_path):
    """``--workloads`` keeps the named workloads; ``--shape`` the forwards of steps verifying exactly those drafts."""
    import json

    from bench.trace_summary import main

    def step(decode, starts, q_lens, forward, split=False):
        n = len(q_lens)
        return {"decode": decode, "starts": starts, "q_lens": q_lens, "split": split, "predicted_s": 0.0,
                "forward_s": forward, "draft_s": 0.0, "other_s": 0.0, "accepted": [1] * n, "slots": list(range(n)),
                "drafts_asked": [0] * n, "expected": [0.0] * n, "caught_up_rows": 0}  # fmt: skip

    def workload(ms):  # a fresh prefill, then steps of two sequences verifying 1 and 0 drafts (in either order)
        return [step(False, [0, 0], [8, 8], 0.2)] + [
            step(True, [8 + i, 8 + i], [2, 1] if i % 2 else [1, 2], m / 1000) for i, m in enumerate(ms)
        ]

    trace = tmp_path / "t.jsonl"
    steps = workload([10, 30, 20]) + workload([50, 70, 60]) + workload([5, 6, 7])
    steps.insert(2, step(True, [9, 9], [1, 1], 0.5))  # another shape: not counted
    steps.insert(3, step(True, [10, 10], [2, 1], 0.9, split=True))  # split apart: its own row
    trace.write_text("\n".join(json.dumps(s) for s in steps))
    main([str(trace), "--workloads", "0,1", "--shape", "0,1", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "t.summary.json").read_text())
    assert [w["index"] for w in data["workloads"]] == [0, 1]
    shapes = [(f["workload"], f["split"], f["steps"], f["median_ms"]) for f in data["shapes"]]
    assert shapes == [(0, False, 3, 20.0), (0, True, 1, 900.0), (1, False, 3, 60.0)]
