"""Aggregate request records into the benchmark's figures, per configuration, concurrency and category."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from bench.records import RequestRecord

OVERALL = "overall"


@dataclass(frozen=True)
class Summary:
    config: str
    concurrency: int
    category: str
    requests: int
    tokens: int
    tok_s: float  # tokens / seconds (batch 1: summed request time; concurrent: wall time of the run)
    mean_acceptance_length: float  # tokens per verification step; 0 when the runner has no steps
    acceptance_per_position: list[float]  # [k] accepted_j / drafted_j
    ttft_p50_s: float
    tpot_p50_s: float
    itl_p50_s: float
    itl_p90_s: float
    e2e_p50_s: float
    e2e_p90_s: float
    e2e_p99_s: float
    speedup: float = 0.0  # tok_s over the baseline's tok_s (same concurrency and category)
    speedup_median: float = 0.0  # batch 1: median of per-prompt e2e ratios baseline / this; concurrent:
    # median of per-round tok/s ratios this / baseline (over the category's rounds, or every category's)
    speedup_min: float = 0.0  # concurrent: the lowest of those per-round ratios

    def as_dict(self) -> dict:
        return asdict(self)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo, hi = int(pos), min(int(pos) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(records: list[RequestRecord], wall_s: float | None = None) -> dict:
    """Figures of one group of records (same config and concurrency, any category)."""
    steps = sum(r.steps for r in records)
    k = max((len(r.drafted_per_position) for r in records), default=0)
    drafted, accepted = [0] * k, [0] * k
    for r in records:
        for j, (d, a) in enumerate(zip(r.drafted_per_position, r.accepted_per_position)):
            drafted[j] += d
            accepted[j] += a
    tokens = sum(r.tokens for r in records)
    seconds = wall_s if wall_s is not None else sum(r.e2e_s for r in records)
    itl = [g for r in records for g in r.itl_per_token()]
    e2e = [r.e2e_s for r in records]
    return {
        "requests": len(records),
        "tokens": tokens,
        "tok_s": tokens / seconds if seconds else 0.0,
        "mean_acceptance_length": (sum(accepted) + steps) / steps if steps else 0.0,
        "acceptance_per_position": [a / d if d else 0.0 for a, d in zip(accepted, drafted)],
        "ttft_p50_s": percentile([r.ttft_s for r in records], 50),
        "tpot_p50_s": percentile([r.tpot_s for r in records], 50),
        "itl_p50_s": percentile(itl, 50),
        "itl_p90_s": percentile(itl, 90),
        "e2e_p50_s": percentile(e2e, 50),
        "e2e_p90_s": percentile(e2e, 90),
        "e2e_p99_s": percentile(e2e, 99),
    }


def summaries(
    records: list[RequestRecord], walls: dict[tuple, float], baseline: str, rates: dict[tuple, float] | None = None
) -> list[Summary]:
    """One Summary per (config, concurrency, category) plus an "overall" row per (config, concurrency).

    Concurrent runs use wall time for tok/s: ``walls[(config, concurrency)]`` overall and
    ``walls[(config, concurrency, category)]`` per category where given (else summed request time);
    ``rates[(config, concurrency, category, round)]`` (tok/s of each round) give the paired ratios.
    """
    groups: dict[tuple[str, int, str], list[RequestRecord]] = {}
    for r in records:
        groups.setdefault((r.config, r.concurrency, r.category), []).append(r)
        groups.setdefault((r.config, r.concurrency, OVERALL), []).append(r)
    out = {}
    for (config, conc, cat), group in groups.items():
        key = (config, conc) if cat == OVERALL else (config, conc, cat)
        wall = walls.get(key) if conc > 1 else None
        out[(config, conc, cat)] = Summary(config, conc, cat, **summarize(group, wall))
    result = []
    for key, s in out.items():
        base = out.get((baseline, key[1], key[2]))
        speedup = s.tok_s / base.tok_s if base and base.tok_s else 0.0
        if key[1] == 1:
            median, low = _median_ratio(groups.get((baseline, key[1], key[2]), []), groups[key]), 0.0
        else:
            median, low = _round_ratios(rates or {}, baseline, *key)
        result.append(Summary(**{**s.as_dict(), "speedup": speedup, "speedup_median": median, "speedup_min": low}))
    return sorted(result, key=lambda s: (s.concurrency, s.category != OVERALL, s.category, s.config))


def _median_ratio(base: list[RequestRecord], ours: list[RequestRecord]) -> float:
    by_prompt = {r.prompt_index: r.e2e_s for r in base}
    ratios = [by_prompt[r.prompt_index] / r.e2e_s for r in ours if r.prompt_index in by_prompt and r.e2e_s]
    return statistics.median(ratios) if ratios else 0.0


def _round_ratios(rates: dict[tuple, float], baseline: str, config: str, conc: int, category: str):
    """Median and lowest of this / baseline tok/s over the rounds (of one category, or of all for "overall")."""
    ratios = [
        rate / rates[(baseline, c, cat, r)]
        for (name, c, cat, r), rate in rates.items()
        if name == config and c == conc and category in (cat, OVERALL) and rates.get((baseline, c, cat, r))
    ]
    return (statistics.median(ratios), min(ratios)) if ratios else (0.0, 0.0)


def greedy_mismatches(records: list[RequestRecord], baseline: str, greedy_configs: set[str]) -> dict[str, int]:
    """Per greedy config: requests whose tokens differ from the baseline's on the same prompt."""
    base = {r.prompt_index: r.token_ids for r in records if r.config == baseline and r.concurrency == 1}
    out: dict[str, int] = {}
    for r in records:
        if r.config in greedy_configs and r.config != baseline and r.prompt_index in base:
            out[r.config] = out.get(r.config, 0) + int(r.token_ids != base[r.prompt_index])
    return out
