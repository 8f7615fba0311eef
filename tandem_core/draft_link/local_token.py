"""The per-start secret of a local drafter.

A draft service started without ``--auth-token`` still requires one: it makes a random token and
writes it to an owner-only file named by its port (``local_token_path``); a target on the same machine
and account reads it there before each attach. Other accounts cannot read it, so no other local user
can attach, replace the target's session or fill the drafter's streams.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path


def local_token_path(port: int) -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(runtime) / f"tandem-{os.getuid()}" / f"draft-{port}.token"


def write_local_token(port: int) -> tuple[str, Path]:
    """A fresh token, written 0600 in a 0700 directory this account owns; returns (token, path)."""
    path = local_token_path(port)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    info = path.parent.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{path.parent} must be owned by this account and closed to others (mode 0700)")
    token = secrets.token_urlsafe(32)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    tmp.replace(path)
    return token, path


def read_local_token(address: str) -> str:
    """The token a local draft service at ``address`` (host:port) wrote, or "" if there is none."""
    try:
        return local_token_path(int(address.rsplit(":", 1)[1])).read_text().strip()
    except (IndexError, ValueError, OSError):
        return ""
