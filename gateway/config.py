"""The gateway's configuration: one frozen dataclass, from flags and TANDEM_GATEWAY_* variables."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from tandem_core.flags import add_flags


@dataclass(frozen=True)
class GatewayConfig:
    host: str = "127.0.0.1"  # bind address; loopback unless told otherwise
    port: int = 8000
    target: str = "127.0.0.1:50051"  # the target service's gRPC address
    api_key: str = ""  # when set, /v1/* requires "Authorization: Bearer <api_key>" (env TANDEM_GATEWAY_API_KEY)
    served_model_name: str = ""  # the model id clients send; "" = the target's model name
    request_timeout_s: float = 600.0  # longest a generation may take end to end
    log_level: str = "INFO"
    access_log: bool = False  # a log line per HTTP request (off: the request metrics count them)


def parse_gateway_config(argv: list[str] | None = None, env: dict[str, str] | None = None) -> GatewayConfig:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog="tandem-gateway", description="OpenAI-compatible HTTP gateway for Tandem")
    add_flags(parser, GatewayConfig, env, "TANDEM_GATEWAY_")
    return GatewayConfig(**vars(parser.parse_args(argv)))
