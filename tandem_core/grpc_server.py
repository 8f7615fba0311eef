"""The gRPC server skeleton both services use: bounded worker pool, health, reflection, bind, graceful stop."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

_HEALTH = health_pb2.HealthCheckResponse


class GrpcServer:
    """One service on ``host:port`` with health (under "" and its own name) and server reflection.

    ``workers`` bounds concurrent calls; ``serving`` is the health status until ``set_serving``.
    """

    def __init__(
        self,
        service_name: str,
        register: Callable[[grpc.Server], None],  # adds the service's servicer to the server
        host: str,
        port: int,
        max_message_bytes: int,
        workers: int,
        interceptors: tuple[grpc.ServerInterceptor, ...] = (),
        serving: bool = False,
    ):
        self.service_name = service_name
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=service_name.rsplit(".", 1)[-1]),
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
                ("grpc.so_reuseport", 0),  # a second server on a taken port fails instead of sharing it
            ],
        )
        register(self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.set_serving(serving)
        reflection.enable_server_reflection((service_name, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise RuntimeError(f"cannot bind {host}:{port}")

    def set_serving(self, serving: bool) -> None:
        for name in ("", self.service_name):
            self.health.set(name, _HEALTH.SERVING if serving else _HEALTH.NOT_SERVING)

    def start(self) -> None:
        self.server.start()

    def stop(self, grace_s: float) -> None:
        """NOT_SERVING first (balancers stop sending), then let calls in flight finish for ``grace_s``."""
        self.set_serving(False)
        self.server.stop(grace_s).wait()


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (for a service asked to pick its own)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
