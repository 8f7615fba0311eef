"""How the SDK reaches one or several target services: gRPC's own name resolution and round robin.

* ``"host:port"``: one target.
* ``"10.0.0.5:50051,10.0.0.6:50051"``: several targets by IP (gRPC's static ``ipv4:`` resolver).
* ``"dns:///tandem-targets:50051"``: every address a DNS name resolves to (a Kubernetes headless
  Service), re-resolved as Pods come and go.

Calls are spread with the ``round_robin`` policy. A call that fails with UNAVAILABLE before the
target answered anything (a target that died or is not up) is retried on another, at most twice.
"""

from __future__ import annotations

import ipaddress
import json

SERVICE_CONFIG = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "methodConfig": [
        {
            "name": [{"service": "mtp.v1.TargetService"}],
            "retryPolicy": {
                "maxAttempts": 3,
                "initialBackoff": "0.1s",
                "maxBackoff": "1s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ],
}


def channel_target(address: str) -> str:
    """The gRPC target string for ``address`` (see the module docstring)."""
    if "," not in address:
        return address
    hosts = [part.strip().rsplit(":", 1)[0].strip("[]") for part in address.split(",")]
    try:
        versions = {ipaddress.ip_address(h).version for h in hosts}
    except ValueError:
        raise ValueError(
            f"a list of targets must be IP:port pairs ({address!r}); for host names use dns:///NAME:PORT"
        ) from None
    if len(versions) != 1:
        raise ValueError(f"mix of IPv4 and IPv6 targets in {address!r}")
    return f"ipv{versions.pop()}:{address.replace(' ', '')}"


def channel_options(extra: list[tuple[str, object]] | None = None) -> list[tuple[str, object]]:
    return [("grpc.service_config", json.dumps(SERVICE_CONFIG)), ("grpc.enable_retries", 1), *(extra or [])]
