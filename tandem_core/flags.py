"""Command-line flags from a frozen config dataclass, with environment-variable defaults."""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import fields


def add_flags(parser: argparse.ArgumentParser, cls, env: dict[str, str], prefix: str, help_for=None) -> None:
    """One --flag per field of the frozen config dataclass ``cls``; defaults from ``{prefix}<NAME>``."""
    for f in fields(cls):
        default = env.get(f"{prefix}{f.name.upper()}", f.default)
        flag = f"--{f.name.replace('_', '-')}"
        help_text = (help_for or {}).get(f.name, f"(default {f.default!r}; env {prefix}{f.name.upper()})")
        if isinstance(f.default, bool):
            on = str(default).lower() in ("1", "true", "yes")
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=on, help=help_text)
        else:
            parser.add_argument(flag, type=type(f.default), default=type(f.default)(default), help=help_text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
