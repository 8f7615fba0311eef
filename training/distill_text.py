"""Distillation from text already on the machine: fixed passages, teacher-forced and labelled by the target.

Decoding is what makes the target's own answers expensive. A passage of existing prose needs one
prefill pass: wrapped as a chat (a request built from its section title, the passage as the assistant's
answer), it gives every position's hidden state ``h_q`` and the target's greedy choice ``a_q`` at the
cost of a forward. The text is not the target's, so the fed token ``t_{q+1}`` often differs from ``a_q``;
training (chain.py) counts depth ``i`` only where the ``i`` tokens fed were the target's choices, and
depth 0 everywhere. EAGLE trained on fixed conversations the same way.

Inputs: ``.html`` pages (text of headings, paragraphs, list items and code blocks) and reStructuredText
(``.rst``, ``.rst.txt``; directives dropped, roles reduced to their text), e.g. the Debian packages
``python3.11-doc`` (``/usr/share/doc/python3.11/html/_sources``), ``debian-handbook``
(``/usr/share/doc/debian-handbook/html/en-US``) and ``debian-reference-en`` (``/usr/share/debian-reference``).
Shards are the ``DistillSequence`` rows of ``training.distill`` (source ``text``), saved as they finish.
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import textwrap
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from training.distill import DistillSequence
from training.distill_batched import Batching, record, save_shard

log = logging.getLogger(__name__)

TEXT_ID = -2  # question_id of text passages: never a benchmark prompt, never chosen for validation
REQUESTS = (
    "Explain {title}.",
    "Can you tell me about {title}?",
    "Write a short guide to {title}.",
    "What should I know about {title}?",
    "Describe {title} in a few paragraphs.",
)


@dataclass(frozen=True)
class Passage:
    title: str  # the heading the passage sits under
    text: str  # paragraphs joined by blank lines
    request: str = ""  # the user's turn; empty = one of REQUESTS about the title


@dataclass(frozen=True)
class Block:
    title: str
    paragraph: str


class _HtmlBlocks(HTMLParser):
    """Paragraph-level text of a page: headings set the title, block elements end a paragraph."""

    BLOCKS = {"p", "li", "pre", "dd", "dt", "td", "div", "blockquote"}
    HEADINGS = {"h1", "h2", "h3", "h4"}
    SKIP = {"script", "style", "head", "nav"}

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[Block] = []
        self.title, self.buffer, self.skipping, self.in_pre = "", [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCKS or tag in self.HEADINGS:
            self._flush()
        if tag == "pre":
            self.in_pre += 1

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.HEADINGS:
            self.title = _one_line("".join(self.buffer)) or self.title
            self.buffer = []
        elif tag in self.BLOCKS:
            self._flush()
        if tag == "pre":
            self.in_pre = max(0, self.in_pre - 1)

    def handle_data(self, data):
        if not self.skipping:
            self.buffer.append(data if self.in_pre else re.sub(r"\s+", " ", data))

    def _flush(self) -> None:
        text = "".join(self.buffer).strip()
        self.buffer = []
        if text and self.title:
            self.blocks.append(Block(self.title, text))


def html_blocks(page: str) -> list[Block]:
    parser = _HtmlBlocks()
    parser.feed(page)
    parser.close()
    parser._flush()
    return parser.blocks


_UNDERLINE = re.compile(r"^([=\-~^*#+\"'`])\1{2,}\s*$")
_ROLE = re.compile(r":[\w:.-]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")


def rst_blocks(source: str) -> list[Block]:
    """Paragraphs of a reStructuredText page under their section titles (directives left out)."""
    blocks: list[Block] = []
    title = ""
    for chunk in re.split(r"\n\s*\n", source):
        lines = [line for line in chunk.splitlines() if not _UNDERLINE.match(line)]
        if len(lines) < len(chunk.splitlines()) and len(lines) == 1:  # a title over (or under) its underline
            title = _one_line(_rst_inline(lines[0]))
            continue
        if not lines or lines[0].lstrip().startswith(".. ") or lines[0].lstrip().startswith(":"):
            continue
        text = _rst_inline(textwrap.dedent("\n".join(lines))).strip()
        if text and title:
            blocks.append(Block(title, text))
    return blocks


def _rst_inline(text: str) -> str:
    text = _ROLE.sub(lambda m: m.group(1), text)
    return text.replace("``", "").replace("**", "")


def _one_line(text: str) -> str:
    """A heading as a phrase: whitespace folded, section numbers ("14.3.2.") and pilcrows dropped."""
    text = re.sub(r"\s+", " ", text).strip().rstrip("¶").strip()
    return re.sub(r"^(\d+\.)+\d*\s+", "", text)


def document_blocks(path: Path) -> list[Block]:
    text = path.read_text(errors="replace")
    return html_blocks(text) if path.suffix in (".html", ".htm") else rst_blocks(text)


def passages(blocks: list[Block], max_chars: int) -> list[Passage]:
    """Consecutive paragraphs of one section, up to ``max_chars`` each (a longer paragraph stands alone)."""
    out: list[Passage] = []
    title, parts = "", []
    for b in blocks:
        if parts and (b.title != title or sum(len(p) + 2 for p in parts) + len(b.paragraph) > max_chars):
            out.append(Passage(title, "\n\n".join(parts)))
            parts = []
        title = b.title
        parts.append(b.paragraph)
    if parts:
        out.append(Passage(title, "\n\n".join(parts)))
    return out


def translations(english: Path, other: Path, language: str, min_chars: int) -> list[Passage]:
    """Requests to translate each paragraph of ``other``'s pages into English, answered by the English page's
    paragraph in the same place (pages whose paragraph counts differ are left out)."""
    out: list[Passage] = []
    for page in find_documents([other]):
        source = english / page.relative_to(other)
        theirs, ours = document_blocks(page), document_blocks(source) if source.exists() else []
        if len(theirs) != len(ours):
            continue
        for t, e in zip(theirs, ours):
            if len(e.paragraph) >= min_chars and t.paragraph != e.paragraph:
                out.append(Passage(e.title, e.paragraph, f"Translate {language} to English: {t.paragraph}"))
    return out


def find_documents(roots: list[Path]) -> list[Path]:
    suffixes = (".html", ".htm", ".rst", ".txt")
    files: list[Path] = []
    for root in roots:
        files += [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in suffixes)
    return files


def sequence_ids(tokenizer, passage: Passage, rng: random.Random, answer_tokens: int) -> tuple[list[int], int]:
    """(prompt + answer ids, prompt length): the passage as the assistant's answer to a request about it."""
    from target_service.tokenizer import chat_prompt_ids

    request = passage.request or rng.choice(REQUESTS).format(title=passage.title)
    prompt = chat_prompt_ids(tokenizer, [{"role": "user", "content": request}])
    answer = tokenizer.encode(passage.text, add_special_tokens=False)[:answer_tokens]
    return prompt + answer, len(prompt)


def collect_passages(roots: list[Path], max_chars: int, min_chars: int, seed: int, limit: int) -> list[Passage]:
    found = [p for doc in find_documents(roots) for p in passages(document_blocks(doc), max_chars)]
    found = [p for p in found if len(p.text) >= min_chars]
    return shuffled(found, seed, limit)


def shuffled(found: list[Passage], seed: int, limit: int) -> list[Passage]:
    random.Random(seed).shuffle(found)
    return found[:limit] if limit > 0 else found


def main(argv: list[str] | None = None) -> None:
    from tandem_core.model_loader import load_model

    parser = argparse.ArgumentParser(prog="python -m training.distill_text", description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, nargs="*", default=[], help="files or folders of .html/.rst text")
    parser.add_argument(
        "--parallel",
        nargs=3,
        metavar=("ENGLISH", "OTHER", "LANGUAGE"),
        help="translation requests: folders of the same pages in English and in LANGUAGE (e.g. German)",
    )
    parser.add_argument("--model", default="default")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--answer-tokens", type=int, default=384, help="passage tokens kept (the answer)")
    parser.add_argument("--min-chars", type=int, default=400, help="shorter passages are left out")
    parser.add_argument("--limit", type=int, default=0, help="at most N passages (shuffled, seeded); 0 = all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-tokens", type=int, default=8192, help="tokens per teacher-forced forward")
    parser.add_argument("--shard-size", type=int, default=256, help="passages per shard (saved at once)")
    parser.add_argument("--minutes", type=float, default=0, help="start no shard after this long; 0 = no limit")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    t0 = time.monotonic()
    found = collect_passages(args.docs, args.answer_tokens * 6, args.min_chars, args.seed, args.limit)
    if args.parallel:
        english, other, language = args.parallel
        found += shuffled(translations(Path(english), Path(other), language, args.min_chars), args.seed, args.limit)
    if not found:
        parser.error("no passages: give --docs and/or --parallel")
    log.info("%d passages", len(found))
    loaded = load_model(args.model, "float32", device=args.device)
    cfg = Batching(args.device, max_batch=256, batch_tokens=args.batch_tokens)
    args.out.mkdir(parents=True, exist_ok=True)
    for n in range(0, len(found), args.shard_size):
        path = args.out / f"shard-{n // args.shard_size:04d}.pt"
        if path.exists():
            continue
        if args.minutes and time.monotonic() - t0 > args.minutes * 60:
            log.info("time budget reached at %d of %d passages", n, len(found))
            break
        batch = found[n : n + args.shard_size]
        rows = record_passages(loaded.model, loaded.tokenizer, batch, args.seed * 7919 + n, args.answer_tokens, cfg)
        save_shard(rows, path)
        pairs = sum(len(r.tokens) for r in rows)
        log.info(
            "%s: %d of %d passages, %d pairs, %.0f s",
            path.name,
            n + len(rows),
            len(found),
            pairs,
            time.monotonic() - t0,
        )


def record_passages(
    model, tokenizer, batch: list[Passage], seed: int, answer_tokens: int, cfg: Batching
) -> list[DistillSequence]:
    """One recorded ``text`` row per passage (requests drawn with ``seed``)."""
    rng = random.Random(seed)
    built = [sequence_ids(tokenizer, p, rng, answer_tokens) for p in batch]
    rows = record(model, [ids for ids, _ in built], cfg)
    return [
        DistillSequence("text", prompt_len, t, h, g, "text", TEXT_ID) for (_, prompt_len), (t, h, g) in zip(built, rows)
    ]


if __name__ == "__main__":
    main()
