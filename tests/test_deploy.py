"""The docker-compose deployment is valid and keeps the draft service private."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from target_service.procs import ROOT

pytestmark = pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")


def compose_config(env_token: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TANDEM_DRAFT_AUTH_TOKEN"}
    if env_token is not None:
        env["TANDEM_DRAFT_AUTH_TOKEN"] = env_token
    return subprocess.run(["docker-compose", "config"], cwd=ROOT, env=env, capture_output=True, text=True)


def test_compose_file_is_valid_and_only_the_target_is_published_on_loopback():
    import yaml

    out = compose_config("token")
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    services = config["services"]
    assert "ports" not in services["draft"]
    ports = services["target"]["ports"]
    assert all(str(p.get("host_ip", p) if isinstance(p, dict) else p).startswith("127.0.0.1") for p in ports)
    assert config["networks"]["internal"]["internal"] is True


def test_compose_refuses_to_run_without_a_draft_token():
    out = compose_config(None)
    assert out.returncode != 0 and "token" in out.stderr
