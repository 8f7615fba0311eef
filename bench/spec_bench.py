"""Spec-Bench-format prompts and the project's fixed train / held-out split.

A line is ``{"question_id", "category", "turns": [...]}``. Benchmarks use the first turn (answers to
later turns would need the model's own first answer); distillation also uses the later turns. The
eight MT-bench categories (writing, roleplay, ...) are reported together as ``mt_bench``, as
Spec-Bench does. Every ``HELD_OUT_EVERY``-th line (by line index) is held out for evaluation; the
trainer never sees those prompts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PROMPTS = Path(__file__).resolve().parents[2] / "shared" / "data" / "spec_bench_dev.jsonl"
HELD_OUT_EVERY = 8
SPEC_BENCH_TASKS = ("translation", "summarization", "qa", "math_reasoning", "rag")


@dataclass(frozen=True)
class Prompt:
    index: int  # line index in the file
    question_id: int
    category: str  # Spec-Bench task: mt_bench, translation, summarization, qa, math_reasoning, rag
    text: str  # first turn
    followups: tuple[str, ...] = ()  # later turns


def load(path: Path = DEFAULT_PROMPTS) -> list[Prompt]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no Spec-Bench jsonl here (pass --prompts)")
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        row = json.loads(line)
        category = row["category"] if row["category"] in SPEC_BENCH_TASKS else "mt_bench"
        turns = row["turns"]
        out.append(Prompt(i, int(row["question_id"]), category, turns[0], tuple(turns[1:])))
    return out


def split(prompts: list[Prompt], part: str) -> list[Prompt]:
    """``part``: "train", "held_out" or "all"."""
    if part == "all":
        return list(prompts)
    held = [p for p in prompts if p.index % HELD_OUT_EVERY == 0]
    if part == "held_out":
        return held
    if part == "train":
        return [p for p in prompts if p.index % HELD_OUT_EVERY != 0]
    raise ValueError(f"unknown split {part!r}: train, held_out or all")


def per_category(prompts: list[Prompt], n: int) -> list[Prompt]:
    """The first ``n`` prompts of each category (all when n <= 0), in category order."""
    by_cat: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(p)
    return [p for cat in sorted(by_cat) for p in (by_cat[cat] if n <= 0 else by_cat[cat][:n])]


def held_out(per: int, categories: str = "") -> list[Prompt]:
    """The held-out prompts, ``per`` per category (0 = all), only of ``categories`` (a comma list) if given."""
    prompts = per_category(split(load(), "held_out"), per)
    wanted = set(categories.split(",")) if categories else None
    return [p for p in prompts if wanted is None or p.category in wanted]
