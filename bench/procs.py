"""Start Tandem services as child processes on free loopback ports (used by the tests and the benchmark)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tandem_core.grpc_server import free_port

ROOT = Path(__file__).resolve().parents[1]


class ChildProcess:
    """``python -m module ARGS`` from the repository root (or ``root``, another checkout's), output in a
    temporary log file."""

    def __init__(self, module: str, argv: list[str], root: Path = ROOT):
        self.log_path = Path(tempfile.mkstemp(prefix=f"{module}-", suffix=".log")[1])
        env = dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED="1")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *argv], stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=root
        )

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (a graceful stop), SIGKILL after ``timeout``; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


class ServiceProcess(ChildProcess):
    def __init__(self, module: str, args: list[str], port: int, root: Path = ROOT):
        self.port = port
        self.address = f"127.0.0.1:{port}"
        super().__init__(module, ["--port", str(port), *args], root)

    def wait_serving(self, timeout: float = 300) -> None:
        from client import TandemClient

        deadline = time.monotonic() + timeout
        with TandemClient(self.address) as c:
            while not c.is_serving():
                if self.proc.poll() is not None:
                    raise RuntimeError(f"service exited with {self.proc.returncode}:\n{self.logs()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"service not serving after {timeout}s:\n{self.logs()}")
                time.sleep(0.2)


def start_service(module: str, args: list[str], root: Path = ROOT) -> ServiceProcess:
    """Start ``python -m module`` on a free port and wait until its health check says SERVING."""
    svc = ServiceProcess(module, list(args), free_port(), root)
    try:
        svc.wait_serving()
    except Exception:
        svc.stop()
        raise
    return svc


def start_target(*args: str, root: Path = ROOT) -> ServiceProcess:
    return start_service("target_service", list(args), root)


class GatewayProcess(ChildProcess):
    """The OpenAI-compatible gateway as a child process, ready once ``/health`` answers 200."""

    def __init__(self, target: str, *args: str, timeout: float = 60):
        import httpx

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__("gateway", ["--port", str(self.port), "--target", target, *args])
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gateway not ready:\n{self.logs()}")
            time.sleep(0.2)
