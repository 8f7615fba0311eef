"""Acceptance beyond strict greedy: relaxed acceptance in thinking spans (hand-computed cases), lossless
speculative sampling (chi-square tests with fixed seeds, and a proof that the test catches a wrong
residual), forced acceptance, and the mode reported per request."""

from __future__ import annotations

import itertools

import pytest
import torch

from target_service.acceptance import AcceptanceDefaults
from target_service.acceptance.relaxed import RelaxedRule, ThinkingSpan, accept_relaxed
from target_service.acceptance.sampling import SamplingRule, accept_sampling
from tests.helpers import make_engine, request, run_to_completion, tiny_model

BEGIN, END = 4, 5
SPAN = ThinkingSpan(BEGIN, END)
RULE = RelaxedRule(top_k=2, delta=0.15)


def probs(*rows):
    return torch.tensor(rows, dtype=torch.float32)


# Position rows over a 6-token vocabulary. Token 0 is top-1 at 0.5, token 1 second at 0.4 (within delta),
# token 2 third at 0.1 (outside top-2).
CLOSE = [0.5, 0.4, 0.1, 0.0, 0.0, 0.0]
FAR = [0.7, 0.2, 0.1, 0.0, 0.0, 0.0]  # token 1 is second but 0.5 below top-1
OPEN = [0.05, 0.0, 0.0, 0.0, 0.9, 0.05]  # top-1 is BEGIN
SHUT = [0.05, 0.0, 0.0, 0.0, 0.05, 0.9]  # top-1 is END


def test_relaxed_outside_span_is_strict():
    block, state = accept_relaxed(probs(CLOSE, CLOSE, CLOSE), [1, 0], False, SPAN, RULE)
    assert block == [0] and state is False  # draft 1 is not the argmax: rejected, bonus 0


def test_relaxed_inside_span_accepts_close_candidates_only():
    block, state = accept_relaxed(probs(CLOSE, CLOSE, FAR, CLOSE), [1, 1, 1], True, SPAN, RULE)
    # p(1)=0.4 >= 0.5-0.15 twice; then 0.2 < 0.7-0.15: rejected, bonus = argmax 0
    assert block == [1, 1, 0] and state is True
    block, _ = accept_relaxed(probs(CLOSE, CLOSE), [2], True, SPAN, RULE)
    assert block == [0]  # token 2 is outside the top-2


def test_span_opening_inside_the_block_relaxes_the_following_drafts():
    block, state = accept_relaxed(probs(OPEN, CLOSE, CLOSE), [BEGIN, 1], False, SPAN, RULE)
    assert block == [BEGIN, 1, 0] and state is True
    # the same draft without the opening token is rejected
    assert accept_relaxed(probs(CLOSE, CLOSE), [1], False, SPAN, RULE)[0] == [0]


def test_span_closing_inside_the_block_makes_the_following_drafts_strict():
    block, state = accept_relaxed(probs(SHUT, CLOSE, CLOSE), [END, 1], True, SPAN, RULE)
    assert block == [END, 0] and state is False


def test_bonus_token_updates_the_span_state():
    block, state = accept_relaxed(probs(CLOSE, OPEN), [0], False, SPAN, RULE)
    assert block == [0, BEGIN] and state is True
    assert SPAN.after(False, [1, BEGIN, 2, END, 3]) is False
    assert SPAN.after(False, [1, BEGIN, 2]) is True


# ---- speculative sampling ------------------------------------------------------------------------
CHI2_CRIT = {4: 18.47, 5: 20.52}  # chi-square critical values at p = 0.001


def chi2(counts: torch.Tensor, expected_probs: torch.Tensor) -> float:
    n = counts.sum()
    exp = expected_probs * n
    keep = exp > 0
    return float((((counts - exp) ** 2)[keep] / exp[keep]).sum())


P = probs(
    [0.40, 0.25, 0.20, 0.10, 0.05],
    [0.10, 0.10, 0.50, 0.20, 0.10],
    [0.30, 0.30, 0.20, 0.10, 0.10],
)
TRIALS = 20000


def first_two(draw_block, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Counts of the emitted token at position 0 and, when the block reaches it, at position 1."""
    gen = torch.Generator().manual_seed(seed)
    c0, c1 = torch.zeros(5), torch.zeros(5)
    for _ in range(TRIALS):
        block = draw_block(gen)
        c0[block[0]] += 1
        if len(block) > 1:
            c1[block[1]] += 1
    return c0, c1


def test_speculative_sampling_with_greedy_drafts_matches_the_target():
    c0, c1 = first_two(lambda g: accept_sampling(P, [1, 3], g), seed=1)
    assert 0.2 < c0[1] / TRIALS < 0.3  # the draft is accepted about p(1) of the time
    assert chi2(c0, P[0]) < CHI2_CRIT[4]
    assert chi2(c1, P[1]) < CHI2_CRIT[4]


def test_speculative_sampling_with_sampled_drafts_matches_the_target():
    q = probs([0.1, 0.6, 0.1, 0.1, 0.1], [0.5, 0.1, 0.1, 0.2, 0.1])

    def block(g):
        drafts = [int(torch.multinomial(q[j], 1, generator=g)) for j in range(2)]
        return accept_sampling(P, drafts, g, draft_probs=q)

    c0, c1 = first_two(block, seed=2)
    assert chi2(c0, P[0]) < CHI2_CRIT[4]
    assert chi2(c1, P[1]) < CHI2_CRIT[4]


def test_the_chi_square_test_catches_a_wrong_residual():
    """Resampling from p itself after a rejection (instead of p without the draft) must be detected."""

    def wrong(g):
        if float(torch.rand((), generator=g)) < float(P[0, 1]):
            return [1]
        return [int(torch.multinomial(P[0], 1, generator=g))]

    c0, _ = first_two(wrong, seed=3)
    assert chi2(c0, P[0]) > CHI2_CRIT[4]


def test_sampling_rule_filters():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    torch.testing.assert_close(SamplingRule(1.0).probs(logits), torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    torch.testing.assert_close(SamplingRule(1.0, top_k=2).probs(logits), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    top_p = SamplingRule(1.0, top_p=0.7).probs(logits)  # smallest set reaching 0.7: {0, 1}
    torch.testing.assert_close(top_p, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    cold = SamplingRule(0.5).probs(logits)
    assert cold[0, 0] > 0.5


# ---- through the engine --------------------------------------------------------------------------
class FixedDrafter:
    """Test drafter: always proposes the same tokens (1, 2, 3, ...), cut to what the step wants."""

    def propose(self, step):
        return [list(range(1, 1 + int(n))) for n in step.num_draft_tokens]

    def release(self, request_ids):
        return None

    def status(self):
        return None  # in this process: no link


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    return tiny_model("llama", vocab_size=8, seed_std=0.5)


def exact_pair_distribution(model, prompt: list[int]) -> torch.Tensor:
    """P(t1, t2 | prompt) of plain sampling at temperature 1, from the model's logits: [8 * 8]."""
    with torch.no_grad():
        p1 = torch.softmax(model(torch.tensor([prompt])).logits[0, -1].float(), -1)
        rows = torch.tensor([prompt + [t] for t in range(8)])
        p2 = torch.softmax(model(rows).logits[:, -1].float(), -1)  # [8, 8]
    return (p1[:, None] * p2).flatten()


def test_engine_speculative_sampling_distribution_equals_plain_sampling(small):
    """4000 two-token samples with k=2 fixed drafts vs the model's exact joint distribution (64 cells)."""
    prompt = [3, 1, 4, 1, 5]
    engine = make_engine(small, slots=16, batch_tokens=64, k=2, drafter=FixedDrafter(), queue=5000)
    reqs = [request(f"r{i}", prompt, 3, temperature=1.0, seed=i) for i in range(4000)]  # t2 is verified
    out = run_to_completion(engine, reqs)
    counts = torch.zeros(64)
    drafted = 0
    for ids, _, fin in out.values():
        counts[ids[0] * 8 + ids[1]] += 1
        drafted += fin.stats.num_drafted
        assert fin.stats.mode == "sampling"
    assert drafted > 0
    expected = exact_pair_distribution(small, prompt)
    big = expected * 4000 >= 5  # chi-square over cells with enough mass, the rest pooled
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    df = int(big.sum())
    crit = df + 3.09 * (2 * df) ** 0.5 + 3.0  # generous approximation of the p=0.001 quantile
    assert chi2(obs, exp) < crit


def test_engine_sampling_is_reproducible_per_seed(small):
    engine = make_engine(small, slots=4, k=2, drafter=FixedDrafter())
    reqs = [request(n, [1, 2, 3], 24, temperature=0.8, top_p=0.9, seed=s) for n, s in (("a", 7), ("b", 7), ("c", 8))]
    out = run_to_completion(engine, reqs)
    assert out["a"][0] == out["b"][0]
    assert out["a"][0] != out["c"][0]


def test_forced_acceptance_accepts_wrong_drafts_and_says_so(small):
    engine = make_engine(small, slots=2, k=3, drafter=FixedDrafter())
    out = run_to_completion(engine, [request("f", [1, 2, 3], 13, force_accept=2)])
    ids, _, fin = out["f"]
    assert fin.stats.mode == "greedy+forced"
    assert fin.stats.num_accepted == 2 * (fin.stats.num_steps)  # every step accepted exactly 2 drafts
    assert ids[1:3] == [1, 2]  # the first drafts were emitted whatever the target wanted


def test_relaxed_through_the_engine_accepts_at_least_as_much_as_strict(small):
    never = 100  # an end id outside the vocabulary: the span opened by the prompt never closes
    defaults = AcceptanceDefaults(span=ThinkingSpan(BEGIN, never), relaxed=RelaxedRule(8, 1.0))
    engine = make_engine(small, slots=2, k=3, drafter=FixedDrafter())
    engine.acceptance = defaults
    out = run_to_completion(
        engine,
        [request("s", [BEGIN, 1, 2], 12), request("r", [BEGIN, 1, 2], 12, acceptance="relaxed")],
    )
    strict, relaxed = out["s"][2].stats, out["r"][2].stats
    assert relaxed.mode == "relaxed" and strict.mode == "greedy"
    # with top_k = vocab and delta = 1 every draft inside the span is accepted
    assert relaxed.num_accepted == relaxed.num_drafted > strict.num_accepted
    assert out["r"][0][1:4] == [1, 2, 3]  # after the prefill token, the fixed drafts were all accepted


@pytest.mark.parametrize("combo", list(itertools.product([0.0, 0.7], [None, 1])))
def test_modes_are_reported(small, combo):
    temperature, forced = combo
    engine = make_engine(small, slots=2, k=2, drafter=FixedDrafter())
    out = run_to_completion(engine, [request("m", [1, 2], 6, temperature=temperature, force_accept=forced, seed=1)])
    mode = out["m"][2].stats.mode
    assert mode == ("sampling" if temperature else "greedy") + ("+forced" if forced is not None else "")


def test_seeded_sampling_gives_the_same_text_with_and_without_drafts(small):
    """The draws belong to output positions, not to drafts: a drafter cannot change a seeded answer."""
    prompt = [3, 1, 4, 1, 5]
    seeds = range(40)
    plain = run_to_completion(
        make_engine(small, slots=8, k=0), [request(f"r{s}", prompt, 16, temperature=0.9, seed=s) for s in seeds]
    )
    drafted = run_to_completion(
        make_engine(small, slots=8, k=3, drafter=FixedDrafter()),
        [request(f"r{s}", prompt, 16, temperature=0.9, seed=s) for s in seeds],
    )
    accepted = 0
    for s in seeds:
        assert drafted[f"r{s}"][0] == plain[f"r{s}"][0], s
        accepted += drafted[f"r{s}"][2].stats.num_accepted
    assert accepted > 0  # some drafts were accepted, so the blocks really differed from plain decoding
    assert len({tuple(v[0]) for v in plain.values()}) > 30  # and the seeds really sample
