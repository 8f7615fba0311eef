"""Pack a time-boxed training run for the trip back: ``python -m training.gpu_pack`` (gpu_recipe.sh's last step).

The device machine returns a few files of bounded size, so this keeps only what is worth bringing back:
the best heads of each mode (by the validation's served acceptance length at k=3), every run's curve and
summary, and the token ids of every distilled sequence (no hidden states: a prefill recomputes them),
so the same data can train heads again on a CPU.
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import tarfile
from pathlib import Path

import torch

from training.distill import load_shards

PART_BYTES = 15_000_000  # the device machine returns files of at most 16 MiB


def served_k3(meta: dict) -> float:
    served = meta.get("validation", {}).get("served_acceptance_length", {})
    return float(served.get("3", served.get(3, 0.0)))


def summarise(runs: Path) -> dict[str, dict]:
    """run name -> its mtp.json (finished runs only)."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(runs.glob("*/mtp.json"))}


def best_per_mode(summary: dict[str, dict]) -> dict[str, str]:
    best: dict[str, str] = {}
    for name, meta in summary.items():
        mode = meta["mode"]
        if mode not in best or served_k3(meta) > served_k3(summary[best[mode]]):
            best[mode] = name
    return best


def pack_heads(runs: Path, summary: dict[str, dict], out: Path) -> list[Path]:
    """heads.tar (best run of each mode in full; curve, summary and log of every run), split in parts."""
    best = set(best_per_mode(summary).values())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for run in sorted(p for p in runs.iterdir() if p.is_dir()):
            for f in sorted(run.iterdir()):
                if (run.name in best and f.name != "trainer_state.pt") or f.name in ("curve.jsonl", "mtp.json"):
                    tar.add(f, arcname=f"{run.name}/{f.name}")
            log = runs / f"{run.name}.log"
            if log.exists():
                tar.add(log, arcname=f"{run.name}/train.log")
    data = buf.getvalue()
    parts = []
    for n in range(0, len(data), PART_BYTES):
        part = out / f"heads.tar.{n // PART_BYTES:02d}"
        part.write_bytes(data[n : n + PART_BYTES])
        parts.append(part)
    return parts


def pack_tokens(dirs: list[Path], out: Path) -> Path:
    """tokens.pt.xz: per sequence its source, question id, category, prompt length and int32 token ids."""
    rows = [
        {
            "source": s.source,
            "question_id": s.question_id,
            "category": s.category,
            "prompt_len": s.prompt_len,
            "tokens": s.tokens.to(torch.int32),
        }
        for d in dirs
        for s in load_shards(d)
    ]
    buf = io.BytesIO()
    torch.save(rows, buf)
    path = out / "tokens.pt.xz"
    path.write_bytes(lzma.compress(buf.getvalue(), preset=6))
    return path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m training.gpu_pack", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=Path, required=True)
    p.add_argument("--data", type=Path, nargs="*", default=[])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = summarise(args.runs)
    short = {
        name: {"served_k3": served_k3(m), "steps": m.get("optimizer_steps"), "sequences": m.get("trained_sequences")}
        for name, m in summary.items()
    }
    (args.out / "summary.json").write_text(json.dumps({"runs": short, "best": best_per_mode(summary)}, indent=1))
    print(json.dumps(short, indent=1), "best:", best_per_mode(summary))
    for part in pack_heads(args.runs, summary, args.out):
        print(part, part.stat().st_size)
    if args.data:
        path = pack_tokens(args.data, args.out)
        print(path, path.stat().st_size)


if __name__ == "__main__":
    main()
