"""One draft depth of the shipped heads on float32 and bfloat16 GEMM weights, in one process, interleaved.

A depth is the MTP block over each sequence's newest row (its cache holding ``--context`` earlier rows),
the sub-vocabulary head and the argmax: what the drafter runs once per draft. Prints the median
milliseconds per depth by sequences and mode, the ratio, and how often the two pick the same draft
token on real hidden states (the target's own over a prompt). Usage, from the repository root:
``PYTHONPATH=. python docs/bench/bf16-heads/probe.py [--repeats 40] [--context 300]``"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from draft_service.checkpoint import build_heads, load_target_pieces
from draft_service.heads import shipped_heads
from draft_service.main import model_directory, pick_sub_vocab
from draft_service.mtp_module import MTPInput
from tandem_core.kv_cache import AttentionBatch


def heads_for(mode: str, weights: str):
    directory = model_directory("default")
    target = load_target_pieces(directory, torch.float32)
    modules = 1 if mode == "eagle" else 4
    heads, _ = build_heads(target, modules, shipped_heads(mode), 0, 30, "auto")
    heads.use_sub_vocab(pick_sub_vocab(shipped_heads(mode), -1))
    heads.use_kernels("onednn", weights)
    return heads


def depth(heads, cache, seqs: int, context: int, tokens, hidden) -> list[int]:
    attn = AttentionBatch.build(list(range(seqs)), [context] * seqs, [1] * seqs)
    out = heads.layers[0](MTPInput(tokens, hidden, attn), heads.embed, heads.rotary, cache)
    return heads.greedy(0, out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="eagle")
    p.add_argument("--repeats", type=int, default=40)
    p.add_argument("--context", type=int, default=300)
    args = p.parse_args()
    torch.manual_seed(0)
    ways = {w: heads_for(args.mode, w) for w in ("float32", "bfloat16")}
    print({w: h.weights for w, h in ways.items()})
    hidden_size = ways["float32"].config.hidden_size
    caches = {w: h.new_caches(1, 8, args.context + 8)[0] for w, h in ways.items()}
    with torch.inference_mode():
        for seqs in (1, 8):
            tokens, hidden = torch.randint(0, 2000, (seqs,)), torch.randn(seqs, hidden_size)
            times = {w: [] for w in ways}
            for _ in range(args.repeats):
                for w, h in ways.items():
                    t0 = time.perf_counter()
                    depth(h, caches[w], seqs, args.context, tokens, hidden)
                    times[w].append(time.perf_counter() - t0)
            med = {w: 1000 * statistics.median(v) for w, v in times.items()}
            print(f"{seqs} sequences: float32 {med['float32']:.2f} ms, bfloat16 {med['bfloat16']:.2f} ms, "
                  f"ratio {med['bfloat16'] / med['float32']:.3f}", flush=True)  # fmt: skip
        agree = total = 0
        gen = torch.Generator().manual_seed(1)
        for _ in range(50):  # hidden states of the right scale: normalised random rows
            tokens = torch.randint(0, 2000, (8,), generator=gen)
            hidden = torch.randn(8, hidden_size, generator=gen)
            picks = [depth(h, caches[w], 8, args.context, tokens, hidden) for w, h in ways.items()]
            agree += sum(a == b for a, b in zip(*picks))
            total += 8
        print(f"same draft token on random rows: {agree} of {total}")


if __name__ == "__main__":
    main()
