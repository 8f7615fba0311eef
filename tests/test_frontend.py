"""Request validation before anything reaches the engine: oversized text, ids and echoed fields."""

from __future__ import annotations

import time

import pytest

from target_service.frontend import Frontend, FrontendLimits, InvalidRequestError, Prompt, UserParams


class CountingTokenizer:
    """Stands in for a tokenizer (one token per character) and counts how often it is asked to encode."""

    def __init__(self):
        self.calls = 0

    def encode(self, text, add_special_tokens=True):
        self.calls += 1
        return [1] * len(text)


def frontend(max_token_chars: int = 16) -> tuple[Frontend, CountingTokenizer]:
    tok = CountingTokenizer()
    return Frontend(tok, FrontendLimits(256, 512, 16, max_token_chars=max_token_chars)), tok


def test_text_that_cannot_fit_is_refused_without_tokenizing():
    fe, tok = frontend()
    huge = "x" * (4 * 1024 * 1024)
    t0 = time.perf_counter()
    with pytest.raises(InvalidRequestError, match="cannot fit in max_seq_len 512"):
        fe.build("r", Prompt(text=huge), UserParams())
    assert time.perf_counter() - t0 < 0.05 and tok.calls == 0
    with pytest.raises(InvalidRequestError, match="cannot fit"):
        fe.build("r", Prompt(messages=(("user", huge),)), UserParams())
    assert tok.calls == 0
    with pytest.raises(InvalidRequestError, match="prompt: 600 tokens"):  # fits by size, too long in tokens
        fe.build("r", Prompt(text="y" * 600), UserParams())
    assert tok.calls == 1


def test_long_ids_and_fields_are_refused_and_not_echoed_whole():
    fe, _ = frontend()
    with pytest.raises(InvalidRequestError, match="request_id: 300 characters"):
        fe.build("r" * 300, Prompt(text="hi"), UserParams())
    with pytest.raises(InvalidRequestError, match="acceptance") as err:
        fe.build("r", Prompt(text="hi"), UserParams(acceptance="z" * 10_000))
    assert len(str(err.value)) < 200
    with pytest.raises(InvalidRequestError, match="draft_length"):
        fe.build("r", Prompt(text="hi"), UserParams(draft_length="sometimes"))
