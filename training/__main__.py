"""One command: distil the training prompts, then train the Eagle and vanilla heads on them.

    python -m training --out runs/heads [--minutes 25] [--model default]

Writes OUT/data (resumable shards), OUT/eagle and OUT/vanilla (each resumable from its
trainer_state.pt); rerunning the same command continues where it stopped. Both modes train with the
answer-only objective (draft_service/heads/*/TRAINING.md records the two-stage run of the shipped heads).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from training import distill, train


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m training", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default="default")
    p.add_argument("--minutes", type=float, default=25.0, help="training budget per mode")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    data = args.out / "data"
    distill.main(["--model", args.model, "--out", str(data)])
    for mode, epochs in (("eagle", "10"), ("vanilla", "7")):
        train.main(
            ["--data", str(data), "--model", args.model, "--mode", mode, "--epochs", epochs, "--answer-only",
             "--depth-decay", "0.8", "--tokens-per-step", "1024", "--max-seq-pairs", "1024",
             "--max-minutes", str(args.minutes), "--seed", str(args.seed), "--out", str(args.out / mode)]
        )  # fmt: skip


if __name__ == "__main__":
    main()
