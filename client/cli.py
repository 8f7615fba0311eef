"""`tandem` command line: stream a generation to the terminal, or show model info."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from client.errors import TandemError
from client.sync_client import TandemClient


def _generate(args) -> int:
    prompt = [{"role": "user", "content": args.prompt}] if args.chat else args.prompt
    with TandemClient(args.address) as client:
        if args.wait:
            client.wait_until_serving(args.wait)
            _wait_for_drafter(client, args.wait)
        t0 = time.monotonic()
        stream = client.stream(
            prompt,
            max_tokens=args.max_tokens,
            stop=args.stop or (),
            num_draft_tokens=args.num_draft_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
        )
        for chunk in stream:
            sys.stdout.write(chunk.text)
            sys.stdout.flush()
        sys.stdout.write("\n")
        c = stream.completion
        if args.stats and c is not None:
            elapsed = time.monotonic() - t0
            print(
                f"[{c.finish_reason}] {c.usage.completion_tokens} tokens in {elapsed:.2f}s "
                f"({c.usage.completion_tokens / elapsed:.1f} tok/s), mean acceptance length "
                f"{c.stats.mean_acceptance_length:.2f} ({c.stats.acceptance_mode})",
                file=sys.stderr,
            )
    return 0


def _wait_for_drafter(client: TandemClient, timeout: float) -> None:
    """A server with a draft service: give it until ``timeout`` to attach (it still serves without one)."""
    deadline = time.monotonic() + timeout
    info = client.model_info()
    while info.drafter != "none" and not info.drafter_status.attached and time.monotonic() < deadline:
        time.sleep(0.2)
        info = client.model_info()


def _info(args) -> int:
    with TandemClient(args.address) as client:
        if args.wait:
            client.wait_until_serving(args.wait)
        print(json.dumps(dataclasses.asdict(client.model_info()), indent=2))
    return 0


def _health(args) -> int:
    """A gRPC health probe (grpc.health.v1 Check on the overall service) for container health checks."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(args.address) as channel:
        try:
            resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=args.timeout)
        except grpc.RpcError as err:
            print(f"{args.address}: {err.code().name}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
    print(f"{args.address}: {status}")
    return 0 if resp.status == health_pb2.HealthCheckResponse.SERVING else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tandem", description="Tandem client")
    parser.add_argument("--address", default="127.0.0.1:50051", help="target service host:port")
    parser.add_argument("--wait", type=float, default=0, help="seconds to wait for the server to be serving")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="stream a generation to stdout")
    gen.add_argument("prompt")
    gen.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True, help="apply the chat template")
    gen.add_argument("--max-tokens", type=int, default=0)
    gen.add_argument("--stop", action="append", help="stop string (repeatable)")
    gen.add_argument("--num-draft-tokens", type=int, default=None)
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--stats", action="store_true", help="print finish reason, speed and acceptance to stderr")
    gen.set_defaults(func=_generate)
    info = sub.add_parser("info", help="show the served model and limits")
    info.set_defaults(func=_info)
    health = sub.add_parser("health", help="exit 0 if the service at --address says SERVING (any Tandem service)")
    health.add_argument("--timeout", type=float, default=3.0)
    health.set_defaults(func=_health)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except TandemError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
