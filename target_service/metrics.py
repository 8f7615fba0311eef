"""The target's Prometheus metrics: per-request latencies and tokens, speculation, and live engine state.

Request metrics are observed at the gRPC edge (what a client sees); engine state and the draft link
are read when scraped. Every name starts with ``tandem_`` (see the README's metrics table).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from tandem_core.gc_pauses import watch_gc_pauses
from target_service.sequence import FinishEvent

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_TOKEN_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2)
_DRAFT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1)


class RequestClock:
    """Times one request at the edge: started at submit, first token, finish."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.first: float | None = None

    def token(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()


class TargetMetrics:
    def __init__(self, engine, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        watch_gc_pauses(self.registry)
        r = self.registry
        self.requests = Counter("tandem_requests", "Finished requests by finish reason", ["finish_reason"], registry=r)
        self.rejected = Counter(
            "tandem_requests_rejected", "Requests refused at submit, by status", ["code"], registry=r
        )
        self.prompt_tokens = Counter("tandem_prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter("tandem_generation_tokens", "Tokens generated", registry=r)
        self.ttft = Histogram(
            "tandem_time_to_first_token_seconds", "Submit to first token", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.tpot = Histogram(
            "tandem_time_per_output_token_seconds",
            "Mean time per token after the first, per request",
            buckets=_TOKEN_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "tandem_e2e_request_latency_seconds", "Submit to finish", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.spec_steps = Counter("tandem_spec_decode_num_steps", "Verification steps (generation)", registry=r)
        self.spec_drafts = Counter("tandem_spec_decode_num_draft_tokens", "Draft tokens verified", registry=r)
        self.spec_accepted = Counter("tandem_spec_decode_num_accepted_tokens", "Draft tokens accepted", registry=r)
        self.spec_accepted_pos = Counter(
            "tandem_spec_decode_num_accepted_tokens_per_pos",
            "Accepted drafts by position (0-based)",
            ["position"],
            registry=r,
        )
        self.spec_drafts_pos = Counter(
            "tandem_spec_decode_num_draft_tokens_per_pos",
            "Verified drafts by position (0-based)",
            ["position"],
            registry=r,
        )
        self.spec_skipped = Counter(
            "tandem_spec_decode_skipped_steps",
            "Verification steps without drafts: policy (not worth it) or no_drafts (asked, none came)",
            ["reason"],
            registry=r,
        )
        self.draft_round_trip = Histogram(
            "tandem_draft_round_trip_seconds",
            "Drafting time per engine step (transport included)",
            buckets=_DRAFT_BUCKETS,
            registry=r,
        )
        self.totals = {"steps": 0, "accepted": 0}  # for the mean acceptance length gauge
        r.register(_EngineCollector(engine, self))

    def finished(self, clock: RequestClock, event: FinishEvent) -> None:
        end = time.perf_counter()
        self.requests.labels(event.reason.value).inc()
        self.prompt_tokens.inc(event.prompt_tokens)
        self.generation_tokens.inc(event.completion_tokens)
        self.e2e.observe(end - clock.start)
        if clock.first is not None:
            self.ttft.observe(clock.first - clock.start)
            if event.completion_tokens > 1:
                self.tpot.observe((end - clock.first) / (event.completion_tokens - 1))
        stats = event.stats
        self.totals["steps"] += stats.num_steps
        self.totals["accepted"] += stats.num_accepted
        self.spec_steps.inc(stats.num_steps)
        self.spec_drafts.inc(stats.num_drafted)
        self.spec_accepted.inc(stats.num_accepted)
        self.spec_skipped.labels("policy").inc(stats.skipped_by_policy)
        self.spec_skipped.labels("no_drafts").inc(stats.skipped_no_drafts)
        for j, (drafted, accepted) in enumerate(zip(stats.drafted_per_position, stats.accepted_per_position)):
            self.spec_drafts_pos.labels(str(j)).inc(drafted)
            self.spec_accepted_pos.labels(str(j)).inc(accepted)


class _EngineCollector:
    """Gauges read from the engine at scrape time: queue, slots, the draft link, acceptance length."""

    def __init__(self, engine, metrics: TargetMetrics):
        self.engine, self.metrics = engine, metrics

    def collect(self):
        sched = self.engine.scheduler
        yield _gauge("tandem_num_requests_waiting", "Requests waiting for a KV slot", len(sched.waiting))
        yield _gauge("tandem_num_requests_running", "Requests holding a KV slot", len(sched.running))
        yield _gauge("tandem_kv_slots_used", "KV slots in use", sched.limits.max_slots - len(sched.free_slots))
        yield _gauge("tandem_kv_slots_total", "KV slots", sched.limits.max_slots)
        steps, accepted = self.metrics.totals["steps"], self.metrics.totals["accepted"]
        yield _gauge(
            "tandem_spec_decode_mean_acceptance_length",
            "Tokens emitted per verification step over finished requests (1 without speculation)",
            (steps + accepted) / steps if steps else 0.0,
        )
        link = self.engine.drafter.status()
        yield _gauge(
            "tandem_draft_link_attached",
            "1 while a draft service session is attached",
            float(bool(link and link.attached)),
        )
        for name, help_text, value in (
            ("tandem_draft_link_attaches", "Sessions opened with the draft service", link.attaches if link else 0),
            (
                "tandem_draft_link_failures",
                "Draft sessions lost (broken stream, stuck drafter, garbage)",
                link.failures if link else 0,
            ),
            ("tandem_draft_link_steps", "Steps sent to the draft service", link.steps if link else 0),
        ):
            family = CounterMetricFamily(name, help_text)
            family.add_metric([], value)
            yield family


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text)
    family.add_metric([], value)
    return family
