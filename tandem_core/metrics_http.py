"""Serve a Prometheus registry over HTTP (``/metrics``) from a daemon thread, loopback by default."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger(__name__)


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> int:
    """Start the exporter on ``host:port`` (port 0: off); return the port it serves on, or 0."""
    if port <= 0:
        return 0
    server, _thread = start_http_server(port, addr=host, registry=registry)
    bound = server.server_address[1]
    log.info("Prometheus metrics on http://%s:%d/metrics", host, bound)
    return bound
