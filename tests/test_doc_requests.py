"""Requests built from documents on the machine, in the benchmark's shapes, answered by the target itself."""

from __future__ import annotations

import torch

from tests.helpers import FakeTokenizer, tiny_model
from training.distill import _engine_factory, collect
from training.distill_text import Passage
from training.doc_requests import (
    DOC_REQUEST_ID,
    build_requests,
    german_sentences,
    jobs_of,
    shards_of,
    title_phrase,
)
from training.train import split_validation

GERMAN = """<html><body><h1>Pakete</h1><p>Ein Paket enthält Dateien. Es wird mit apt installiert!
Kurz.</p><p>Ein Paket enthält Dateien. Die Abhängigkeiten werden automatisch aufgelöst, wenn man es will.</p>
</body></html>"""


def _passages(n: int) -> list[Passage]:
    return [Passage(f"{i + 1}.2. Topic number {i}", f"Passage {i}. " + "word " * 200) for i in range(n)]


def test_section_numbers_leave_the_title():
    assert title_phrase("Chapter 4. Authentication and access controls") == "Authentication and access controls"
    assert title_phrase("B.3.1. The Deepest Layer: the Hardware") == "The Deepest Layer: the Hardware"
    assert title_phrase("14.3.2. Package pinning") == "Package pinning"
    assert title_phrase("A Tour of Python") == "A Tour of Python"  # a leading article is not a number


def test_german_pages_give_distinct_whole_sentences(tmp_path):
    (tmp_path / "a.html").write_text(GERMAN)
    got = german_sentences([tmp_path], min_chars=10)
    assert got == [
        "Ein Paket enthält Dateien.",
        "Es wird mit apt installiert!",
        "Die Abhängigkeiten werden automatisch aufgelöst, wenn man es will.",
    ]  # "Kurz." is too short, the repeated sentence is kept once


def test_requests_take_each_category_shape_and_never_reuse_a_passage_within_one():
    found = _passages(30)
    requests = build_requests(found, [f"Satz {i}." for i in range(30)], per_category=5, seed=1)
    by = {c: [r.text for r in requests if r.category == c] for c in ("translation", "summarization", "rag", "qa")}
    assert all(len(v) == 5 for v in by.values())
    assert all(t.startswith("Translate German to English: Satz ") for t in by["translation"])
    assert all(t.startswith("Summarize: Passage ") for t in by["summarization"])
    assert all(t.endswith("?") and "\n\n" in t for t in by["rag"])  # passages, then the question
    assert all("." not in t.split("?")[0][:8] for t in by["qa"])  # no "3.2." left in a title
    used = [t.split(".")[0] for t in by["summarization"]] + [t.split(".")[0] for t in by["rag"]]
    assert len(set(used)) == 10  # rag's first passages are not the summarised ones


def test_shards_hold_one_category_and_interleave():
    requests = build_requests(_passages(30), [f"Satz {i}." for i in range(30)], per_category=4, seed=0)
    shards = shards_of(requests, size=3)
    cats = [{r.category for _, r in s} for s in shards]
    assert all(len(c) == 1 for c in cats)
    assert [c.pop() for c in cats[:5]] == ["translation", "summarization", "rag", "qa", "mt_bench"]
    assert sorted(i for s in shards for i, _ in s) == list(range(len(requests)))


class ChatTokenizer(FakeTokenizer):
    """FakeTokenizer with a chat template: one id per character (mod the tiny vocabulary)."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        text = "".join(f"[{m['role']}]{m['content']}" for m in messages) + "[assistant]"
        return [ord(c) % 250 for c in text]


def test_answers_are_the_targets_own_and_stay_out_of_validation():
    model = tiny_model()
    requests = build_requests(_passages(4), ["Satz eins.", "Satz zwei."], per_category=1, seed=0)
    jobs = jobs_of(shards_of(requests, size=8)[0] + shards_of(requests, size=8)[3])
    make = _engine_factory(model, ChatTokenizer(), 4, 512)
    rows = collect(make, ChatTokenizer(), jobs, "doc-request", 12, 200)
    assert [r.question_id for r in rows] == [DOC_REQUEST_ID + i for i, _ in shards_of(requests, 8)[0]] + [
        DOC_REQUEST_ID + i for i, _ in shards_of(requests, 8)[3]
    ]
    for r in rows:
        answer = slice(r.prompt_len - 1, None)
        assert len(r.tokens) == r.prompt_len + 12 - 2  # every fed position: the last answer token is never fed
        assert torch.equal(r.greedy[answer], r.tokens[answer])  # greedy answers: the label is the token fed
        assert r.source == "doc-request"
    train, val = split_validation(rows + _greedy_rows(), 1)
    assert all(s.question_id < DOC_REQUEST_ID for s in val) and len(train) == len(rows) + 1


def _greedy_rows():
    from training.distill import DistillSequence

    def row(qid):
        return DistillSequence(
            "qa", 2, torch.zeros(4, dtype=torch.long), torch.zeros(4, 64), torch.zeros(4), "greedy", qid
        )

    return [row(7), row(8)]


def test_a_later_start_takes_fresh_material_in_every_category():
    found, sentences = _passages(40), [f"Satz {i}." for i in range(40)]
    first = build_requests(found, sentences, per_category=5, seed=3)
    later = build_requests(found, sentences, per_category=5, seed=3, start=5)
    assert len(later) == len(first) == 25
    assert not {r.text for r in first} & {r.text for r in later}
    for c in ("summarization", "rag"):  # passages: a rag request's first passage is never summarised elsewhere
        firsts = {t.split(".")[0].split(": ")[-1] for t in (r.text for r in first + later if r.category == c)}
        assert len(firsts) == 10
