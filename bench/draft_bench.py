"""`tandem-draft-bench`: what one draft step costs in transport and protocol, against a target step.

The draft service runs as its own process with an empty MTP (no layers: it validates the step,
reads every staged row and answers), so the round trip measured is gRPC + staging + bookkeeping
only. It is set beside the target's own verification step (k+1 tokens per sequence) at the same
batch size, for ``shm`` and ``inline``, in one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from target_service.step_output import StepOutput


def target_step_ms(runner, batch: int, k: int, context: int, reps: int) -> float:
    """Median time of one verification forward: ``batch`` sequences x (k + 1) tokens at ``context``."""
    from target_service.model_runner import ForwardBatch

    ids = torch.randint(100, 1000, (batch * context,))
    runner.forward(ForwardBatch(ids, list(range(batch)), [0] * batch, [context] * batch, torch.tensor([0])))
    block = torch.randint(100, 1000, (batch * (k + 1),))
    rows = torch.arange(batch * (k + 1))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        runner.forward(ForwardBatch(block, list(range(batch)), [context] * batch, [k + 1] * batch, rows))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def synthetic_step(batch: int, q_len: int, starts: list[int], hidden: int, context: bool, n: int, k: int):
    tokens = torch.randint(100, 1000, (batch * q_len,))
    return StepOutput(
        request_ids=[f"r{i}" for i in range(batch)],
        slots=list(range(batch)),
        is_context=[context] * batch,
        q_lens=[q_len] * batch,
        input_ids=tokens,
        positions=torch.cat([torch.arange(s, s + q_len) for s in starts]),
        hidden_states=torch.randn(batch * q_len, hidden),
        accepted_tokens=torch.randint(100, 1000, (batch, max(q_len, k + 1))),
        num_accepted=[n if not context else 1] * batch,
        num_output_tokens=[0] * batch,
        num_draft_tokens=[k] * batch,
        next_prompt_token=[-1] * batch,
        finished=[False] * batch,
    )


def draft_rtt_ms(drafter, batch: int, k: int, context: int, hidden: int, steps: int) -> tuple[float, int]:
    """Median propose() round trip of generation steps accepting 2 tokens each; max request bytes."""
    drafter.release([f"r{i}" for i in range(batch)])
    drafter.propose(synthetic_step(batch, context, [0] * batch, hidden, True, 1, k))
    times, position = [], context
    for _ in range(steps):
        out = synthetic_step(batch, k + 1, [position] * batch, hidden, False, 2, k)
        t0 = time.perf_counter()
        drafts = drafter.propose(out)
        times.append(time.perf_counter() - t0)
        assert all(len(d) == k for d in drafts), "the drafter did not answer: see its log"
        position += 2
    return statistics.median(times) * 1000, drafter.stats.max_request_bytes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tandem-draft-bench", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--num-draft-tokens", type=int, default=3)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args(argv)

    from bench.procs import start_service
    from tandem_core.model_loader import load_model
    from target_service.grpc_drafter import GrpcDrafter, GrpcDrafterConfig
    from target_service.model_runner import ModelRunner

    k, batches = args.num_draft_tokens, [int(b) for b in args.batches.split(",")]
    loaded = load_model(args.model)
    runner = ModelRunner(loaded.model, max(batches), args.context + 2 * args.steps + 16)
    hidden = loaded.model.config.hidden_size
    rows = []
    for transport in ("shm", "inline"):
        service = start_service("draft_service", ["--model", args.model, "--num-draft-tokens", str(k), "--empty-mtp"])
        try:
            config = GrpcDrafterConfig(service.address, k, transport=transport, deadline_s=10)
            drafter = GrpcDrafter(
                config,
                runner.vocab_size,
                hidden,
                runner.dtype,
                max(batches),
                args.context + 2 * args.steps + 16,
                max(batches) * args.context,
            )
            while not drafter.attached:
                time.sleep(0.05)
            for b in batches:
                target_ms = target_step_ms(runner, b, k, args.context, max(10, args.steps // 3))
                rtt, size = draft_rtt_ms(drafter, b, k, args.context, hidden, args.steps)
                rows.append((transport, b, rtt, target_ms, size))
                print(f"  {transport} batch {b}: draft {rtt:.2f} ms, target {target_ms:.1f} ms", flush=True)
            drafter.close()
        finally:
            service.stop()
    print(
        f"\n| transport | batch | draft step round trip p50 (ms) | target step p50 (ms, {k + 1} tokens/seq) "
        "| share of target step | largest step request (bytes) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for transport, b, rtt, target_ms, size in rows:
        print(f"| {transport} | {b} | {rtt:.2f} | {target_ms:.1f} | {100 * rtt / target_ms:.1f}% | {size} |")


if __name__ == "__main__":
    main()
