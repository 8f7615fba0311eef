"""Distillation from fixed text: pages become titled passages, passages become recorded chat answers."""

from __future__ import annotations

import random

import torch

from tests.helpers import tiny_model
from training.distill import DistillSequence
from training.distill_batched import Batching
from training.distill_text import (
    TEXT_ID,
    Block,
    Passage,
    html_blocks,
    passages,
    record_passages,
    rst_blocks,
    sequence_ids,
    translations,
)
from training.train import split_validation

PAGE = """<html><head><title>skip me</title><script>var x = 1;</script></head><body>
<h1>12.3. Package   pinning</h1><p>Pinning keeps a   package
at one version.</p><ul><li>First item</li><li>Second item</li></ul>
<pre>apt-mark hold
  foo</pre><h2>Other</h2><p>More text.</p></body></html>"""

RST = """Built-in Functions
==================

.. function:: abs(x)

   Return the absolute value of :func:`~math.fabs` or ``x``.

   .. versionadded:: 3.1

Details
-------

See :ref:`the guide <guide-label>` for **more**.
"""


def test_html_pages_give_paragraphs_under_their_headings():
    blocks = html_blocks(PAGE)
    assert blocks[0] == Block("Package pinning", "Pinning keeps a package at one version.")  # number dropped
    assert [b.paragraph for b in blocks[1:3]] == ["First item", "Second item"]
    assert blocks[3] == Block("Package pinning", "apt-mark hold\n  foo")  # code keeps its lines
    assert blocks[4] == Block("Other", "More text.")
    assert not any("var x" in b.paragraph or "skip me" in b.paragraph for b in blocks)


def test_rst_sources_drop_directives_and_keep_the_text_of_roles():
    blocks = rst_blocks(RST)
    assert blocks == [
        Block("Built-in Functions", "Return the absolute value of math.fabs or x."),
        Block("Details", "See the guide for more."),
    ]


def test_passages_join_paragraphs_of_one_section_up_to_the_limit():
    blocks = [Block("A", "x" * 40), Block("A", "y" * 40), Block("A", "z" * 40), Block("B", "w" * 10)]
    got = passages(blocks, max_chars=90)
    assert got == [
        Passage("A", "x" * 40 + "\n\n" + "y" * 40),
        Passage("A", "z" * 40),
        Passage("B", "w" * 10),
    ]


class _Tokenizer:
    """Stands in for a chat tokenizer: one id per character (mod 250), the template is the request text."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [1] + [ord(c) % 250 + 2 for c in messages[-1]["content"]] + [1]

    def encode(self, text, add_special_tokens=False):
        return [ord(c) % 250 + 2 for c in text]


def test_a_passage_is_the_answer_to_a_request_about_its_title():
    ids, prompt_len = sequence_ids(_Tokenizer(), Passage("pinning", "abcdef"), random.Random(0), answer_tokens=4)
    request = bytes(i - 2 for i in ids[1 : prompt_len - 1]).decode()
    assert "pinning" in request
    assert ids[prompt_len:] == [ord(c) + 2 for c in "abcd"]  # the answer, cut at answer_tokens


def test_recorded_passages_are_text_rows_never_chosen_for_validation():
    model = tiny_model("llama")
    found = [Passage("t", "some passage text " * 3), Passage("u", "another one")]
    rows = record_passages(model, _Tokenizer(), found, 0, 30, Batching("cpu", 8, 10_000))
    for row, passage in zip(rows, found):
        answer = _Tokenizer().encode(passage.text)[:30]
        assert row.source == "text" and row.question_id == TEXT_ID
        assert row.tokens[row.prompt_len - 1 :].tolist() == answer  # pair prompt_len-1 feeds the first answer token
        assert len(row.hidden) == len(row.greedy) == len(row.tokens)
    own = [
        DistillSequence("qa", 3, torch.tensor([1, 2, 3]), torch.zeros(3, 4), torch.tensor([1, 2, 3]), "greedy", q)
        for q in range(4)
    ]
    train, val = split_validation(own + rows, 2)
    assert all(s.source == "greedy" for s in val) and all(any(r is s for s in train) for r in rows)


def test_parallel_pages_become_translation_requests(tmp_path):
    (tmp_path / "en").mkdir()
    (tmp_path / "de").mkdir()
    (tmp_path / "en" / "a.html").write_text("<h1>Pinning</h1><p>Pinning keeps a version.</p><p>Same.</p>")
    (tmp_path / "de" / "a.html").write_text("<h1>Festhalten</h1><p>Festhalten behält eine Version.</p><p>Same.</p>")
    (tmp_path / "en" / "b.html").write_text("<h1>T</h1><p>One.</p><p>Two.</p>")
    (tmp_path / "de" / "b.html").write_text("<h1>T</h1><p>Eins und zwei.</p>")  # paragraphs differ: page left out
    got = translations(tmp_path / "en", tmp_path / "de", "German", min_chars=1)
    assert got == [
        Passage("Pinning", "Pinning keeps a version.", "Translate German to English: Festhalten behält eine Version.")
    ]  # an untranslated paragraph (the same text) is no translation
