"""The services a benchmark run talks to: launched here (one target per drafter kind) or given by address."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.procs import ROOT, ServiceProcess, free_port, start_target

MAX_K = 4


@dataclass
class Services:
    targets: dict[str, str]  # kind ("none", "eagle", "vanilla") -> target address
    drafters: dict[str, ServiceProcess] = field(default_factory=dict)  # launched draft services by kind
    procs: list[ServiceProcess] = field(default_factory=list)
    draft_args: dict[str, list[str]] = field(default_factory=dict)

    def stop(self) -> None:
        for p in self.procs + list(self.drafters.values()):
            p.stop()

    def restart_drafter(self, kind: str, extra: list[str]) -> None:
        """Restart one launched draft service on its port with extra flags; its target re-attaches."""
        from client import TandemClient

        old = self.drafters[kind]
        with TandemClient(self.targets[kind]) as c:
            attaches = c.model_info().drafter_status.attaches
            old.stop()
            self.drafters[kind] = _drafter(kind, old.port, self.draft_args[kind] + extra)
            deadline = time.monotonic() + 120
            while c.model_info().drafter_status.attaches <= attaches:  # the target notices the loss on a step
                if time.monotonic() > deadline:
                    raise RuntimeError("the target did not re-attach to its restarted draft service")
                c.generate("ping", max_tokens=3, num_draft_tokens=1)
                time.sleep(0.5)
            wait_attached(c, attaches + 1)


def _drafter(kind: str, port: int, args: list[str], root: Path = ROOT) -> ServiceProcess:
    svc = ServiceProcess("draft_service", ["--mode", kind, "--num-draft-tokens", str(MAX_K), *args], port, root)
    svc.wait_serving()
    return svc


def wait_attached(client, min_attaches: int = 1, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        s = client.model_info().drafter_status
        if s.attached and s.attaches >= min_attaches:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the target did not attach to its draft service")
        time.sleep(0.2)


def launch(
    kinds: set[str], slots: int, max_seq_len: int, draft_args: list[str], target_args: list[str], root: Path = ROOT
) -> Services:
    """A target without drafter ("none") and, per MTP mode wanted, a draft service + target pair (k up to 4),
    from this checkout or ``root``. ``{kind}`` in a target argument becomes the target's kind
    (``--step-trace /tmp/trace-{kind}.jsonl``)."""
    from client import TandemClient

    def common(kind: str) -> list[str]:
        own = [a.replace("{kind}", kind) for a in target_args]
        return ["--max-slots", str(slots), "--max-seq-len", str(max_seq_len), "--max-batch-tokens", "256", *own]

    services = Services(targets={})
    try:
        if "none" in kinds:
            t = start_target(*common("none"), root=root)
            services.procs.append(t)
            services.targets["none"] = t.address
        for kind in sorted(kinds - {"none"}):
            services.draft_args[kind] = list(draft_args)
            services.drafters[kind] = _drafter(kind, free_port(), draft_args, root)
            t = start_target(
                *common(kind),
                "--drafter", "grpc",
                "--draft-address", services.drafters[kind].address,
                "--draft-mode", kind,
                "--num-draft-tokens", str(MAX_K),
                root=root,
            )  # fmt: skip
            services.procs.append(t)
            services.targets[kind] = t.address
            with TandemClient(t.address) as c:
                wait_attached(c)
    except BaseException:  # a failed start, or a stop signal while starting: leave nothing running
        services.stop()
        raise
    return services
