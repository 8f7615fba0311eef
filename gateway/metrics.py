"""The gateway's Prometheus metrics (names start with ``tandem_gateway_``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "tandem_gateway_requests", "HTTP requests by path and status", ["path", "status"], registry=r
        )
        self.latency = Histogram(
            "tandem_gateway_request_seconds",
            "HTTP request to response headers (streams: to first byte)",
            ["path"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "tandem_gateway_time_to_first_token_seconds",
            "Request to first token seen by the gateway",
            buckets=_BUCKETS,
            registry=r,
        )

    def observe(self, path: str, status: int, seconds: float) -> None:
        known = path if path.startswith(("/v1/", "/health", "/metrics")) else "other"
        self.requests.labels(known, str(status)).inc()
        self.latency.labels(known).observe(seconds)
