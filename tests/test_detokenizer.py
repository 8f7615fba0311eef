"""Incremental detokenization equals a full decode; stop strings are cut and held back correctly."""

from __future__ import annotations

import pytest

from target_service.detokenizer import IncrementalDetokenizer

TEXTS = [
    "Hello, world! Speculative decoding verifies drafts in one pass.",
    "naïve café — 東京タワー 🚀🚀 emoji and accents",
    "  leading spaces\n\nnew lines\tand tabs  ",
]


@pytest.fixture(scope="module")
def tokenizer(default_model_converted):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(default_model_converted))


@pytest.mark.parametrize("text", TEXTS)
def test_streamed_deltas_concatenate_to_the_full_decode(tokenizer, text):
    ids = tokenizer.encode(text)
    detok = IncrementalDetokenizer(tokenizer)
    pieces = []
    for t in ids:
        assert not detok.add(t)
        pieces.append(detok.take())
        assert "\ufffd" not in pieces[-1]
    pieces.append(detok.take(final=True))
    assert "".join(pieces) == tokenizer.decode(ids)


def test_stop_string_is_cut_and_never_streamed(tokenizer):
    text = "The answer is 42. END of story"
    detok = IncrementalDetokenizer(tokenizer, stop=("END",))
    streamed, hit = [], False
    for t in tokenizer.encode(text):
        hit = detok.add(t)
        streamed.append(detok.take(final=hit))
        if hit:
            break
    assert hit and "".join(streamed) == "The answer is 42. "


def test_held_back_prefix_of_a_stop_string_is_released_at_the_end(tokenizer):
    detok = IncrementalDetokenizer(tokenizer, stop=("STOPWORD",))
    for t in tokenizer.encode("ends with STOP"):
        assert not detok.add(t)
    partial = detok.take()
    assert not partial.endswith("STOP")
    assert partial + detok.take(final=True) == "ends with STOP"
