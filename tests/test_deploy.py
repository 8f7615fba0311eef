"""The docker-compose deployment is valid and keeps the draft service private."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from bench.procs import ROOT

needs_compose = pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
K8S = ROOT / "deploy" / "k8s"
K8S_VERSION = "1.30.0"


def compose_config(env_token: str | None, *profiles: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TANDEM_DRAFT_AUTH_TOKEN"}
    if env_token is not None:
        env["TANDEM_DRAFT_AUTH_TOKEN"] = env_token
    flags = [f for p in profiles for f in ("--profile", p)]
    return subprocess.run(["docker-compose", *flags, "config"], cwd=ROOT, env=env, capture_output=True, text=True)


@needs_compose
@pytest.mark.parametrize("profiles", [(), ("gpu",)], ids=["cpu", "gpu"])
def test_compose_file_is_valid_and_only_the_public_apis_are_published_on_loopback(profiles):
    import yaml

    out = compose_config("token", *profiles)
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    services = config["services"]
    suffix = "-gpu" if profiles else ""
    assert {f"target{suffix}", f"draft{suffix}", f"gateway{suffix}"} <= set(services)
    assert "ports" not in services[f"draft{suffix}"]
    for name in (f"target{suffix}", f"gateway{suffix}"):
        ports = services[name]["ports"]
        assert all(str(p.get("host_ip", p) if isinstance(p, dict) else p).startswith("127.0.0.1") for p in ports)
    for name in (f"target{suffix}", f"draft{suffix}"):
        assert "health" in " ".join(services[name]["healthcheck"]["test"])  # a real gRPC health probe
        assert services[name]["restart"] == "unless-stopped"
    assert services[f"draft{suffix}"]["ipc"] == f"service:target{suffix}"
    if profiles:
        for name in ("target-gpu", "draft-gpu"):  # both on the same GPU
            devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
            assert devices[0]["device_ids"] == ["0"] and devices[0]["capabilities"] == ["gpu"]
    assert config["networks"]["internal"]["internal"] is True


@needs_compose
def test_compose_refuses_to_run_without_a_draft_token():
    out = compose_config(None)
    assert out.returncode != 0 and "token" in out.stderr


def k8s_documents() -> list[tuple[str, dict]]:
    import yaml

    return [(p.name, doc) for p in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(p.read_text()) if doc]


def test_every_kubernetes_manifest_validates_against_the_schemas():
    import kubernetes_validate

    docs = k8s_documents()
    kinds = {doc["kind"] for _, doc in docs}
    assert {"Deployment", "Service", "Secret", "HorizontalPodAutoscaler"} <= kinds
    for name, doc in docs:
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{name} {doc['kind']}: {err}")


def test_the_pod_keeps_the_draft_service_private_and_shares_shm():
    deployment = next(doc for name, doc in k8s_documents() if name == "deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    draft = containers["draft"]
    assert draft["args"][draft["args"].index("--host") + 1] == "127.0.0.1" and "ports" not in draft
    shm = {v["name"]: v for v in pod["volumes"]}["shm"]
    assert shm["emptyDir"]["medium"] == "Memory"
    for name in ("target", "draft"):
        assert {"name": "shm", "mountPath": "/dev/shm"} in containers[name]["volumeMounts"]
        assert "grpc" in containers[name]["readinessProbe"] and "grpc" in containers[name]["livenessProbe"]
        token = next(e for e in containers[name]["env"] if e["name"] == "TANDEM_DRAFT_AUTH_TOKEN")
        assert token["valueFrom"]["secretKeyRef"]["name"] == "tandem-draft-token"
    services = [doc for _, doc in k8s_documents() if doc["kind"] == "Service"]
    exposed = {p["port"] for s in services for p in s["spec"]["ports"]}
    assert exposed == {50051, 8000}  # the draft service (50061) has no Service


def test_health_subcommand_is_a_grpc_health_probe():
    from concurrent import futures

    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from bench.procs import free_port
    from client.cli import main

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert main(["--address", f"127.0.0.1:{port}", "health"]) == 1
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        assert main(["--address", f"127.0.0.1:{port}", "health"]) == 0
    finally:
        server.stop(0)
    assert main(["--address", f"127.0.0.1:{port}", "health", "--timeout", "0.5"]) == 1  # nobody there
