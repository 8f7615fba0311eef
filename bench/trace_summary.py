"""What a ``--step-trace`` file says, workload by workload: steps, time per step and where it went, and
how well the draft policy's expected tokens matched what the sequences took.

    python -m bench.trace_summary TRACE.jsonl[.gz] [--out DIR] [--workloads 2,3] [--shape 1,1,1,1]

A workload starts at a step that prefills from position 0 after a run of decode steps (``tandem-bench``
runs one concurrent workload at a time). Each row's figures are means over its decode steps; the
calibration pairs each step's expected tokens (``expected``, auto only) with what the same slot took in
the next step, by the number of sequences in that step and the drafts it verified. ``--workloads``
keeps only those workloads (by index) for both tables; ``--shape`` adds, per workload, the forwards of
the decode steps whose sequences verified exactly these numbers of drafts (in any order), one batched
attention call and split apart: how many, their median milliseconds and their mean cached tokens.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Workload:
    index: int
    steps: int
    prefill_steps: int
    prefill_s: float  # seconds of the steps that carried prefill chunks
    decode_steps: int
    decode_ms: float  # per decode step: forward + drafting + other
    forward_ms: float
    predicted_ms: float  # the policy's price of the forward
    draft_ms: float
    other_ms: float
    drafts_verified: int
    tokens_per_decode_step: float
    split_steps: int


@dataclass(frozen=True)
class Calibration:
    seqs: int
    drafts: int
    samples: int
    expected: float  # mean tokens the policy expected
    took: float  # mean tokens the sequence took


def load(path: Path) -> list[dict]:
    """A trace file, plain or gzipped (``.gz``)."""
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def workloads(steps: list[dict]) -> list[list[dict]]:
    out: list[list[dict]] = [[]]
    for s in steps:
        fresh = not s["decode"] and all(start == 0 for start in s["starts"])
        if fresh and out[-1] and out[-1][-1]["decode"]:
            out.append([])
        out[-1].append(s)
    return [w for w in out if w]


def _mean_ms(steps: list[dict], key: str) -> float:
    return 1e3 * sum(s[key] for s in steps) / max(1, len(steps))


def summarise(index: int, steps: list[dict]) -> Workload:
    decode = [s for s in steps if s["decode"]]
    prefill = [s for s in steps if not s["decode"]]
    total = [s["forward_s"] + s["draft_s"] + s["other_s"] for s in decode]
    return Workload(
        index=index,
        steps=len(steps),
        prefill_steps=len(prefill),
        prefill_s=sum(s["forward_s"] + s["draft_s"] + s["other_s"] for s in prefill),
        decode_steps=len(decode),
        decode_ms=1e3 * sum(total) / max(1, len(decode)),
        forward_ms=_mean_ms(decode, "forward_s"),
        predicted_ms=_mean_ms(decode, "predicted_s"),
        draft_ms=_mean_ms(decode, "draft_s"),
        other_ms=_mean_ms(decode, "other_s"),
        drafts_verified=sum(q - 1 for s in decode for q in s["q_lens"]),
        tokens_per_decode_step=sum(sum(s["accepted"]) for s in decode) / max(1, len(decode)),
        split_steps=sum(s["split"] for s in decode),
    )


def calibration(steps: list[dict]) -> list[Calibration]:
    """The policy's expected tokens for a slot against what that slot took next step."""
    sums: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for before, after in zip(steps, steps[1:]):
        if not after["decode"]:
            continue
        asked = {slot: (e, d) for slot, e, d in zip(before["slots"], before["expected"], before["drafts_asked"])}
        for slot, q, took in zip(after["slots"], after["q_lens"], after["accepted"]):
            expected, drafts = asked.get(slot, (0.0, -1))
            if expected > 0 and drafts == q - 1:
                acc = sums[(len(after["q_lens"]), drafts)]
                acc[0] += 1
                acc[1] += expected
                acc[2] += took
    return [Calibration(n, d, int(c), e / c, t / c) for (n, d), (c, e, t) in sorted(sums.items())]


@dataclass(frozen=True)
class ShapeForwards:
    workload: int
    split: bool
    steps: int
    median_ms: float
    mean_kv: float  # cached tokens of the step, summed over its sequences


def shape_forwards(index: int, steps: list[dict], drafts: list[int]) -> list[ShapeForwards]:
    """The decode steps of one workload whose sequences verified ``drafts`` (sorted), dense then split."""
    out = []
    for split in (False, True):
        same = [
            s
            for s in steps
            if s["decode"] and s["split"] == split and sorted(q - 1 for q in s["q_lens"]) == sorted(drafts)
        ]
        if same:
            ms = sorted(1e3 * s["forward_s"] for s in same)
            kv = sum(sum(s["starts"]) for s in same) / len(same)
            out.append(ShapeForwards(index, split, len(same), ms[len(ms) // 2], kv))
    return out


def markdown(rows: list[Workload], calib: list[Calibration], shapes: list[ShapeForwards] = ()) -> str:
    lines = [
        "| workload | decode steps | ms per step (forward / priced / drafting / other) | drafts verified "
        "| tokens per step | split steps | prefill steps (s) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for w in rows:
        lines.append(
            f"| {w.index} | {w.decode_steps} | {w.decode_ms:.1f} ({w.forward_ms:.1f} / {w.predicted_ms:.1f} / "
            f"{w.draft_ms:.1f} / {w.other_ms:.1f}) | {w.drafts_verified} | {w.tokens_per_decode_step:.2f} "
            f"| {w.split_steps} | {w.prefill_steps} ({w.prefill_s:.2f}) |"
        )
    if calib:
        lines += [
            "",
            "| sequences in step | drafts | samples | expected tokens | took |",
            "| --- | --- | --- | --- | --- |",
        ]
        lines += [f"| {c.seqs} | {c.drafts} | {c.samples} | {c.expected:.3f} | {c.took:.3f} |" for c in calib]
    if shapes:
        lines += [
            "",
            "| workload | attention | steps | median forward ms | mean cached tokens |",
            "| --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {f.workload} | {'split' if f.split else 'one call'} | {f.steps} | {f.median_ms:.1f} | {f.mean_kv:.0f} |"
            for f in shapes
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.trace_summary", description=__doc__.split("\n")[0])
    p.add_argument("trace", type=Path, help="a --step-trace file")
    p.add_argument("--out", type=Path, help="write trace_summary.json and .md here")
    p.add_argument("--workloads", default="", help="only these workload indices, e.g. 2,3,6,7")
    p.add_argument("--shape", default="", help="drafts verified per sequence, e.g. 1,1,1,1: forwards of such steps")
    args = p.parse_args(argv)
    kept = [(i, w) for i, w in enumerate(workloads(load(args.trace)))]
    if args.workloads:
        wanted = {int(i) for i in args.workloads.split(",")}
        kept = [(i, w) for i, w in kept if i in wanted]
    rows = [summarise(i, w) for i, w in kept]
    calib = calibration([s for _, w in kept for s in w])
    drafts = [int(d) for d in args.shape.split(",")] if args.shape else []
    shapes = [f for i, w in kept for f in shape_forwards(i, w, drafts)] if drafts else []
    text = markdown(rows, calib, shapes)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.trace.name.removesuffix(".gz").removesuffix(".jsonl")
        data = {
            "trace": args.trace.name,
            "workloads": [asdict(w) for w in rows],
            "calibration": [asdict(c) for c in calib],
            "shapes": [asdict(f) for f in shapes],
        }
        (args.out / f"{stem}.summary.json").write_text(json.dumps(data, indent=1))
        (args.out / f"{stem}.summary.md").write_text(text)


if __name__ == "__main__":
    main()
