"""How many drafts each sequence verifies next step: chosen from measured costs and acceptance.

Expected tokens of a sequence that verifies ``n`` drafts, with ``a_j`` the chance that draft j is
accepted once drafts 0..j-1 were (its conditional acceptance rate):

    E(n) = 1 + a_0 + a_0 a_1 + ... + a_0 ... a_{n-1}

The step costs ``target(shape) + drafter(depth) + deferred rows``: the target forward over every
sequence's ``1 + n_s`` tokens (``StepShape``: tokens, sequences, cached tokens attended, attention
pairs, sequences that verify), the drafting round trip up to the deepest draft asked, and what the
drafter will spend later on the row of each sequence that could draft and does not (it catches up on
them before it drafts for that sequence again). The policy picks the ``n_s`` (each capped by the
request's ``k``) that maximise ``sum_s E_s(n_s) / cost`` for the batch. By default (``common``,
`--draft-choice common`) every sequence verifies the same ``n`` (capped): the best common length. A choice
per sequence (``each``) goes on from there by coordinate ascent (the round trip is shared: one sequence
alone may not pay for it where all together do), moving one sequence at a time, so a sequence the drafter
is far behind on weighs its catch-up against its own drafts alone. In lockstep the common choice ran 1.015x
and 1.031x of it at 4 streams and 1.010x at 8; in 4-stream rag after poor workloads it drafted for the
whole batch, the one far behind included, where the choice per sequence stopped drafting
(`docs/bench/common-choice-ab`). Now and then every sequence drafts one more than chosen (when its cap
allows): drafts that turned good again are noticed, and deeper positions and depths the choice never
reaches still get measured.
Probes are ``probe_every`` steps apart at least, and further where they would spend more than
``probe_share`` of the predicted time beyond what they are expected to return (their seconds counted
with the margin, as the choice counts them; at 8 streams of poor drafts one costs most of a step); they
earn that share only in proportion to what drafts as good as the heads' validation figures would gain at
the step's prices (``PROBE_HOPE_FULL``), and ask only sequences the drafter is at most
``PROBE_MAX_BACKLOG`` rows behind on; each probe after which the choice still drafts for no sequence
halves that share, down to ``PROBE_BACKOFF`` of it, until the choice drafts again. The probes of a batch
fall on the same step: the drafting round trip is paid up to the deepest draft of the batch, so probes
spread over the steps (one sequence's count each) made about 40% of the steps at 8 streams draft one
level deeper for the whole batch.

Drafts must expect to gain by a margin, not to break even: the seconds drafting adds over the step
without drafts count ``1 + margin + margin_per_seq * (sequences - 1)`` times (``DRAFT_MARGIN``,
``DRAFT_MARGIN_PER_SEQ``: 1.15 for one sequence, 1.71 for 8). The choice favours the sequences whose
noisy estimates look best, so near break-even it errs towards drafting; and a batch whose sequences
draft finishes them at different steps, its last steps thinned out, which a step's price does not
see. At 8 streams (`docs/bench/auto-margin-trace`) a full batch at fixed k=1 made 1.51x (held-out
math) and 1.39x (qa) the tokens of a step without drafts for 1.30x and 1.24x its time, +16% and +12%
per second; the workloads gained 3% and lost 2%: their steps averaged 10.8 and 9.7 tokens, not 12.1
and 11.1, as the batches thinned out (92-93 and 104 decode steps, where 85 and 92 would do). The
step's price includes the engine's other work (scheduling, acceptance: a running mean over decode
steps; 3.4-5.4 ms a step at 8 streams in that trace).

Estimates: the target's cost is a least-squares fit over forwards timed at warm-up, corrected online
by the running difference measured - predicted of decode steps; the drafter's cost is a running mean
per depth over decode steps (a prefill chunk in the step says nothing about drafting; a drafter
session's first ``COLD_ROUND_TRIPS`` round trips are left out), and per caught-up row over the round
trips that caught up; each sequence's rates are its recent evidence
(fading every step) over a prior, the rates of all sequences over their last 50 or so tests of
each position (which start from the heads' validation figures). A plain running average per
sequence stopped drafting after a few rejections and, since only drafting updates it, stayed stopped:
on synthetic acceptance at 0.25-0.5 it ran 7-10% below the best fixed length, where the fading
estimate stays within 3% (tests/test_draft_policy.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tandem_core.kv_cache import pads_queries

MAX_DEPTH = 4
_EMA = 0.2  # weight of a new observation in every running estimate
_ROW_FADE = 0.95  # what the catch-up sums keep per catch-up (about the last 20 count)
# a catch-up is spread over at most this many of the tokens the sequence may still generate: under
# load drafting stops long before a sequence ends (see ``_catch_up``)
CATCH_UP_HORIZON = 32
# a probe asks only sequences the drafter is at most this many rows behind on, so that each one's
# catch-up fits in one round trip with its own row (a step sends at most 256 rows). At 8 streams, probes
# of sequences that had deferred a whole prompt and a hundred steps made the drafter catch up 256 rows a
# step for 5-18 steps, 12-20 ms of drafting each (`docs/bench/attention-ab`). At 64, a sequence whose
# prompt was longer than 64 tokens was never probed unless it had drafted: after a workload of poor
# drafts, 4-stream Eagle translation (prompts of 56-103 tokens) verified drafts only in its 14 probe
# steps and took 258 steps, where k=1 took 178 (`docs/bench/workload-shift`). `python -m
# bench.policy_sim --seeds 4`, good phase: 0.88x of k=1's tokens per second at 64, 1.09x at 255
PROBE_MAX_BACKLOG = 255
# what the estimate shared by all sequences keeps per test of a position (about the last 50 tests count).
# At 0.995 (200) and a 2% share, after a workload of poor drafts a workload of good ones was mostly over
# before probes had moved it: `python -m bench.policy_sim` (probes priced as ``_probing`` prices them),
# 0.80x of k=1's tokens per second in the good phase; at 0.98 and 4%, 1.09x
OVERALL_FADING = 0.98
PROBE_SHARE = 0.04  # probes may cost up to this share of the time beyond what they are expected to return
# a probe after which the choice still drafts for no sequence halves the share the next ones earn, down to
# this fraction of it; one after which some sequence drafts restores it (``_probe_outcome``)
PROBE_BACKOFF = 1 / 8
# probes earn their share in proportion to what drafting could gain at the step's prices were drafts as
# good as the heads' validation figures (or the shared estimate, where better): the full share from a
# gain of PROBE_HOPE_FULL on, none where even such drafts would not clear the margin (``_hope``). At 8
# streams on this CPU even drafts as good as the heads' validation figures would not be chosen (a
# vanilla target's measured costs: hope 0.89-0.96 for 8 sequences, 1.08-1.13 for 4; `python
# docs/bench/workload-shift/probe_hope.py`): probes there could find only drafts the choice would not
# use, and Eagle `auto` ran at 0.980-0.998x of no speculation by category, verifying drafts in 1-12
# steps of each workload, most of them probes (`docs/bench/workload-shift`, v4). With this gate (v5):
# 1.003x overall at 8 streams (vanilla 1.008x, v4 0.990x), rag and summarization 1.010-1.018x
PROBE_HOPE_FULL = 0.1
# the catch-up sums start from this many rows at ROW_PRIOR_S seconds each (``DraftCost.with_row_prior``):
# from zero, one slow round trip that caught up on 9 rows set 2.6 ms a row (vanilla, 4 streams; about
# 0.06 is usual), and a depth first seen in probes that caught up was priced at its whole round trip,
# where it had been shifted by a cold first round trip of a deeper draft: 24.7 ms for one draft, so
# vanilla `auto` stopped drafting in 4-stream math where k=1 gains (`docs/bench/workload-shift`)
ROW_PRIOR_ROWS = 256
ROW_PRIOR_S = 1e-4
# drafting round trips of a drafter session left out of its price: the first ones are cold (the draft
# service's lazy start, kernels built for new shapes), 2-4x a warm one. Vanilla's first at 4 streams took
# 29.2 ms for two drafts (about 9 warm) and, its depth's first sighting, moved every depth not yet seen
# by as much: `auto` stopped drafting in 4-stream math, where it had gained 1.11x, and probes, priced at
# those seconds, never came (`docs/bench/workload-shift`, jn)
COLD_ROUND_TRIPS = 4
CALIBRATION_ROUNDS = 4  # times the calibration grid runs, one forward of each shape a round (the fastest counts)
# drafting's added seconds count 1 + DRAFT_MARGIN + DRAFT_MARGIN_PER_SEQ * (sequences - 1) times what they
# cost: the choice must expect to gain by a margin, not break even (see the module's docstring)
DRAFT_MARGIN = 0.15
DRAFT_MARGIN_PER_SEQ = 0.08
# --draft-choice: one count for every sequence of a step (the default), or each sequence its own
DRAFT_CHOICES = ("common", "each")


@dataclass(frozen=True)
class StepShape:
    """What a target forward's cost depends on, summed over the step's sequences."""

    seqs: int = 0
    tokens: int = 0  # new tokens
    kv: int = 0  # cached tokens the sequences attend to
    pairs: int = 0  # query-key pairs of attention: sum of queries x (cached + queries)
    verifying: int = 0  # sequences attending with more than one query (their attention needs a causal mask)
    split: bool = False  # attention ran one call per sequence, not one batched call (``runs_dense``)

    @classmethod
    def of(cls, starts: list[int], q_lens: list[int], split: bool = False) -> StepShape:
        """``starts[i]``: cached tokens of sequence i; ``q_lens[i]``: its new tokens. In one batched
        call (not ``split``) every sequence attends with as many queries as the longest has new tokens
        (``kv_cache.DenseStep``): the first draft of a step widens every sequence's attention (8
        sequences at 300 cached tokens: 45.5 ms none, 50.0 one verifying a draft, 56.3 half of them;
        `docs/benchmarks.md`)."""
        queries = q_lens if split or not q_lens else [max(q_lens)] * len(q_lens)
        return cls(
            seqs=len(q_lens),
            tokens=sum(q_lens),
            kv=sum(starts),
            pairs=sum(q * (s + q) for s, q in zip(starts, queries, strict=True)),
            verifying=sum(q > 1 for q in queries),
            split=split,
        )

    def features(self, min_rows: int = 1) -> tuple[float, ...]:  # [9]: 1, then StepCost's coefficient order
        """``min_rows``: the matmuls run on at least this many rows (kernels.MIN_ROWS): fewer tokens cost as many."""
        split_seqs, split_kv, split_verifying = (self.seqs, self.kv, self.verifying) if self.split else (0, 0, 0)
        rows = max(self.tokens, min_rows) if self.tokens else 0
        return (1.0, self.seqs, rows, self.kv, self.pairs, self.verifying, split_seqs, split_kv, split_verifying)


@dataclass
class StepCost:
    """Seconds of one target forward: a linear function of the step's ``StepShape``, plus ``offset``.

    ``base + per_seq * seqs + per_token * tokens + per_kv * kv + per_pair * pairs + per_verifying *
    verifying + (per_split_seq * seqs + per_split_kv * kv + per_split_verifying * verifying, where
    split) + offset``. The pair and verifying terms price what attention adds for a sequence that
    verifies drafts over a long context: without them the first draft of 8 sequences at about 200 cached
    tokens was priced at 21 ms where it cost 31 (`docs/benchmarks.md`). The split terms price attention
    run one call per sequence (slots out of order, contexts far apart, or padded queries that would not
    pay), dearer again for a sequence that verifies drafts there (a causal mask per call). Without that
    term calibration's split samples inflated ``per_verifying``: one more draft for each of 8 sequences
    at 100 cached tokens (one batched call) cost 12.8 ms and was priced 22.7, with it 15.1 (`python -m
    bench.step_cost_fit`, `docs/benchmarks.md`). ``offset``: measured minus predicted on decode steps,
    running; additive, so the price of one more token stays what calibration measured (a factor here
    once turned long contexts into dearer drafts). ``predict`` never goes below a tenth of ``base``, so
    a large negative offset cannot make a step look free. ``min_rows``: the target's matmuls pad a step
    of fewer tokens up to it (``kernels.MIN_ROWS`` with oneDNN), so one sequence verifying 0-3 drafts
    pays for 4 rows of matmul either way.
    """

    base: float = 0.05
    per_seq: float = 0.0
    per_token: float = 0.002
    per_kv: float = 0.0
    per_pair: float = 0.0
    per_verifying: float = 0.0
    per_split_seq: float = 0.0
    per_split_kv: float = 0.0
    per_split_verifying: float = 0.0
    offset: float = 0.0
    min_rows: int = 1

    @property
    def coefficients(self) -> tuple[float, ...]:  # [9] in StepShape.features order
        return (
            self.base, self.per_seq, self.per_token, self.per_kv, self.per_pair, self.per_verifying,
            self.per_split_seq, self.per_split_kv, self.per_split_verifying,
        )  # fmt: skip

    def predict(self, shape: StepShape) -> float:
        return self.floor(self._model(shape) + self.offset)

    def floor(self, seconds: float) -> float:
        return max(self.base * 0.1, seconds)

    def observe(self, shape: StepShape, seconds: float) -> None:
        if seconds > 0:
            self.offset += _EMA * (seconds - self._model(shape) - self.offset)

    def seq_costs(self, context: int, max_drafts: int, split: bool) -> list[float]:
        """[max_drafts + 1] what one sequence with ``context`` cached tokens adds to a step, by drafts,
        with the step's attention ``split`` per sequence or batched."""
        # the model's terms for one sequence of q = 1 + n new tokens, written out: ``choose`` needs them
        # for every sequence and draft count each step (tests check them against ``_model``)
        fixed, verifying = self.per_seq + self.per_kv * context, self.per_verifying
        if split:
            fixed += self.per_split_seq + self.per_split_kv * context
            verifying += self.per_split_verifying
        return [
            fixed + self.per_token * q + self.per_pair * q * (context + q) + (verifying if q > 1 else 0.0)
            for q in range(1, max_drafts + 2)
        ]

    def padding(self, tokens: int) -> float:
        """What the rows a step of ``tokens`` new tokens is padded with cost (0 from ``min_rows`` tokens on)."""
        return self.per_token * max(0, self.min_rows - tokens)

    def _model(self, shape: StepShape, padded: bool = True) -> float:
        features = shape.features(self.min_rows if padded else 1)
        return sum(c * f for c, f in zip(self.coefficients, features, strict=True))

    @classmethod
    def fit(cls, samples: list[tuple[StepShape, float]], min_rows: int = 1, split_verifying: bool = True) -> StepCost:
        """Least squares over (shape, seconds), each shape's tokens padded to ``min_rows``; coefficients >= 0.
        Each feature is scaled to at most 1 first and a feature no sample has (no split samples with one
        slot) gets 0. ``split_verifying=False`` leaves that term out, as before it existed
        (``bench.step_cost_fit``): unscaled, a left-out column made the solver drop the constant term."""
        import torch

        x = torch.tensor([shape.features(min_rows) for shape, _ in samples], dtype=torch.float64)
        if not split_verifying:
            x[:, -1] = 0.0
        y = torch.tensor([[sec] for _, sec in samples], dtype=torch.float64)
        scale = x.abs().amax(dim=0)
        used = scale > 0
        coef = torch.zeros(x.shape[1], dtype=torch.float64)
        coef[used] = torch.linalg.lstsq(x[:, used] / scale[used], y).solution[:, 0] / scale[used]
        coef = coef.clamp(min=0).tolist()
        if coef[0] == 0.0:  # a step always costs something: keep the cheapest sample as the floor
            coef[0] = min(sec for _, sec in samples)
        return cls(*coef, min_rows=min_rows)


@dataclass
class DraftCost:
    """Seconds of a drafting round trip by the deepest draft asked (0: only recording the step), plus
    ``per_row`` for each past row the drafter catches up on first.

    A sequence that verifies no drafts in a step defers that step's row (the drafter is not asked), and
    the drafter takes every deferred row before it drafts for the sequence again: a step without drafts
    saves less than the round trip, since its row is paid for later. Priced as free, this made a
    sequence at the break-even point turn drafts on and off and pay more per drafting step than one
    that never stopped (held-out summarization at batch 1, Eagle: 10.8 ms per drafting step against 7.1
    at fixed k=1, and 0.95x of no speculation). ``per_row`` is the ratio of two running sums, the
    seconds catch-ups added and the rows they took: a catch-up of 2-3 rows adds less than a round trip
    varies, and the mean of per-catch-up ratios clipped at 0 (as before) is biased high there. Every
    sequence that does not draft is charged a row, so at 8 streams 0.5 ms a row makes the step without
    drafts 4 ms dearer, enough to tip a batch near break-even into drafting. The sums keep about the
    last 20 catch-ups (``_ROW_FADE``): vanilla's catch-ups cost 8-76 ms for 256 rows, by how many
    depths run, and kept for about five, a run of cheap ones drove the sum negative (``per_row`` 0 in
    model info: no catch-up priced) on a target whose catch-ups had added about 0.06 ms a row over
    the round trip, 26,151 rows over 12 workloads (`docs/bench/catch-up-ab`).
    """

    by_depth: list[float] = field(default_factory=lambda: [0.002 + 0.003 * d for d in range(MAX_DEPTH + 1)])
    seen: list[bool] = field(default_factory=lambda: [False] * (MAX_DEPTH + 1))
    per_row: float = 0.0
    row_seconds: float = 0.0  # running sum of what catch-ups added over a plain round trip (may be < 0)
    row_count: float = 0.0  # running sum of the rows they caught up on, faded alike
    session: int = 0  # the drafter session the round trips come from (its first ones are cold)
    cold_left: int = COLD_ROUND_TRIPS  # drafting round trips of this session still to leave out

    def predict(self, depth: int) -> float:
        return self.by_depth[depth]

    @classmethod
    def with_row_prior(cls) -> DraftCost:
        """Running sums that start from ``ROW_PRIOR_ROWS`` rows at ``ROW_PRIOR_S`` each (see ``ROW_PRIOR_ROWS``)."""
        return cls(row_seconds=ROW_PRIOR_ROWS * ROW_PRIOR_S, row_count=ROW_PRIOR_ROWS)

    def observe(self, depth: int, seconds: float, rows: int = 0, session: int = 0) -> None:
        """A round trip up to ``depth`` that also caught up on ``rows`` deferred rows, in drafter
        ``session`` (a new one starts cold: its first ``COLD_ROUND_TRIPS`` that draft are left out;
        a step that only records, depth 0, says nothing of the session)."""
        if depth > 0 and session != self.session:
            self.session, self.cold_left = session, COLD_ROUND_TRIPS
        if depth > 0 and self.cold_left > 0:
            self.cold_left -= 1
            return
        if rows > 0 and self.seen[depth]:  # what the rows added over a plain round trip of that depth
            self.row_seconds = _ROW_FADE * self.row_seconds + seconds - self.by_depth[depth]
            self.row_count = _ROW_FADE * self.row_count + rows
            self.per_row = max(0.0, self.row_seconds / self.row_count)
            return
        if rows > 0:  # a depth first seen catching up (a probe after steps without drafts): less its rows
            seconds = max(0.0, seconds - rows * (self.row_seconds / self.row_count if self.row_count > 0 else 0.0))
        if self.seen[depth]:
            self.by_depth[depth] += _EMA * (seconds - self.by_depth[depth])
            return
        shift = seconds - self.by_depth[depth]  # first sighting: unseen depths move along with it
        self.seen[depth] = True
        for d in range(MAX_DEPTH + 1):
            if d == depth:
                self.by_depth[d] = seconds
            elif not self.seen[d]:
                self.by_depth[d] = max(0.0, self.by_depth[d] + shift)


@dataclass
class Acceptance:
    """Conditional acceptance rate of each draft position: fading evidence over a prior.

    ``rate_j = (hits_j + weight * prior_j) / (tries_j + weight)``. A sequence's own estimate fades every
    step (``fade()``), so a sequence that stopped drafting drifts back to the prior and drafts again,
    instead of staying stuck on the few rejections that stopped it (its estimate only moves when it
    drafts). The estimate shared by all sequences fades per test instead (``per_try``): a deep position
    is tested only after every draft before it passed, and fading it every step kept it near its prior,
    the heads' validation figure (0.66 given the first passed), where held-out summarization at batch 1
    accepted 12 of the 153 second drafts it asked.
    """

    prior: list[float] | Acceptance  # [MAX_DEPTH] rates with no evidence, or a shared live estimate
    weight: float = 4.0  # the prior counts as this many observations of each position
    fading: float = 0.9  # evidence kept per step (or per test, with per_try): about the last 10 count
    per_try: bool = False  # fade each position's evidence when it is tested, not every step
    hits: list[float] = field(default_factory=lambda: [0.0] * MAX_DEPTH)
    tries: list[float] = field(default_factory=lambda: [0.0] * MAX_DEPTH)

    def rate(self, j: int) -> float:
        return (self.hits[j] + self.weight * self.prior_rate(j)) / (self.tries[j] + self.weight)

    def prior_rate(self, j: int) -> float:
        return self.prior.rate(j) if isinstance(self.prior, Acceptance) else self.prior[j]

    @property
    def rates(self) -> list[float]:
        return [self.rate(j) for j in range(MAX_DEPTH)]

    def observe(self, drafted: int, accepted: int) -> None:
        """One verification: ``drafted`` drafts, the first ``accepted`` of them accepted."""
        keep = self.fading if self.per_try else 1.0
        for j in range(min(drafted, accepted + 1)):  # positions actually tested
            self.tries[j] = self.tries[j] * keep + 1.0
            self.hits[j] = self.hits[j] * keep + float(j < accepted)

    def fade(self) -> None:
        if not self.per_try:
            self.hits = [h * self.fading for h in self.hits]
            self.tries = [t * self.fading for t in self.tries]

    def expected_tokens(self, n: int) -> float:
        return self.expected_tokens_upto(n)[n]

    def expected_tokens_upto(self, n: int) -> list[float]:
        """[n + 1] expected tokens of verifying 0..n drafts."""
        return expected_tokens([self.rate(j) for j in range(n)])


def expected_tokens(rates: list[float]) -> list[float]:
    """[len(rates) + 1] expected tokens of verifying 0..len(rates) drafts, ``rates[j]`` draft j's
    conditional acceptance rate: E(n) = 1 + a_0 + a_0 a_1 + ... + a_0 ... a_{n-1}."""
    out, run = [1.0], 1.0
    for r in rates:
        run *= r
        out.append(out[-1] + run)
    return out


@dataclass(frozen=True)
class Prices:
    """A target forward's predicted seconds by each sequence's drafts, for one choice."""

    fixed: float  # base, online offset and the step's other work
    by_drafts: list[list[float]]  # [num_seqs][cap + 1] what sequence i adds with n drafts, attention split
    dense: list[list[float]] | None = None  # [num_seqs][max cap + 1] the same in one batched call, or None
    deferred_row: float = 0.0  # drafter seconds a sequence that could draft and does not owes for later
    padding: Callable[[int], float] = lambda tokens: 0.0  # seconds of the rows a step of that many tokens pads
    other_tokens: int = 0  # new tokens of the step's other work (prefill chunks)
    per_token: float = 0.0  # seconds of one new token's rows of matmul
    contexts: list[int] = field(default_factory=list)  # [num_seqs] cached tokens (where ``dense``)
    plain: float | None = None  # seconds of the step where no sequence the policy chooses for drafts
    margin: float = 0.0  # what drafting's seconds over ``plain`` count extra (0.15: 1.15 times)
    catch_up: list[list[float]] | None = None  # [num_seqs][cap + 1] this step's share of a backlog's catch-up

    def target(self, drafts: list[int]) -> float:
        """The forward's seconds, unfloored. In one batched call (``dense``, unless padding the queries
        would not pay: ``kv_cache.pads_queries``) every sequence attends as if it verified the step's
        most drafts, while its matmuls run only its own tokens."""
        tokens = self.other_tokens + sum(1 + n for n in drafts)
        if self.dense is None or not pads_queries(self.contexts, [1 + n for n in drafts]):
            body = sum(by[n] for by, n in zip(self.by_drafts, drafts))
        else:
            top = max(drafts, default=0)
            body = sum(by[top] for by in self.dense) - self.per_token * sum(top - n for n in drafts)
        return self.fixed + body + self.padding(tokens)

    def caught_up(self, drafts: list[int]) -> float:
        """This step's share of the catch-ups that drafting makes the drafter do (see ``_catch_up``)."""
        return sum(c[n] for c, n in zip(self.catch_up, drafts)) if self.catch_up else 0.0

    def deferred(self, drafts: list[int]) -> float:
        """What the rows this step defers (sequences that could draft and do not) cost when caught up on."""
        return self.deferred_row * sum(n == 0 and len(by) > 1 for by, n in zip(self.by_drafts, drafts))


@dataclass
class PolicyChoice:
    drafts: list[int]  # [num_seqs] drafts each sequence verifies next step
    probed: list[bool]  # [num_seqs] True where a probe added one draft to the choice
    expected: list[float] | None = None  # [num_seqs] tokens each is expected to take next step (auto only)


class DraftPolicy:
    """Per-sequence, per-step draft counts for a batch (``auto``), or the caps themselves (``fixed``)."""

    def __init__(self, auto: bool, step_cost: StepCost | None = None, probe_every: int = 16,
                 prior: list[float] | None = None, probe_share: float = PROBE_SHARE,
                 margin: float = DRAFT_MARGIN, margin_per_seq: float = DRAFT_MARGIN_PER_SEQ,
                 common: bool = True):  # fmt: skip
        self.auto = auto
        self.common = common  # every chosen sequence verifies the same number of drafts (``_ascend``)
        self.screen = True  # skip the ascent where no sequence drafting alone could pay (``_alone_none_pays``)
        self.probe_share = probe_share
        self.margin = margin
        self.margin_per_seq = margin_per_seq
        self.other = 0.0  # running seconds of a decode step's work besides the forward and drafting
        self.step_cost = step_cost or StepCost()
        self.draft_cost = DraftCost.with_row_prior()
        self.probe_every = probe_every
        # all sequences together, about their last 50 tests of each position: every sequence's prior
        self.overall = Acceptance(list(prior or [0.5] * MAX_DEPTH), weight=4.0, fading=OVERALL_FADING, per_try=True)
        self._seqs: dict[str, Acceptance] = {}
        self._since_probe = 0  # choices made since the last probe (probes are at least probe_every apart)
        self._credit = 0.0  # seconds probes may still spend: probe_share of every step's predicted seconds
        self._share_scale = 1.0  # of probe_share, halved by each probe that found nothing (PROBE_BACKOFF)
        self._probe_pending = False  # the last step probed: the next choice says whether it found drafts
        self._owed: set[str] = set()  # asked for drafts, got none: they ask again next step
        self._held: dict[str, int] = {}  # tokens of each sequence the drafter holds (noted after it asked)
        self._asked: set[str] = set()  # asked for drafts in the last choice: the drafter holds all they cached

    def use_prior(self, rates: list[float]) -> None:
        """Start from these conditional rates (e.g. the heads' validation figures) where no evidence is."""
        if rates:
            padded = [min(1.0, max(0.0, float(r))) for r in rates[:MAX_DEPTH]]
            self.overall.prior = padded + [padded[-1]] * (MAX_DEPTH - len(padded))

    # ---- observations -----------------------------------------------------------------------------------
    def observe_verification(self, request_id: str, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.overall.observe(drafted, accepted)
        self._estimate(request_id).observe(drafted, accepted)

    def observe_step(self, shape: StepShape, seconds: float) -> None:
        """A decode step's forward (steps carrying prefill chunks are not passed)."""
        self.step_cost.observe(shape, seconds)

    def observe_other(self, seconds: float) -> None:
        """A decode step's other work: scheduling, acceptance, bookkeeping (``StepTimer.other``)."""
        self.other += _EMA * (seconds - self.other)

    def observe_draft(self, depth: int, seconds: float, caught_up_rows: int = 0, session: int = 0) -> None:
        self.draft_cost.observe(min(depth, MAX_DEPTH), seconds, caught_up_rows, session)

    def unanswered(self, request_id: str) -> None:
        """It asked for drafts and got none (the drafter was still catching up on its past, which is
        paced per step): it asks again next step instead of waiting for the next probe."""
        self._owed.add(request_id)

    def forget(self, request_id: str) -> None:
        self._seqs.pop(request_id, None)
        self._owed.discard(request_id)
        self._held.pop(request_id, None)
        self._asked.discard(request_id)

    # ---- the choice -------------------------------------------------------------------------------------
    def choose(
        self,
        request_ids: list[str],
        caps: list[int],
        auto: list[bool] | None = None,
        contexts: list[int] | None = None,
        other: StepShape | None = None,
        dense_ok: bool = False,
        remaining: list[int] | None = None,
        joining: list[int] | None = None,
    ) -> PolicyChoice:
        """Drafts per sequence for the next step.

        ``auto[i]``: sequence i's length is chosen (default: the policy's mode); the others verify their
        cap and only weigh on the batch's cost. ``contexts[i]``: tokens sequence i has cached (default
        0); ``other``: the rest of the step (prefill chunks); ``dense_ok``: the step's attention runs as
        one batched call if every sequence verifies as many drafts (its slots are consecutive);
        ``remaining[i]``: tokens sequence i may still generate (default: no catch-up is priced);
        ``joining``: the prompt lengths of the sequences the next steps prefill (``Scheduler.joining``):
        while a batch fills, a sequence that never drafted waits for it (``_wait_for_batch``).
        """
        auto = [self.auto] * len(caps) if auto is None else auto
        if not any(auto):
            self._asked = {rid for rid, cap in zip(request_ids, caps) if cap}
            return PolicyChoice(list(caps), [False] * len(caps))
        contexts = contexts or [0] * len(caps)
        self._note_held(request_ids, contexts)
        if joining:
            caps = self._wait_for_batch(request_ids, caps, auto, contexts, joining)
        estimates = [self._estimate(r) for r in request_ids]
        self.overall.fade()
        for e, a in zip(estimates, auto):
            if a:
                e.fade()
        table = [e.expected_tokens_upto(cap) for e, cap in zip(estimates, caps)]  # [num_seqs][cap + 1]
        backlog = [b if a else 0 for b, a in zip(self._backlog(request_ids, contexts), auto)]  # fixed: never behind
        prices = self.prices(caps, contexts, other, dense_ok)
        per_row = self.draft_cost.per_row
        if remaining and per_row > 0 and any(backlog):  # else every share is 0: keep the ascent's prices lean
            prices = replace(prices, catch_up=_catch_up(table, backlog, remaining, per_row))
        prices = self._against_none(prices, caps, auto)
        drafts = self._ascend(table, caps, auto, prices)
        self._probe_outcome(drafts)
        can_probe = [
            a and n < cap and (n > 0 or b <= PROBE_MAX_BACKLOG) for a, n, cap, b in zip(auto, drafts, caps, backlog)
        ]
        behind = sum(b for b, n, p in zip(backlog, drafts, can_probe) if p and n == 0)  # drafting ones are not
        probing = self._probing(table, drafts, can_probe, prices, behind, auto)
        owed = [rid in self._owed for rid in request_ids]
        self._owed.clear()
        probed = [
            a and n < cap and ((probing and p) or o) for a, n, cap, p, o in zip(auto, drafts, caps, can_probe, owed)
        ]
        final = [n + p for n, p in zip(drafts, probed)]
        self._asked = {rid for rid, n in zip(request_ids, final) if n}
        return PolicyChoice(final, probed, [by[n] for by, n in zip(table, final)])

    def _wait_for_batch(
        self, request_ids: list[str], caps: list[int], auto: list[bool], contexts: list[int], joining: list[int]
    ) -> list[int]:
        """[num_seqs] the caps, 0 for every sequence that never asked for drafts where, once the
        ``joining`` sequences decode beside these, not even drafts as good as the heads' validation
        figures would clear the margin (``_hope`` of that batch at most 1).

        Priced as it is now, a batch still filling is narrow and drafting pays: the first sequences
        of a workload draft beside the others' prefill chunks, and the drafter first catches up on
        each one's whole prompt, for a few steps of drafts before the full batch stops them. At 8
        streams of mt_bench a vanilla target drafted 20-31 ms a step in the 4 steps the batch took to
        fill, and ran at 0.948-0.973x of no speculation in three runs (`docs/bench/fill-wait`).
        Sequences that already draft go on (their prompts are paid for), and where the full batch
        could gain (4 streams on this CPU) nothing changes. Pricing the filling batch as it will be
        instead (tried) held back every sequence: the 4-stream rag ones then met the full batch
        600-800 rows behind, too far for probes, and stopped drafting where it gains 1.15x
        (`docs/bench/workload-shift`, jn)."""
        new = [a and cap > 0 and rid not in self._held for rid, a, cap in zip(request_ids, auto, caps)]
        if not any(new):
            return caps
        full_caps = caps + [max(caps)] * len(joining)
        full_auto = auto + [True] * len(joining)
        prices = self._against_none(self.prices(full_caps, contexts + joining), full_caps, full_auto)
        none = [0 if a else cap for a, cap in zip(full_auto, full_caps)]
        if self._hope(none, full_auto, prices) > 1.0:
            return caps
        return [0 if n else cap for n, cap in zip(new, caps)]

    def _against_none(self, prices: Prices, caps: list[int], auto: list[bool]) -> Prices:
        """``prices`` with ``plain``, the step where no chosen sequence drafts, and the batch's margin."""
        plain = self._seconds([0 if a else cap for a, cap in zip(auto, caps)], prices)
        return replace(prices, plain=plain, margin=self.margin + self.margin_per_seq * (len(caps) - 1))

    def _note_held(self, request_ids: list[str], contexts: list[int]) -> None:
        """Sequences that asked for drafts last choice sent the drafter all they had cached since."""
        for rid, ctx in zip(request_ids, contexts):
            if rid in self._asked:
                self._held[rid] = ctx

    def _backlog(self, request_ids: list[str], contexts: list[int]) -> list[int]:
        """[num_seqs] rows the drafter would first catch up on if each sequence asked for drafts now: all
        it cached since it last asked (its prompt too, when it never did), less the step's own row."""
        return [max(0, ctx - self._held.get(rid, 0) - 1) for rid, ctx in zip(request_ids, contexts)]

    def _probing(
        self, table: list[list[float]], drafts, can_probe, prices: Prices, backlog: int, auto: list[bool]
    ) -> bool:
        """Whether this step probes: at least ``probe_every`` steps after the last probe, and once the
        credit (``probe_share`` of every step's predicted seconds) covers the probe's price: its extra
        seconds, plus the drafter catching up on the ``backlog`` rows its sequences deferred since they
        last drafted, less what its expected extra tokens are worth at this step's seconds per token.
        A probe that pays for itself comes every ``probe_every`` steps; at 8 streams of poor drafts one
        cost about 60 ms over two steps of 96, and probes every 16 steps spent about 4% of the time
        (`docs/benchmarks.md`). The catch-up is the probe's to pay: a sequence that never drafts again
        never needs its rows (without it, probes at 8 streams caught up on 942-1,518 rows a workload,
        0.08-0.20 s, beyond their share: `docs/bench/draft-length-v14`)."""
        seconds = self._seconds(drafts, prices)
        cap = 4 * self.probe_every * self.probe_share * seconds  # backed off, probes come rarer, as dear
        worth = 1.0 if any(drafts) else min(1.0, max(0.0, self._hope(drafts, auto, prices) - 1.0) / PROBE_HOPE_FULL)
        self._credit = min(self._credit + self.probe_share * self._share_scale * worth * seconds, cap)
        self._since_probe += 1
        if self._since_probe < self.probe_every or not any(can_probe):
            return False
        trial = [n + p for n, p in zip(drafts, can_probe)]
        gain = sum(by[t] - by[n] for by, n, t in zip(table, drafts, trial))
        per_token = seconds / max(1e-9, sum(by[n] for by, n in zip(table, drafts)))
        # the whole catch-up, in place of the share of it the trial step's price already carries
        catch_up = self.draft_cost.per_row * backlog - (prices.caught_up(trial) - prices.caught_up(drafts))
        # drafting's seconds count 1 + margin times, as in the choice; while the choice drafts for nobody
        # the probe pays them in full from its share (it is looking, not gaining). At 8 streams, priced
        # bare and less the tokens they were expected to take, probes looked free and came every
        # probe_every steps: Eagle `auto` ran at 0.976-0.995x of no speculation by category, a vanilla
        # target that never drafted at 1.010-1.026x (`docs/bench/workload-shift`, v2); with the margin
        # and still less those tokens, 0.972x in mt_bench and qa (v3)
        extra = (self._seconds(trial, prices) - seconds + catch_up) * (1.0 + prices.margin)
        price = max(0.0, extra - (gain * per_token if any(drafts) else 0.0))
        if price > self._credit:
            return False
        self._credit -= price
        self._since_probe = 0
        self._probe_pending = True
        return True

    def _hope(self, drafts: list[int], auto: list[bool], prices: Prices) -> float:
        """The best tokens per second of a step where every chosen sequence verifies the same number of
        drafts, over that of ``drafts``, were each position accepted at the better of the shared estimate
        and its prior (the heads' validation figures): what a probe could find that the choice would use."""
        caps = [len(by) - 1 for by in prices.by_drafts]
        top = max(caps, default=0)
        hopeful = expected_tokens([max(self.overall.rate(j), self.overall.prior_rate(j)) for j in range(top)])

        def rate(d: list[int]) -> float:
            return self._rate(sum(hopeful[n] for n in d), d, prices)

        return max((rate(_uniform(caps, auto, n)) for n in range(1, top + 1)), default=0.0) / rate(drafts)

    def _probe_outcome(self, drafts: list[int]) -> None:
        """Probes earn their full share while the choice drafts for some sequence; a probe after which it
        still drafts for none (its verifications are in the estimates by then) halves the share, down
        to ``PROBE_BACKOFF``: where drafting never pays (8 streams on a 2-core CPU), probes are pure cost."""
        if any(drafts):
            self._share_scale = 1.0
        elif self._probe_pending:
            self._share_scale = max(PROBE_BACKOFF, self._share_scale / 2)
        self._probe_pending = False

    def _seconds(self, drafts: list[int], prices: Prices) -> float:
        """Predicted seconds of a step where sequence i verifies ``drafts[i]``, drafting and deferred rows included."""
        target = self.step_cost.floor(prices.target(drafts))
        drafting = self.draft_cost.predict(max(drafts, default=0)) + prices.deferred(drafts) + prices.caught_up(drafts)
        return target + drafting + self.other

    def prices(
        self, caps: list[int], contexts: list[int] | None = None, other: StepShape | None = None, dense_ok: bool = False
    ) -> Prices:
        """The target forward's price of a step by each sequence's drafts (up to its cap)."""
        cost = self.step_cost
        fixed = cost.offset + (cost._model(other, padded=False) if other else cost.base)
        contexts = contexts or [0] * len(caps)
        split = [cost.seq_costs(ctx, cap, len(caps) > 1) for ctx, cap in zip(contexts, caps, strict=True)]
        dense = None
        if dense_ok and other is None:  # a prefill chunk in the step always splits it
            dense = [cost.seq_costs(ctx, max(caps, default=0), False) for ctx in contexts]
        other_tokens = other.tokens if other else 0
        return Prices(
            fixed, split, dense, self.draft_cost.per_row, cost.padding, other_tokens, cost.per_token, contexts
        )

    def throughput(self, estimates: list[Acceptance], drafts: list[int], prices: Prices | None = None) -> float:
        """Expected tokens per second of a step where sequence i verifies ``drafts[i]``; with ``prices.plain``
        the seconds drafting adds over it count ``1 + prices.margin`` times."""
        tokens = sum(e.expected_tokens(n) for e, n in zip(estimates, drafts))
        return self._rate(tokens, drafts, prices or self.prices(drafts))

    def _rate(self, tokens: float, drafts: list[int], prices: Prices) -> float:
        seconds = self._seconds(drafts, prices)
        if prices.plain is not None:
            seconds += prices.margin * max(0.0, seconds - prices.plain)
        return tokens / seconds

    def _ascend(self, table: list[list[float]], caps: list[int], auto: list[bool], prices: Prices) -> list[int]:
        """The best common length (every chosen sequence verifies the same ``n``, capped), and with
        ``common`` off, coordinate ascent over ``table`` (each sequence's expected tokens by drafts) from there.

        The drafting round trip is paid once per step for the whole batch, so from no drafts at all no
        single sequence may be able to pay for it alone while all of them together would: starting at
        the best ``n`` for every sequence (capped) keeps the ascent out of that local optimum.
        """

        seen: dict[tuple[int, ...], float] = {}  # the ascent revisits its current point once per sequence

        def rate(d: list[int]) -> float:
            key = tuple(d)
            if key not in seen:
                seen[key] = self._rate(sum(by[n] for by, n in zip(table, d)), d, prices)
            return seen[key]

        uniform = [_uniform(caps, auto, n) for n in range(max(caps, default=0) + 1)]
        drafts = max(uniform, key=lambda d: (rate(d), -sum(d)))
        if self.common:
            return drafts
        if self.screen and all(auto) and not any(drafts) and self._alone_none_pays(table, prices, rate(drafts)):
            return drafts  # what the ascent's first pass would find, without pricing every move
        for _ in range(3):
            changed = False
            for i, cap in enumerate(caps):
                if not auto[i]:
                    continue
                best = max(range(cap + 1), key=lambda n: (rate(drafts[:i] + [n] + drafts[i + 1 :]), -n))
                changed |= best != drafts[i]
                drafts[i] = best
            if not changed:
                break
        return drafts

    def _alone_none_pays(self, table: list[list[float]], prices: Prices, rate0: float) -> bool:
        """Whether no sequence drafting alone (any count, every other at 0) beats ``rate0``, the rate of
        the step without drafts: then the ascent's first pass, which tries exactly those moves, ends
        where it starts. A bound in O(sequences x cap), where the pass prices every move in
        O(sequences): a choice for 8 sequences took 0.39 ms without it and 0.17 with it, on every step
        where nothing drafts (`docs/bench/screen-ab/choose_time.py`).

        Each move is priced exactly but for the forward, bounded below by the cheaper of its two ways:
        one batched call (every sequence's attention widened to the move's queries) or one call per
        sequence; the bound must clear ``rate0`` by a relative 1e-9, so rounding cannot flip a choice."""
        n_seqs, cap = len(table), max(len(by) for by in table) - 1
        t0 = prices.target([0] * n_seqs)  # one batched call where ``dense``: every sequence verifies 0
        dense = [sum(by[n] for by in prices.dense) for n in range(cap + 1)] if prices.dense else None
        # the step without drafts runs batched, a step with one sequence drafting may run split
        to_split = sum(by[0] for by in prices.by_drafts) - dense[0] if dense else 0.0
        tokens = prices.other_tokens + n_seqs
        rest = prices.deferred([0] * n_seqs) - prices.deferred_row + self.other  # the mover defers nothing
        tokens0, plain = sum(by[0] for by in table), prices.plain
        for i, by in enumerate(table):
            for n in range(1, len(by)):
                grow = to_split + prices.by_drafts[i][n] - prices.by_drafts[i][0]
                if dense:
                    grow = min(grow, dense[n] - dense[0] - prices.per_token * (n_seqs - 1) * n)
                grow += prices.padding(tokens + n) - prices.padding(tokens)
                seconds = self.step_cost.floor(t0 + grow) + self.draft_cost.predict(n) + rest
                seconds += prices.catch_up[i][n] if prices.catch_up else 0.0
                if plain is not None:
                    seconds += prices.margin * max(0.0, seconds - plain)
                if seconds <= 0 or (tokens0 - by[0] + by[n]) / seconds >= rate0 * (1 - 1e-9):
                    return False
        return True

    def _estimate(self, request_id: str) -> Acceptance:
        est = self._seqs.get(request_id)
        if est is None:
            est = self._seqs[request_id] = Acceptance(self.overall)
        return est

    def describe(self) -> dict:
        """What model info shows."""
        c = self.step_cost
        return {
            "mode": "auto" if self.auto else "fixed",
            "choice": "common" if self.common else "each",
            "step_base_s": c.base + c.offset,
            "step_per_seq_s": c.per_seq,
            "step_per_token_s": c.per_token,
            "step_per_kv_token_s": c.per_kv,
            "step_per_pair_s": c.per_pair,
            "step_per_verifying_seq_s": c.per_verifying,
            "step_per_split_seq_s": c.per_split_seq,
            "step_per_split_kv_token_s": c.per_split_kv,
            "step_per_split_verifying_seq_s": c.per_split_verifying,
            "draft_s_by_depth": list(self.draft_cost.by_depth),
            "draft_s_per_caught_up_row": self.draft_cost.per_row,
            "step_other_s": self.other,
            "draft_margin": self.margin,
            "draft_margin_per_seq": self.margin_per_seq,
            "acceptance_overall": list(self.overall.rates),
        }


def _uniform(caps: list[int], auto: list[bool], n: int) -> list[int]:
    """[num_seqs] ``n`` drafts for every chosen sequence (capped), its cap for every other."""
    return [min(n, cap) if a else cap for a, cap in zip(auto, caps)]


def _catch_up(table: list[list[float]], backlog: list[int], remaining: list[int], per_row: float) -> list[list[float]]:
    """[num_seqs][cap + 1] the share of sequence i's catch-up a step with n drafts pays: the backlog's
    seconds spread over the tokens the sequence may still generate, charged per expected token.

    A sequence asking for drafts makes the drafter first take every row it deferred, its prompt
    included when it never drafted: at 8 streams of held-out rag prompts, vanilla `auto` spent 5.6-7.1
    ms a step drafting (its depths catching up on long prompts) and ran at 0.93x of no speculation
    (`docs/bench/event-post-ab`). Charged whole to one step, a long prompt would
    never draft, even at batch 1 where drafting pays; spread over what is left to generate, it
    weighs what drafting can still return against it, but only over the next ``CATCH_UP_HORIZON``
    tokens: under load a sequence that starts drafting seldom keeps at it for long, and spread over a
    whole answer a long prompt's catch-up priced next to nothing. At 8 streams the Eagle target asked
    for drafts in 19 decode steps with the horizon and in 68 without, among them a run of 23 steps
    catching up 256 rows each (`docs/bench/catch-up-horizon-ab`)."""
    out = []
    for by, rows, left in zip(table, backlog, remaining):
        per_token = per_row * rows / max(1, min(left, CATCH_UP_HORIZON))
        out.append([0.0] + [per_token * t for t in by[1:]])
    return out


def calibrate_step_cost(
    runner, max_seqs: int, max_q: int, contexts: tuple[int, ...] = (128, 1024), rounds: int = CALIBRATION_ROUNDS
) -> StepCost:
    """``StepCost`` fitted to ``calibration_samples``, the matmuls padded as the runner's kernels pad them."""
    from tandem_core.kernels import MIN_ROWS

    samples = calibration_samples(runner, max_seqs, max_q, contexts, rounds)
    return StepCost.fit(samples, MIN_ROWS if runner.kernels == "onednn" else 1)


def calibration_samples(
    runner, max_seqs: int, max_q: int, contexts: tuple[int, ...] = (128, 1024), rounds: int = CALIBRATION_ROUNDS
) -> list[tuple[StepShape, float]]:
    """Time target forwards over empty slots for a grid of (sequences, new tokens, context).

    Each shape of several sequences runs twice: over consecutive slots (attention in one batched call, as
    a step where every sequence verifies as many drafts) and over the same slots reversed (one call per
    sequence, as a step where they verify different numbers). The grid runs ``rounds`` times, one
    forward of each shape per round, and each shape keeps its fastest: on this shared 2-core machine
    single forwards vary by 10-20%, and another process busy for a few seconds (a draft service
    warming up beside the target) slows whatever runs then. Timed as the fastest of three forwards in a
    row instead, a burst hit some shapes three times and the rest never: beside a process busy 3 s of
    every 8, the fitted price of one more token came out 1.1-10.0 ms (now 1.2-1.9; `docs/bench/calibration`)."""
    import torch

    from tandem_core.kv_cache import runs_dense
    from target_service.model_runner import ForwardBatch

    seqs_grid = sorted({1, max(1, max_seqs // 2), max_seqs})
    longest = runner.cache.shape.max_seq_len - max_q
    grid = []
    for context in sorted({max(0, min(c, longest)) for c in contexts}):
        for seqs in seqs_grid:
            for q in sorted({1, min(2, max_q), max_q}):
                for slots in _slot_orders(seqs):
                    batch = ForwardBatch(
                        input_ids=torch.zeros(seqs * q, dtype=torch.long),
                        slots=slots,
                        starts=[context] * seqs,
                        q_lens=[q] * seqs,
                        logit_rows=torch.arange(seqs * q),
                    )
                    shape = StepShape.of(batch.starts, batch.q_lens, not runs_dense(slots, batch.starts, batch.q_lens))
                    grid.append((shape, batch))
    fastest = [float("inf")] * len(grid)
    for _ in range(rounds):
        for i, (_, batch) in enumerate(grid):
            fastest[i] = min(fastest[i], _timed(runner, batch))
    return [(shape, seconds) for (shape, _), seconds in zip(grid, fastest, strict=True)]


def _timed(runner, batch) -> float:
    import time

    t0 = time.perf_counter()
    runner.forward(batch)
    return time.perf_counter() - t0


def _slot_orders(seqs: int) -> list[list[int]]:
    """Consecutive slots (one batched attention call) and, for several sequences, reversed (one call each)."""
    ordered = list(range(seqs))
    return [ordered, ordered[::-1]] if seqs > 1 else [ordered]
