"""`python -m bench.chaos`: replay the faults of the hardening issue against real processes and report.

Scenarios (each starts what it needs: a target with the draft service, and a target without drafter
for the greedy reference):
* cancels      8 busy slots, a waiting queue and random cancels; mean acceptance length of the requests
               that finish, against the same requests without cancels; greedy output against no drafter;
* drafter      SIGKILL + restart and SIGSTOP 5 s mid-generation: seconds from the drafter being ready
               (or SIGCONT) until each request in flight emits a multi-token chunk (an accepted draft);
* half-open    health and a 32-token generation, before and while 1000 calls sit open without a request;
* huge         100 text prompts of 4 MB: status and latency of each refusal, target RSS growth, and a
               concurrent stream's inter-token p99 against its unloaded value;
* malformed    malformed public requests and forged draft-service calls: every status, and tracebacks
               in either log.

Writes chaos.json and chaos.md to --out and prints progress as it goes. Bounded: a few minutes per
scenario on two cores.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.procs import ServiceProcess, free_port, start_target
from bench.report import save
from bench.spec_bench import load, split
from client import TandemClient

K = 3
SLOTS = 8


def log(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)


def questions(n: int, offset: int = 0) -> list[list[dict]]:
    prompts = split(load(), "held_out")
    return [[{"role": "user", "content": p.text}] for p in prompts[offset : offset + n]]


# ---- processes ---------------------------------------------------------------------------------------
@dataclass
class Pair:
    drafter: ServiceProcess
    target: ServiceProcess
    draft_port: int
    mode: str

    def restart_drafter(self) -> float:
        """Start the draft service again on its port; returns when it serves (monotonic time)."""
        self.drafter = start_drafter(self.draft_port, self.mode)
        return time.monotonic()

    def stop(self) -> None:
        self.target.stop()
        self.drafter.stop()


def start_drafter(port: int, mode: str) -> ServiceProcess:
    svc = ServiceProcess("draft_service", ["--num-draft-tokens", str(K), "--mode", mode], port)
    svc.wait_serving()
    return svc


def start_pair(mode: str, *target_args: str) -> Pair:
    port = free_port()
    drafter = start_drafter(port, mode)
    target = start_target(
        "--drafter", "grpc", "--draft-address", f"127.0.0.1:{port}", "--draft-mode", mode,
        "--num-draft-tokens", str(K), "--draft-length", "fixed", "--max-slots", str(SLOTS), *target_args,
    )  # fmt: skip
    pair = Pair(drafter, target, port, mode)
    with TandemClient(target.address) as client:
        wait_attached(client)
    return pair


def wait_attached(client: TandemClient, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while not client.model_info().drafter_status.attached:
        if time.monotonic() > deadline:
            raise RuntimeError("the target never attached to the drafter")
        time.sleep(0.05)
    return time.monotonic()


# ---- streams -----------------------------------------------------------------------------------------
@dataclass
class StreamRecord:
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (monotonic time, tokens in the chunk)
    token_ids: list[int] = field(default_factory=list)
    mean_acceptance: float = 0.0
    finish: str = ""
    error: str = ""


def run_stream(client: TandemClient, messages, record: StreamRecord, stop: threading.Event | None = None, **kw):
    try:
        stream = client.stream(messages, **kw)
        for chunk in stream:
            record.chunks.append((time.monotonic(), len(chunk.token_ids)))
            record.token_ids.extend(chunk.token_ids)
            if stop is not None and stop.is_set():
                stream.close()
                record.finish = "cancelled"
                return
        done = stream.completion
        record.finish, record.mean_acceptance = done.finish_reason, done.stats.mean_acceptance_length
    except Exception as err:  # noqa: BLE001 - recorded, the scenario reports it
        record.error = f"{type(err).__name__}: {err}"[:200]


def in_threads(jobs) -> list[threading.Thread]:
    threads = [threading.Thread(target=job, daemon=True) for job in jobs]
    for t in threads:
        t.start()
    return threads


def greedy_reference(messages: list, max_tokens: int) -> list[list[int]]:
    """Outputs of a target with no drafter at all."""
    plain = start_target("--max-slots", str(SLOTS))
    try:
        with TandemClient(plain.address, timeout=600) as client:
            out: list = [None] * len(messages)
            threads = in_threads(
                lambda i=i: out.__setitem__(
                    i, list(client.generate(messages[i], max_tokens=max_tokens, ignore_eos=True).token_ids)
                )
                for i in range(len(messages))
            )
            for t in threads:
                t.join()
            return out
    finally:
        plain.stop()


# ---- scenarios ---------------------------------------------------------------------------------------
def scenario_cancels(mode: str, num_requests: int, num_cancels: int, max_tokens: int) -> dict:
    messages = questions(num_requests)
    victims = questions(48)  # the held-out split, reused in turn
    reference = greedy_reference(messages, max_tokens)
    pair = start_pair(mode)
    try:
        with TandemClient(pair.target.address, timeout=600) as client:
            runs = {}
            for label, cancels in (("without cancels", 0), ("with cancels", num_cancels)):
                log(f"cancels: {num_requests} requests {label}")
                records = [StreamRecord() for _ in messages]
                jobs = [
                    lambda i=i, records=records: run_stream(
                        client, messages[i], records[i], max_tokens=max_tokens, ignore_eos=True
                    )
                    for i in range(len(messages))
                ]
                rng = random.Random(7)
                for v in range(cancels):
                    stop = threading.Event()
                    threading.Timer(rng.uniform(0.2, 3.0), stop.set).start()
                    rec = StreamRecord()
                    jobs.append(
                        lambda v=v, stop=stop, rec=rec: run_stream(
                            client, victims[v % len(victims)], rec, stop, max_tokens=64
                        )
                    )
                rng.shuffle(jobs)
                threads = []
                for job in jobs:  # keep 8 running and some waiting: at most 12 calls open at once
                    while sum(t.is_alive() for t in threads) >= SLOTS + 4:
                        time.sleep(0.01)
                    threads += in_threads([job])
                for t in threads:
                    t.join()
                runs[label] = records
            status = client.model_info().drafter_status
    finally:
        pair.stop()
    al = {label: statistics.mean(r.mean_acceptance for r in recs) for label, recs in runs.items()}
    return {
        "requests": num_requests,
        "cancels": num_cancels,
        "mean_acceptance_without_cancels": al["without cancels"],
        "mean_acceptance_with_cancels": al["with cancels"],
        "ratio": al["with cancels"] / al["without cancels"],
        "errors": [r.error for recs in runs.values() for r in recs if r.error],
        "outputs_differing_from_no_drafter": sum(
            r.token_ids != ref for recs in runs.values() for r, ref in zip(recs, reference, strict=True)
        ),
        "drafter_failures": status.failures,
    }


def _resume_after(records: list[StreamRecord], since: float) -> list[float | None]:
    """Per stream: seconds from ``since`` to its first chunk with more than one token (an accepted draft)."""
    return [next((t - since for t, n in r.chunks if t >= since and n > 1), None) for r in records]


def scenario_drafter(mode: str, max_tokens: int) -> dict:
    messages = questions(4, offset=8)
    pair = start_pair(mode)
    out = {}
    try:
        with TandemClient(pair.target.address, timeout=600) as client:
            for fault in ("sigkill+restart", "sigstop 5 s"):
                log(f"drafter: {fault} while 4 requests of {max_tokens} tokens run")
                records = [StreamRecord() for _ in messages]
                threads = in_threads(
                    lambda i=i, records=records: run_stream(
                        client, messages[i], records[i], max_tokens=max_tokens, ignore_eos=True
                    )
                    for i in range(len(messages))
                )
                time.sleep(3.0)
                if fault.startswith("sigkill"):
                    pair.drafter.proc.send_signal(signal.SIGKILL)
                    pair.drafter.proc.wait()
                    time.sleep(1.0)
                    ready = pair.restart_drafter()
                else:
                    pair.drafter.proc.send_signal(signal.SIGSTOP)
                    time.sleep(5.0)
                    pair.drafter.proc.send_signal(signal.SIGCONT)
                    ready = time.monotonic()
                for t in threads:
                    t.join()
                resume = _resume_after(records, ready)
                out[fault] = {
                    "in_flight_after_fault": sum(any(t >= ready for t, _ in r.chunks) for r in records),
                    "seconds_to_speculate_again": resume,
                    "max_seconds": max((s for s in resume if s is not None), default=None),
                    "never_again": sum(s is None for s in resume),
                    "errors": [r.error for r in records if r.error],
                }
            out["drafter_status"] = vars(client.model_info().drafter_status)
    finally:
        pair.stop()
    return out


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _health_and_generation(address: str, messages, repeats: int = 3) -> tuple[float, float]:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel, TandemClient(address, timeout=60) as client:
        stub = health_pb2_grpc.HealthStub(channel)
        check = health_pb2.HealthCheckRequest()
        health = statistics.median(_timed(lambda: stub.Check(check, timeout=10)) for _ in range(repeats))
        gen = statistics.median(
            _timed(lambda: client.generate(messages, max_tokens=32, ignore_eos=True)) for _ in range(repeats)
        )
    return health, gen


def scenario_half_open(num_calls: int) -> dict:
    target = start_target("--max-slots", str(SLOTS))
    messages = questions(1)[0]
    try:
        log("half-open: baseline")
        base_health, base_gen = _health_and_generation(target.address, messages)
        log(f"half-open: opening {num_calls} calls that never send their request")
        release = threading.Event()

        def never():
            release.wait()
            yield b""

        # own connections (not shared with the measuring client), 100 calls on each
        local = [("grpc.use_local_subchannel_pool", 1)]
        channels = [grpc.insecure_channel(target.address, options=local) for _ in range(max(1, num_calls // 100))]
        calls = [
            channels[i % len(channels)].stream_stream("/mtp.v1.TargetService/GenerateStream")(never())
            for i in range(num_calls)
        ]
        time.sleep(2.0)
        loaded_health, loaded_gen = _health_and_generation(target.address, messages)
        for call in calls:
            call.cancel()
        release.set()
        for channel in channels:
            channel.close()
    finally:
        target.stop()
    return {
        "calls": num_calls,
        "health_s": [base_health, loaded_health],
        "generation_32_s": [base_gen, loaded_gen],
        "health_added_ms": 1000 * (loaded_health - base_health),
        "generation_added_ms": 1000 * (loaded_gen - base_gen),
    }


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _itl_p99(record: StreamRecord) -> float:
    times = [t for t, _ in record.chunks]
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    return gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] if gaps else float("nan")


def send_huge(address: str, num_prompts: int, prompt_bytes: int) -> tuple[list[str], list[float]]:
    """Send ``num_prompts`` huge text prompts one after another; each one's status and seconds to answer.

    Runs in its own process (an attacker is another client, normally on another machine): the request is
    built and serialized once and its bytes are sent again and again, so the attacker's own CPU use on
    this 2-core machine stays small next to the target's.
    """
    from client.convert import build_input
    from protos.mtp.v1 import target_service_pb2 as pb

    huge = [{"role": "user", "content": "lorem ipsum " * (prompt_bytes // 12)}]
    body = pb.GenerateRequest(input=build_input(huge, max_tokens=4)).SerializeToString()
    codes, seconds = [], []
    options = [("grpc.max_send_message_length", 64 << 20)]
    with grpc.insecure_channel(address, options=options) as channel:
        call = channel.unary_unary(
            "/mtp.v1.TargetService/Generate", request_serializer=bytes, response_deserializer=None
        )
        for _ in range(num_prompts):
            t0 = time.perf_counter()
            try:
                call(body, timeout=120)
                codes.append("OK")
            except grpc.RpcError as err:
                codes.append(err.code().name)
            seconds.append(time.perf_counter() - t0)
    return codes, seconds


def scenario_huge(num_prompts: int, prompt_bytes: int) -> dict:
    import multiprocessing

    target = start_target("--max-slots", str(SLOTS))
    messages = questions(1)[0]
    try:
        with TandemClient(target.address, timeout=120) as client, multiprocessing.get_context("spawn").Pool(1) as pool:
            client.generate(messages, max_tokens=8)
            pool.apply(send_huge, (target.address, 1, 1000))  # the sender process is up before timing starts
            log("huge: unloaded stream")
            quiet = StreamRecord()
            run_stream(client, messages, quiet, max_tokens=128, ignore_eos=True)
            rss_before = _rss_mb(target.proc.pid)
            log(f"huge: {num_prompts} prompts of {prompt_bytes / 1e6:.0f} MB from another process beside a stream")
            loaded = StreamRecord()
            (streamer,) = in_threads([lambda: run_stream(client, messages, loaded, max_tokens=128, ignore_eos=True)])
            codes, seconds = pool.apply(send_huge, (target.address, num_prompts, prompt_bytes))
            streamer.join()
            rss_after = _rss_mb(target.proc.pid)
    finally:
        target.stop()
    return {
        "prompts": num_prompts,
        "prompt_bytes": prompt_bytes,
        "statuses": {c: codes.count(c) for c in set(codes)},
        "refusal_ms_median": 1000 * statistics.median(seconds),
        "refusal_ms_max": 1000 * max(seconds),
        "rss_growth_mb": rss_after - rss_before,
        "itl_p99_ms": [1000 * _itl_p99(quiet), 1000 * _itl_p99(loaded)],
        "itl_p99_ratio": _itl_p99(loaded) / _itl_p99(quiet),
    }


def scenario_malformed(mode: str) -> dict:
    from bench.forgeries import forged_draft_calls, malformed_public_calls

    pair = start_pair(mode)
    try:
        with grpc.insecure_channel(pair.target.address) as channel:
            public = malformed_public_calls(channel)
        draft = forged_draft_calls(f"127.0.0.1:{pair.draft_port}", pair.draft_port)
        with TandemClient(pair.target.address, timeout=120) as client:
            still = client.generate(questions(1)[0], max_tokens=16).finish_reason
    finally:
        pair.stop()
    logs = pair.target.logs() + pair.drafter.logs()
    return {
        "public": public,
        "draft": draft,
        "not_invalid_argument": {k: v for k, v in {**public, **draft}.items() if v != "INVALID_ARGUMENT"},
        "tracebacks_in_logs": logs.count("Traceback"),
        "serving_after": still,
    }


# ---- report ------------------------------------------------------------------------------------------
def markdown(results: dict) -> str:
    lines = ["# Chaos run", "", f"Command: `{results['command']}`", ""]
    for name, value in results["scenarios"].items():
        lines += [f"## {name}", "", "```json", json.dumps(value, indent=2), "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import sys

    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="cancels,drafter,half-open,huge,malformed")
    parser.add_argument("--mode", default="eagle", choices=["eagle", "vanilla"])
    parser.add_argument("--requests", type=int, default=16, help="measured requests in the cancel scenario")
    parser.add_argument("--cancels", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--half-open", type=int, default=1000)
    parser.add_argument("--huge", type=int, default=100)
    parser.add_argument("--huge-bytes", type=int, default=4_000_000)
    parser.add_argument("--out", type=Path, default=Path("chaos-out"))
    args = parser.parse_args(argv)
    runners = {
        "cancels": lambda: scenario_cancels(args.mode, args.requests, args.cancels, args.max_tokens),
        "drafter": lambda: scenario_drafter(args.mode, 4 * args.max_tokens),
        "half-open": lambda: scenario_half_open(args.half_open),
        "huge": lambda: scenario_huge(args.huge, args.huge_bytes),
        "malformed": lambda: scenario_malformed(args.mode),
    }
    results = {"command": "python -m bench.chaos " + " ".join(sys.argv[1:] if argv is None else argv), "scenarios": {}}
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.scenarios.split(","):
        started = time.monotonic()
        log(f"scenario {name}")
        results["scenarios"][name] = runners[name]()
        results["scenarios"][name]["wall_s"] = round(time.monotonic() - started, 1)
        log(f"{name}: {json.dumps(results['scenarios'][name])[:400]}")
        save(args.out, "chaos", results, markdown(results))
    log(f"wrote {args.out / 'chaos.json'} and {args.out / 'chaos.md'}")


if __name__ == "__main__":
    main()
