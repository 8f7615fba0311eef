"""Offline acceptance of MTP heads, per category, on recorded greedy answers of any split.

    python -m training.distill --split held_out --max-tokens 128 --out $D/held-out   # once
    python -m training.evaluate --data $D/held-out --heads HEADS_DIR [HEADS_DIR ...]

For each heads directory (``mtp.json``, ``mtp.safetensors``, ``draft_vocab.safetensors``) and each
category: the first draft's acceptance, the mean acceptance length at ``k`` over every answer row, and
the walked length at ``k`` (steps starting only where the previous one ended, as serving walks; on
the benchmark's held-out prompts this matched what ``tandem-bench`` served). Minutes, not the
benchmark's hour: a quick comparison of heads before a benchmark run. Evaluation only: data of the
held-out split must never reach ``training.train``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import torch

from draft_service.checkpoint import load_mtp_checkpoint
from draft_service.mtp_module import MTPHeads
from draft_service.sub_vocab import SubVocab
from training.distill import DistillSequence, load_shards
from training.train import TrainConfig, Trainer, acceptance_estimate


def trainer_for(target: torch.nn.Module, heads_dir: Path, depths: int) -> Trainer:
    mode = json.loads((heads_dir / "mtp.json").read_text())["mode"]
    heads = MTPHeads(target, 1 if mode == "eagle" else depths)
    load_mtp_checkpoint(heads, heads_dir)
    sub = SubVocab.load(heads_dir)
    cfg = TrainConfig(mode, depths, len(sub.ids), 1, 0.0, 1, 2048, 1 << 20, 0, 0, answer_only=True)
    return Trainer(heads.eval(), cfg, sub, heads_dir, "cpu")


@torch.inference_mode()
def evaluate(trainer: Trainer, data: list[DistillSequence], k: int) -> dict[str, tuple[float, float, float]]:
    """category (and "all") -> (first draft accepted, acceptance length at k, walked length at k)."""
    groups: dict[str, list[DistillSequence]] = defaultdict(list)
    for s in data:
        groups[s.category].append(s)
    out = {}
    for name, seqs in sorted(groups.items()) + [("all", data)]:
        e = acceptance_estimate(trainer, seqs)
        out[name] = (e["accept_prefix"][0], e["mean_acceptance_length"][k], e["served_acceptance_length"][k])
    return out


def main(argv: list[str] | None = None) -> None:
    from tandem_core.model_loader import load_model

    p = argparse.ArgumentParser(prog="python -m training.evaluate", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="a training.distill directory (greedy answers)")
    p.add_argument("--heads", type=Path, nargs="+", required=True)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--model", default="default")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    data = [s for s in load_shards(args.data) if s.source == "greedy"]
    target = load_model(args.model, "float32").model
    results = {}
    for heads_dir in args.heads:
        figures = evaluate(trainer_for(target, heads_dir, max(args.k, 1)), data, args.k)
        results[str(heads_dir)] = figures
        print(f"{heads_dir} (first draft / AL k={args.k} / walked k={args.k})")
        for name, (first, length, walked) in figures.items():
            print(f"  {name:15s} {first:.3f} / {length:.3f} / {walked:.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
