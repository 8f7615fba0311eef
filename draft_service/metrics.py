"""The draft service's Prometheus metrics (names start with ``tandem_draft_``, besides the ``tandem_gc_`` pauses)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tandem_core.gc_pauses import watch_gc_pauses

_STEP_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1)


class DraftMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        watch_gc_pauses(self.registry)
        r = self.registry
        self.steps = Counter("tandem_draft_steps", "Draft steps answered", registry=r)
        self.step_seconds = Histogram(
            "tandem_draft_step_seconds",
            "Draft step time inside the service (read rows, run MTP)",
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("tandem_draft_tokens", "Draft tokens proposed", registry=r)
        self.attaches = Counter("tandem_draft_attaches", "Target sessions attached", registry=r)
        self.session = Gauge("tandem_draft_session_attached", "1 while a target session is attached", registry=r)
        self.errors = Counter("tandem_draft_errors", "Calls refused, by gRPC status", ["code"], registry=r)
