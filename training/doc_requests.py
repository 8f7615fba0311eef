"""Distinct requests from documents on the machine, answered by the target itself.

Fixed text teacher-forced (distill_text.py) is not what the target says, and the heads learnt little
from it; the target's own answers are what they need, to many more distinct requests than the 336
training prompts. Documents already on the machine supply the raw material in the benchmark's shapes:

- ``translation``: one German sentence of a page ("Translate German to English: ..."),
- ``summarization``: an English passage ("Summarize: ..."),
- ``rag``: two passages, then a question about the first one's section,
- ``qa``: a short question about a section title,
- ``mt_bench``: a writing or explaining request about a section title.

Every request is then answered by the project's engine (greedy, EOS ignored, as ``tandem-bench`` asks)
and recorded like ``training.distill``'s sources (source ``doc-request``). Shards hold one category
each, interleaved, so a ``--minutes`` budget keeps the mix; a rerun resumes at the first missing shard.
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

from bench import spec_bench
from training.distill import Job, _engine_factory, collect, load_shards
from training.distill_batched import save_shard
from training.distill_text import Passage, document_blocks, find_documents, passages

log = logging.getLogger(__name__)

DOC_REQUEST_ID = 2_000_000  # question ids of these requests start here (never a Spec-Bench id)
CATEGORIES = ("translation", "summarization", "rag", "qa", "mt_bench")

QUESTIONS = (
    "What is {title}?",
    "How does {title} work?",
    "What does the text say about {title}?",
    "Why is {title} important?",
)
WRITING = (
    "Write a short blog post about {title}.",
    "Explain {title} to a beginner.",
    "Write a step-by-step guide to {title}.",
    "Give me three tips about {title}, with a sentence on each.",
    "Write a friendly email to a colleague explaining {title}.",
    "What are the advantages and disadvantages of {title}?",
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-ZÄÖÜ])")
_NUMBERING = re.compile(r"^((Chapter|Appendix|Kapitel)\s+)?(([A-Z]|\d+)(\.\d+)*\.|\d+)\s+")


@dataclass(frozen=True)
class Request:
    category: str
    text: str  # the user's turn


def german_sentences(roots: list[Path], min_chars: int = 40, max_chars: int = 300) -> list[str]:
    """Sentences of the pages' paragraphs, de-duplicated, in page order."""
    seen: dict[str, None] = {}
    for doc in find_documents(roots):
        for block in document_blocks(doc):
            for s in _SENTENCE_END.split(" ".join(block.paragraph.split())):
                if min_chars <= len(s) <= max_chars and s[-1] in ".!?":
                    seen.setdefault(s, None)
    return list(seen)


def title_phrase(title: str) -> str:
    """A section title as a phrase: "Chapter 4. Authentication" and "B.3.1. The Hardware" lose their numbers."""
    return _NUMBERING.sub("", title).strip()


def build_requests(
    found: list[Passage], sentences: list[str], per_category: int, seed: int, start: int = 0
) -> list[Request]:
    """Up to ``per_category`` requests of each category, each drawn from material not used twice in it.

    The material is shuffled by ``seed``; ``start`` skips what the first ``start`` requests of each
    category take, so a later run with the same seed continues on fresh material."""
    rng = random.Random(seed)
    sentences = list(sentences)  # shuffled here, not in the caller's list
    long = [p for p in found if len(p.text) >= 800]
    titles = sorted({t for t in (title_phrase(p.title) for p in found) if 2 <= len(t.split()) <= 8})
    rng.shuffle(long)
    rng.shuffle(titles)
    rng.shuffle(sentences)
    n, a, b = per_category, 2 * start, 2 * start + per_category  # long passages and titles serve two categories
    out = [Request("translation", f"Translate German to English: {s}") for s in sentences[start : start + n]]
    out += [Request("summarization", f"Summarize: {p.text}") for p in long[a : a + n]]
    for p in long[b : b + n]:
        other = rng.choice(long)
        question = rng.choice(QUESTIONS).format(title=title_phrase(p.title))
        out.append(Request("rag", f"{p.text}\n\n{other.text}\n{question}"))
    out += [Request("qa", rng.choice(QUESTIONS[:2]).format(title=t)) for t in titles[a : a + n]]
    out += [Request("mt_bench", rng.choice(WRITING).format(title=t)) for t in titles[b : b + n]]
    return out


def shards_of(requests: list[Request], size: int) -> list[list[tuple[int, Request]]]:
    """(global index, request) groups of one category each, interleaved category by category."""
    by_category: dict[str, list[tuple[int, Request]]] = {}
    for i, r in enumerate(requests):
        by_category.setdefault(r.category, []).append((i, r))
    lanes = [[rows[j : j + size] for j in range(0, len(rows), size)] for rows in by_category.values()]
    return [lane[k] for k in range(max(map(len, lanes), default=0)) for lane in lanes if k < len(lane)]


def jobs_of(shard: list[tuple[int, Request]], first_id: int = DOC_REQUEST_ID) -> list[Job]:
    jobs = []
    for i, r in shard:
        prompt = spec_bench.Prompt(index=-1, question_id=first_id + i, category=r.category, text=r.text)
        jobs.append(Job(f"d{i}", prompt, (("user", r.text),)))
    return jobs


def main(argv: list[str] | None = None) -> None:
    from tandem_core.model_loader import load_model

    p = argparse.ArgumentParser(prog="python -m training.doc_requests", description=__doc__.splitlines()[0])
    p.add_argument("--english", type=Path, nargs="+", required=True, help="folders or files of .html/.rst text")
    p.add_argument("--german", type=Path, nargs="*", default=[], help="German pages (translation requests)")
    p.add_argument("--per-category", type=int, default=300)
    p.add_argument("--start", type=int, default=0, help="skip the material of each category's first N requests")
    p.add_argument("--categories", default=",".join(CATEGORIES), help="comma-separated subset to answer")
    p.add_argument("--max-chars", type=int, default=2400, help="longest passage (summarization, rag)")
    p.add_argument("--model", default="default")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--max-prompt-tokens", type=int, default=1536)
    p.add_argument("--slots", type=int, default=32)
    p.add_argument("--shard-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--minutes", type=float, default=0, help="start no shard after this long; 0 = no limit")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    found = [x for doc in find_documents(args.english) for x in passages(document_blocks(doc), args.max_chars)]
    requests = build_requests(found, german_sentences(args.german), args.per_category, args.seed, args.start)
    requests = [r for r in requests if r.category in args.categories.split(",")]
    counts = {c: sum(r.category == c for r in requests) for c in CATEGORIES}
    log.info("%d passages -> requests %s", len(found), counts)
    loaded = load_model(args.model, "float32")
    make = _engine_factory(loaded.model, loaded.tokenizer, args.slots, args.max_prompt_tokens + args.max_tokens + 8)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    for n, shard in enumerate(shards_of(requests, args.shard_size)):
        path = args.out / f"shard-{n:04d}.pt"
        if path.exists():
            continue
        if args.minutes and time.monotonic() - start > args.minutes * 60:
            log.info("time budget reached before shard %d", n)
            break
        jobs = jobs_of(shard, DOC_REQUEST_ID + len(CATEGORIES) * args.start)  # distinct from earlier --start runs
        rows = collect(make, loaded.tokenizer, jobs, "doc-request", args.max_tokens, args.max_prompt_tokens)
        save_shard(rows, path)
        log.info("%s: %s x %d, %.1f min", path.name, shard[0][1].category, len(rows), (time.monotonic() - start) / 60)
    total = load_shards(args.out)
    print(f"{len(total)} sequences, {sum(len(s.tokens) for s in total)} pairs in {args.out}")


if __name__ == "__main__":
    main()
