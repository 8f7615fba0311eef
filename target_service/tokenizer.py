"""A tokenizer shared by gRPC handler threads and the engine thread.

Hugging Face fast tokenizers raise "Already borrowed" when two threads use one instance at
once, so every call goes through a single lock.
"""

from __future__ import annotations

import threading


class LockedTokenizer:
    def __init__(self, tokenizer):
        self._tok = tokenizer
        self._lock = threading.Lock()
        self.eos_token_id = getattr(tokenizer, "eos_token_id", None)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        with self._lock:
            return self._tok.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        with self._lock:
            return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], **kwargs):
        with self._lock:
            return self._tok.apply_chat_template(messages, **kwargs)


def chat_prompt_ids(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of ``messages`` rendered with the model's chat template and a generation prompt.

    transformers returns a list or, in newer versions, a BatchEncoding; both are handled here once.
    """
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = out["input_ids"] if hasattr(out, "keys") else out
    return [int(t) for t in ids]
