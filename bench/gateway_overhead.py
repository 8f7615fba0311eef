"""What the OpenAI-compatible gateway costs: the same prompts through the gateway and straight over gRPC.

Starts a target (no drafter) and a gateway in front of it (or uses ``--target`` / ``--gateway``), then
for every prompt, back to back in rotating order: a gRPC stream through the SDK, a streamed chat
completion through the gateway with the official ``openai`` client, and the same HTTP request with a
plain ``httpx`` client reading the server-sent events (what the gateway itself adds, without the
openai package's own parsing). Greedy, EOS ignored, the same number of tokens every way. Reports
median time to first token and tokens/s of each path, and for each HTTP client the median per-group
difference and ratio against gRPC with 95% bootstrap intervals.

    python -m bench.gateway_overhead --num-prompts 8 --rounds 4 --max-tokens 64 --out docs/bench
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import spec_bench
from bench.report import save


@dataclass(frozen=True)
class Timing:
    ttft_s: float
    tokens: int
    seconds: float  # request to last token


def via_grpc(client, prompt: str, max_tokens: int) -> Timing:
    t0 = time.perf_counter()
    first = None
    stream = client.stream([{"role": "user", "content": prompt}], max_tokens=max_tokens, ignore_eos=True)
    for chunk in stream:
        if chunk.text:  # like the gateway side: the first chunk that carries text
            first = first or time.perf_counter()
    end = time.perf_counter()
    return Timing(first - t0, stream.completion.usage.completion_tokens, end - t0)


def via_gateway(oai, model: str, prompt: str, max_tokens: int) -> Timing:
    t0 = time.perf_counter()
    first, tokens = None, 0
    stream = oai.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter()
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    end = time.perf_counter()
    return Timing(first - t0, tokens, end - t0)


def via_httpx(http, url: str, model: str, prompt: str, max_tokens: int) -> Timing:
    """The same streamed chat completion, events read as lines: no client-side object building."""
    body = {
        "model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True,
    }  # fmt: skip
    t0 = time.perf_counter()
    first, tokens = None, 0
    with http.stream("POST", url + "/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if first is None and line.startswith("data: ") and '"content":"' in line.replace(" ", ""):
                first = time.perf_counter()
            elif line.startswith("data: {") and '"usage"' in line:
                tokens = json.loads(line[6:]).get("usage", {}).get("completion_tokens", tokens)
    end = time.perf_counter()
    return Timing(first - t0, tokens, end - t0)


HTTP_PATHS = ("openai", "httpx")


def measure(target: str, gateway_url: str, prompts: list[str], max_tokens: int, rounds: int) -> dict:
    """``rounds`` passes over ``prompts``; each group runs the three paths in rotating order (drift cancels)."""
    import httpx
    import openai

    from client import TandemClient

    oai = openai.OpenAI(base_url=gateway_url + "/v1", api_key="unused", max_retries=0, timeout=600)
    model = oai.models.list().data[0].id
    rows = []
    with TandemClient(target, timeout=600) as client, httpx.Client(timeout=600) as http:
        paths = {
            "grpc": lambda prompt: via_grpc(client, prompt, max_tokens),
            "openai": lambda prompt: via_gateway(oai, model, prompt, max_tokens),
            "httpx": lambda prompt: via_httpx(http, gateway_url, model, prompt, max_tokens),
        }
        for path in paths.values():  # warm-up every path
            path(prompts[0])
        names, total = list(paths), rounds * len(prompts)
        for n in range(total):
            prompt = prompts[n % len(prompts)]
            order = names[n % 3 :] + names[: n % 3]
            row = {name: paths[name](prompt).__dict__ for name in order}
            rows.append(row)
            cells = " | ".join(
                f"{name} TTFT {row[name]['ttft_s'] * 1e3:6.1f} ms {_tok_s(row[name]):5.1f} tok/s" for name in names
            )
            print(f"[{n + 1}/{total}] {cells}", flush=True)
    return summarize(rows, len(prompts), max_tokens, rounds)


def _tok_s(timing: dict) -> float:
    return timing["tokens"] / timing["seconds"]


def _itl_ms(timing: dict) -> float:
    """Mean time between tokens after the first, in ms."""
    return 1e3 * (timing["seconds"] - timing["ttft_s"]) / max(1, timing["tokens"] - 1)


def _median_ci(values: list[float], draws: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of the median (seeded: the same rows give the same interval)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def summarize(rows: list[dict], num_prompts: int, max_tokens: int, rounds: int) -> dict:
    med = statistics.median
    out = {
        "num_prompts": num_prompts,
        "rounds": rounds,
        "max_tokens": max_tokens,
        "rows": rows,
        "ttft_ms_grpc": med(r["grpc"]["ttft_s"] for r in rows) * 1e3,
        "tok_s_grpc": med(_tok_s(r["grpc"]) for r in rows),
        "itl_ms_grpc": med(_itl_ms(r["grpc"]) for r in rows),
    }
    for name in HTTP_PATHS:
        added = [(r[name]["ttft_s"] - r["grpc"]["ttft_s"]) * 1e3 for r in rows]
        ratios = [_tok_s(r[name]) / _tok_s(r["grpc"]) for r in rows]
        itl_added = [_itl_ms(r[name]) - _itl_ms(r["grpc"]) for r in rows]
        out[name] = {
            "ttft_ms": med(r[name]["ttft_s"] for r in rows) * 1e3,
            "tok_s": med(_tok_s(r[name]) for r in rows),
            "ttft_ms_added_median": med(added),
            "ttft_ms_added_ci95": _median_ci(added),
            "tok_s_ratio_median": med(ratios),
            "tok_s_ratio_ci95": _median_ci(ratios),
            "itl_ms_added_median": med(itl_added),
            "itl_ms_added_ci95": _median_ci(itl_added),
        }
    return out


_CLIENTS = {"openai": "gateway, `openai` client", "httpx": "gateway, plain `httpx` reading the events"}


def markdown(results: dict, command: str) -> str:
    r = results
    lines = [
        "# Gateway overhead: OpenAI HTTP through the gateway against gRPC straight to the target",
        "",
        f"Target model: {r.get('model', 'default')}. {r['num_prompts']} prompts x {r['rounds']} rounds x "
        f"{r['max_tokens']} tokens, batch 1; each group runs the three paths back to back in rotating order. "
        f"Generated by `{command}`.",
        "",
        "| path | TTFT ms (median) | tokens/s (median) | TTFT added (median, 95% interval) "
        "| tokens/s / gRPC (median, 95% interval) | time between tokens added |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| gRPC (SDK stream) | {r['ttft_ms_grpc']:.1f} | {r['tok_s_grpc']:.2f} | - | - | "
        f"- (base {r['itl_ms_grpc']:.1f} ms) |",
    ]
    for name in HTTP_PATHS:
        h = r[name]
        (lo, hi), (rlo, rhi), (ilo, ihi) = h["ttft_ms_added_ci95"], h["tok_s_ratio_ci95"], h["itl_ms_added_ci95"]
        lines.append(
            f"| {_CLIENTS[name]} | {h['ttft_ms']:.1f} | {h['tok_s']:.2f} | {h['ttft_ms_added_median']:.1f} ms "
            f"({lo:.1f} to {hi:.1f}) | {h['tok_s_ratio_median']:.3f} ({rlo:.3f} to {rhi:.3f}) | "
            f"{h['itl_ms_added_median']:.2f} ms ({ilo:.2f} to {ihi:.2f}) |"
        )
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.gateway_overhead", description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=Path, default=spec_bench.DEFAULT_PROMPTS)
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3, help="passes over the prompts")
    p.add_argument(
        "--model",
        default="default",
        help="model of the target started: 'default', a directory, or 'tiny' (a random 2-layer model with the "
        "default tokenizer: its forward costs milliseconds, so the gateway's own cost stands out of the noise)",
    )
    p.add_argument("--target", help="address of a running target (else one is started)")
    p.add_argument("--gateway", help="URL of a running gateway in front of --target (else one is started)")
    p.add_argument("--out", type=Path, default=Path("bench-results"))
    args = p.parse_args(argv)
    prompts = [q.text for q in spec_bench.split(spec_bench.load(args.prompts), "held_out")][: args.num_prompts]
    started = []
    try:
        target, gateway = args.target, args.gateway
        if target is None:
            from bench.procs import start_target

            model = args.model
            if model == "tiny":
                from bench.tiny_checkpoint import write_tiny_checkpoint

                model = str(write_tiny_checkpoint(Path(tempfile.mkdtemp(prefix="tandem-tiny-"))))
            started.append(start_target("--model", model, "--max-slots", "2", "--max-seq-len", "1024"))
            target = started[-1].address
        if gateway is None:
            from bench.procs import GatewayProcess

            started.append(GatewayProcess(target))
            gateway = started[-1].url
        results = measure(target, gateway, prompts, args.max_tokens, args.rounds) | {"model": args.model}
    finally:
        for svc in reversed(started):
            svc.stop()
    text = markdown(results, "python -m bench.gateway_overhead " + " ".join(argv))
    save(args.out, "gateway", results, text)
    print(text)


if __name__ == "__main__":
    main()
