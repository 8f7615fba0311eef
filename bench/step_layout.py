"""`python -m bench.step_layout`: the cost of one batched target forward by how the step is laid out.

A serving step rarely looks like ``tandem-qcurve``'s cells: its sequences sit in scattered cache slots
(requests come and go), their contexts differ, and the draft policy may give drafts to some of them
only. Each layout below is one ``ModelRunner.forward`` over ``--seqs`` sequences, timed interleaved
with the others (median of ``--repeats``); the first layout is the reference. ``--attention
padded,split`` times every layout both ways, interleaved: sequences with different numbers of new
tokens in one batched call, queries padded (the engine's way), or one call per sequence (before).
Writes ``step_layout.json`` and ``step_layout.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from tandem_core import kv_cache

# per setting, the most new tokens a sequence may be padded to within one batched call
ATTENTION = {"padded": kv_cache.DENSE_MAX_PADDED_Q, "split": 1}


@dataclass(frozen=True)
class Layout:
    name: str
    slots: list[int]  # [seqs] cache slot of each sequence, in step order
    starts: list[int]  # [seqs] cached tokens before the step
    q_lens: list[int]  # [seqs] new tokens (1 + drafts)


def layouts(seqs: int, short: int, long: int) -> list[Layout]:
    """Slots in order or scattered, equal or mixed contexts, no drafts, one sequence or all drafting."""
    in_order = list(range(seqs))
    scattered = in_order[1::2] + in_order[0::2]
    mixed = [long if i % 3 == 1 else short + i * (long - short) // (4 * seqs) for i in range(seqs)]
    equal = [short] * seqs
    one = [2] + [1] * (seqs - 1)
    half = [1 + i % 2 for i in range(seqs)]
    ramp = [1 + i % 4 for i in range(seqs)]
    return [
        Layout("slots in order, equal contexts, q=1", in_order, equal, [1] * seqs),
        Layout("slots in order, mixed contexts, q=1", in_order, mixed, [1] * seqs),
        Layout("slots scattered, mixed contexts, q=1", scattered, mixed, [1] * seqs),
        Layout("slots scattered, mixed contexts, one sequence q=2", scattered, mixed, one),
        Layout("slots scattered, mixed contexts, all q=2", scattered, mixed, [2] * seqs),
        Layout("slots scattered, mixed contexts, all q=4", scattered, mixed, [4] * seqs),
        Layout("slots in order, equal contexts, all q=4", in_order, equal, [4] * seqs),
        # one batched attention call, until the scattered slots or the long contexts' padding split it
        Layout("slots in order, long equal contexts, q=1", in_order, [long] * seqs, [1] * seqs),
        Layout("slots in order, long equal contexts, one sequence q=2", in_order, [long] * seqs, one),
        Layout("slots in order, long equal contexts, all q=2", in_order, [long] * seqs, [2] * seqs),
        # what the draft policy's per-sequence choice makes of a step: different drafts per sequence
        Layout("slots in order, equal contexts, one sequence q=2", in_order, equal, one),
        Layout("slots in order, equal contexts, half q=2", in_order, equal, half),
        Layout("slots in order, equal contexts, q=1..4", in_order, equal, ramp),
        Layout("slots in order, mixed contexts, half q=2", in_order, mixed, half),
    ]


def forward_batch(layout: Layout, vocab: int):
    from target_service.model_runner import ForwardBatch

    tokens = sum(layout.q_lens)
    return ForwardBatch(
        input_ids=torch.randint(0, vocab, (tokens,)),
        slots=list(layout.slots),
        starts=list(layout.starts),
        q_lens=list(layout.q_lens),
        logit_rows=torch.arange(tokens),
    )


def measure(runner, cases: list[Layout], repeats: int, attention: tuple[str, ...] = ("padded",)) -> list[dict]:
    """One row per layout and attention setting, in that order; ``vs_first``: against the first layout
    under the same setting."""
    times: dict[tuple[str, str], list[float]] = {(c.name, a): [] for c in cases for a in attention}
    for rep in range(repeats + 1):  # the first round warms up
        for case in cases:
            for setting in attention:
                times[case.name, setting].append(_timed(runner, case, setting))
        if rep:
            print(f"round {rep}/{repeats}: " + "  ".join(f"{1e3 * v[-1]:.0f}" for v in times.values()), flush=True)
    rows = []
    for setting in attention:
        base = statistics.median(times[cases[0].name, setting][1:])
        for c in cases:
            median = statistics.median(times[c.name, setting][1:])
            rows.append({"layout": c.name, "attention": setting, "tokens": sum(c.q_lens),
                         "kv_tokens": sum(c.starts), "ms": 1e3 * median, "vs_first": median / base})  # fmt: skip
    return rows


def _timed(runner, case: Layout, setting: str) -> float:
    batch = forward_batch(case, runner.vocab_size)
    kept, kv_cache.DENSE_MAX_PADDED_Q = kv_cache.DENSE_MAX_PADDED_Q, ATTENTION[setting]
    try:
        t0 = time.perf_counter()
        runner.forward(batch)
        return time.perf_counter() - t0
    finally:
        kv_cache.DENSE_MAX_PADDED_Q = kept


def markdown(results: dict) -> str:
    lines = [
        "# Target forward cost by step layout",
        "",
        f"{results['model']} in float32, kernels `{results['kernels']}`, {results['seqs']} sequences per step, "
        f"on {results['machine']}; median of {results['repeats']} interleaved runs. Generated by "
        f"`{results['command']}` on {results['date']}.",
        "",
        "| layout | attention | new tokens | cached tokens | ms | x first row |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['layout']} | {r['attention']} | {r['tokens']} | {r['kv_tokens']} | {r['ms']:.1f} | "
            f"{r['vs_first']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    import sys

    from bench.report import add_forward_args, forward_meta, save
    from tandem_core.model_loader import load_model
    from target_service.model_runner import ModelRunner

    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.step_layout", description=__doc__.splitlines()[0])
    add_forward_args(p)
    p.add_argument("--short", type=int, default=300, help="context of the short sequences")
    p.add_argument("--long", type=int, default=1400, help="context of every third sequence in mixed layouts")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--attention", default="padded", help=f"comma list of {', '.join(ATTENTION)}")
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = p.parse_args(argv)
    torch.manual_seed(0)
    cases = layouts(args.seqs, args.short, args.long)
    max_len = max(s + q for c in cases for s, q in zip(c.starts, c.q_lens)) + 1
    runner = ModelRunner(load_model(args.model, "float32").model, args.seqs, max_len, args.kernels)
    results = forward_meta("bench.step_layout", argv, args, runner)
    results["rows"] = measure(runner, cases, args.repeats, tuple(args.attention.split(",")))
    text = markdown(results)
    save(args.out, "step_layout", results, text)
    print(text)


if __name__ == "__main__":
    main()
