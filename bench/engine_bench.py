"""`tandem-bench`: the engine (through its gRPC API) against transformers' generate, side by side.

1. Batch 1, alternating prompt by prompt: the target service streams a prompt, then transformers'
   `generate` decodes the same prompt in this process (same weights, same thread count), so noise hits
   both alike. Reports tokens/s of each and the median of the per-prompt ratios.
2. Aggregate tokens/s with 1, 4 and 8 concurrent streams against the same server.

Every generation produces exactly --max-tokens tokens (EOS ignored) so rates compare like for like.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from bench.spec_bench import DEFAULT_PROMPTS


@dataclass(frozen=True)
class StreamTiming:
    tokens: int
    seconds: float  # request start to last token
    ttft: float  # request start to first token


def load_prompts(path: Path, n: int) -> list[str]:
    lines = path.read_text().splitlines()[:n]
    return [json.loads(line)["turns"][0] for line in lines]


def timed_stream(client, prompt: str, max_tokens: int) -> StreamTiming:
    t0 = time.perf_counter()
    first = None
    stream = client.stream([{"role": "user", "content": prompt}], max_tokens=max_tokens, ignore_eos=True)
    for _ in stream:
        first = first or time.perf_counter()
    end = time.perf_counter()
    return StreamTiming(stream.completion.usage.completion_tokens, end - t0, (first or end) - t0)


def timed_hf(model, tokenizer, prompt: str, max_tokens: int) -> StreamTiming:
    from bench.peers import hf_generate

    t0 = time.perf_counter()
    new_ids = hf_generate(model, tokenizer, prompt, max_tokens)
    return StreamTiming(len(new_ids), time.perf_counter() - t0, float("nan"))


def batch1_side_by_side(client, prompts, max_tokens) -> dict:
    from tandem_core.model_loader import load_model

    hf = load_model("default", "float32")
    timed_hf(hf.model, hf.tokenizer, prompts[0], 4)  # warm-up
    timed_stream(client, prompts[0], 4)
    rows = []
    for i, prompt in enumerate(prompts):
        ours = timed_stream(client, prompt, max_tokens)
        theirs = timed_hf(hf.model, hf.tokenizer, prompt, max_tokens)
        rows.append((ours.tokens / ours.seconds, theirs.tokens / theirs.seconds, ours.ttft))
        print(f"  prompt {i}: tandem {rows[-1][0]:6.1f} tok/s   transformers {rows[-1][1]:6.1f} tok/s", flush=True)
    return {
        "tandem_tok_s_median": statistics.median(r[0] for r in rows),
        "transformers_tok_s_median": statistics.median(r[1] for r in rows),
        "ratio_median": statistics.median(r[0] / r[1] for r in rows),
        "tandem_ttft_s_median": statistics.median(r[2] for r in rows),
    }


def aggregate(address: str, prompts: list[str], max_tokens: int, concurrency: int) -> dict:
    from bench.pool import run_streams

    timings, wall = run_streams(address, prompts, concurrency, lambda c, p: timed_stream(c, p, max_tokens), 600)
    tokens = sum(t.tokens for t in timings)
    return {
        "concurrency": concurrency,
        "requests": len(timings),
        "tokens": tokens,
        "wall_s": wall,
        "aggregate_tok_s": tokens / wall,
        "per_stream_tok_s_median": statistics.median(t.tokens / t.seconds for t in timings),
        "ttft_s_median": statistics.median(t.ttft for t in timings),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tandem-bench", description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS, help="Spec-Bench format jsonl")
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--address", help="use a running target service instead of starting one")
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    from client import TandemClient

    prompts = load_prompts(args.prompts, args.num_prompts)
    levels = [int(c) for c in args.concurrency.split(",")]
    server = None
    address = args.address
    results: dict = {"max_tokens": args.max_tokens, "num_prompts": len(prompts)}
    try:
        if address is None:
            server = _start_server(max(levels))
            address = server.address
        with TandemClient(address, timeout=600) as client:
            client.wait_until_serving(300)
            if not args.skip_transformers:
                print(f"batch 1, {len(prompts)} prompts x {args.max_tokens} tokens, alternating:", flush=True)
                results["batch1"] = batch1_side_by_side(client, prompts, args.max_tokens)
        results["aggregate"] = []
        for c in levels:
            work = prompts * max(1, -(-c * 2 // len(prompts)))  # at least two requests per stream
            results["aggregate"].append(aggregate(address, work, args.max_tokens, c))
            print(f"  concurrency {c}: {results['aggregate'][-1]['aggregate_tok_s']:.1f} tok/s", flush=True)
    finally:
        if server is not None:
            server.stop()
    print(render(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def render(results: dict) -> str:
    lines = []
    b1 = results.get("batch1")
    if b1:
        lines += [
            "",
            f"| batch 1 ({results['num_prompts']} prompts x {results['max_tokens']} tokens) | tokens/s (median) |",
            "| --- | --- |",
            f"| tandem (gRPC stream, no speculation) | {b1['tandem_tok_s_median']:.1f} |",
            f"| transformers generate | {b1['transformers_tok_s_median']:.1f} |",
            f"| ratio tandem / transformers (median of per-prompt ratios) | {b1['ratio_median']:.2f} |",
        ]
    agg = results.get("aggregate", [])
    if agg:
        base = agg[0]["aggregate_tok_s"]
        lines += [
            "",
            "| streams | requests | aggregate tok/s | x first row | per-stream tok/s (median) | TTFT s |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {a['concurrency']} | {a['requests']} | {a['aggregate_tok_s']:.1f} | {a['aggregate_tok_s'] / base:.2f} "
            f"| {a['per_stream_tok_s_median']:.1f} | {a['ttft_s_median']:.2f} |"
            for a in agg
        ]
    return "\n".join(lines)


def _start_server(slots: int):
    """Start a target service process on a free port (the bench owns its lifetime)."""
    from bench.procs import start_service

    return start_service(
        "target_service",
        ["--max-slots", str(slots), "--max-batch-tokens", str(max(256, slots * 5)), "--max-seq-len", "1024"],
    )


if __name__ == "__main__":
    main()
