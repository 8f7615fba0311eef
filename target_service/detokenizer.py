"""Incremental detokenization and stop-string detection for one sequence."""

from __future__ import annotations

_INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas in O(window) per token.

    Decodes a short window of ids before and after the last emitted boundary, so multi-token
    characters and tokenizers that merge spaces come out as ``tokenizer.decode(all_ids)`` would.
    Text that may still become a stop string is held back until it cannot.
    """

    def __init__(self, tokenizer, stop: tuple[str, ...] = ()):
        self.tokenizer = tokenizer
        self.stop = tuple(s for s in stop if s)
        self.ids: list[int] = []
        self.text = ""  # decoded so far (truncated before a stop string once one is hit)
        self.emitted = 0  # chars of self.text already returned
        self._prefix = 0
        self._read = 0
        self._hold = max((len(s) for s in self.stop), default=1) - 1

    def add(self, token_id: int) -> bool:
        """Append one token; return True when a stop string has completed (text cut before it)."""
        self.ids.append(token_id)
        before = self._decode(self._prefix, self._read)
        after = self._decode(self._prefix, len(self.ids))
        if len(after) > len(before) and not after.endswith(_INCOMPLETE):
            delta = after[len(before) :]
            self._prefix, self._read = self._read, len(self.ids)
            start = max(0, len(self.text) - self._hold)
            self.text += delta
            return self._cut_at_stop(start)
        return False

    def take(self, final: bool = False) -> str:
        """Text not yet returned, minus what a stop string could still claim (unless final)."""
        end = len(self.text) if final else max(self.emitted, len(self.text) - self._hold)
        out = self.text[self.emitted : end]
        self.emitted = end
        return out

    def _cut_at_stop(self, start: int) -> bool:
        hits = [i for i in (self.text.find(s, start) for s in self.stop) if i >= 0]
        if not hits:
            return False
        self.text = self.text[: min(hits)]
        return True

    def _decode(self, start: int, end: int) -> str:
        return self.tokenizer.decode(self.ids[start:end], skip_special_tokens=True)
