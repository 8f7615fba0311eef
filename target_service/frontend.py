"""Turns a user's prompt and parameters into a validated EngineRequest (tokenizer side).

Everything a client can get wrong is checked here and reported as InvalidRequestError with a
message that names the field; the engine only ever sees well-formed requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tandem_core.limits import MAX_DRAFT_TOKENS
from target_service.sequence import EngineRequest, SamplingParams
from target_service.tokenizer import chat_prompt_ids

CHAT_ROLES = ("system", "user", "assistant", "tool")
MAX_STOP_STRINGS = 16
MAX_STOP_LEN = 256
MAX_REQUEST_ID = 256  # characters; the id is echoed in every stream message
MIN_TEMPERATURE = 1e-3  # below this, logits / temperature overflows; use 0 for greedy
MAX_TEMPERATURE = 100.0


class InvalidRequestError(ValueError):
    """The request is malformed; the message says what is wrong."""


@dataclass(frozen=True)
class Prompt:
    """Exactly one of the three fields is set."""

    text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content) pairs
    token_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class UserParams:
    max_tokens: int = 0  # 0: server default
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    num_draft_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    acceptance: str = "strict"
    relaxed_top_k: int | None = None
    relaxed_delta: float | None = None
    force_accept: int | None = None
    draft_length: str = ""


@dataclass(frozen=True)
class FrontendLimits:
    vocab_size: int
    max_seq_len: int
    default_max_tokens: int
    thinking_span: bool = False  # the server knows thinking-span delimiters (relaxed acceptance possible)
    max_token_chars: int = 0  # longest token of the vocabulary in characters (0: unknown, no text pre-check)


class Frontend:
    """Tokenization and validation; give it a LockedTokenizer when threads share the tokenizer."""

    def __init__(self, tokenizer, limits: FrontendLimits):
        self.tokenizer = tokenizer
        self.limits = limits

    def build(self, request_id: str, prompt: Prompt, params: UserParams) -> EngineRequest:
        if len(request_id) > MAX_REQUEST_ID:
            raise InvalidRequestError(f"request_id: {len(request_id)} characters, at most {MAX_REQUEST_ID}")
        self._check_text_size(prompt)
        ids = self.tokenize(prompt)
        return EngineRequest(request_id, ids, self._params(params, len(ids)))

    @property
    def _max_prompt_chars(self) -> int:
        """Most characters a prompt that fits can have: every token covers at most max_token_chars (0: unknown)."""
        return self.limits.max_token_chars * self.limits.max_seq_len

    @property
    def max_request_bytes(self) -> int:
        """Largest request message whose text could fit (a character is at most 4 bytes of UTF-8); 0: unknown."""
        limit = self._max_prompt_chars
        return 4 * limit + 64 * 1024 if limit else 0  # + room for params and ids

    def _check_text_size(self, prompt: Prompt) -> None:
        """Refuse text that cannot fit before tokenizing it: every token covers at most max_token_chars."""
        chars = len(prompt.text or "") + sum(len(c) for _, c in prompt.messages or ())
        limit = self._max_prompt_chars
        if limit and chars > limit:
            raise InvalidRequestError(
                f"prompt: {chars} characters cannot fit in max_seq_len {self.limits.max_seq_len} tokens "
                f"(at most {limit} characters could)"
            )

    def tokenize(self, prompt: Prompt) -> tuple[int, ...]:
        if prompt.token_ids is not None:
            ids = prompt.token_ids
            bad = [t for t in ids if not 0 <= t < self.limits.vocab_size]
            if bad:
                raise InvalidRequestError(
                    f"token_ids: {len(bad)} id(s) outside the vocabulary [0, {self.limits.vocab_size}), first {bad[0]}"
                )
        elif prompt.messages is not None:
            ids = self._render_chat(prompt.messages)
        else:
            if not prompt.text:
                raise InvalidRequestError("prompt: text is empty")
            ids = tuple(self.tokenizer.encode(prompt.text, add_special_tokens=True))
        if not ids:
            raise InvalidRequestError("prompt: it has no tokens")
        if len(ids) >= self.limits.max_seq_len:
            raise InvalidRequestError(
                f"prompt: {len(ids)} tokens, the limit is {self.limits.max_seq_len - 1} "
                f"(max_seq_len {self.limits.max_seq_len} includes at least one generated token)"
            )
        return ids

    def _render_chat(self, messages: tuple[tuple[str, str], ...]) -> tuple[int, ...]:
        if not messages:
            raise InvalidRequestError("chat: messages is empty")
        for i, (role, content) in enumerate(messages):
            if role not in CHAT_ROLES:
                raise InvalidRequestError(
                    f"chat.messages[{i}].role: {role[:32]!r} is not one of {', '.join(CHAT_ROLES)}"
                )
            if not content:
                raise InvalidRequestError(f"chat.messages[{i}].content is empty")
        as_dicts = [{"role": r, "content": c} for r, c in messages]
        return tuple(chat_prompt_ids(self.tokenizer, as_dicts))

    def _params(self, p: UserParams, prompt_len: int) -> SamplingParams:
        room = self.limits.max_seq_len - prompt_len
        if p.max_tokens < 0:
            raise InvalidRequestError(f"max_tokens: {p.max_tokens} is negative")
        max_tokens = p.max_tokens or min(self.limits.default_max_tokens, room)
        if max_tokens > room:
            raise InvalidRequestError(
                f"max_tokens: {max_tokens} with a {prompt_len}-token prompt exceeds max_seq_len "
                f"{self.limits.max_seq_len}; at most {room} here"
            )
        if len(p.stop) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_LEN for s in p.stop):
            raise InvalidRequestError(f"stop: at most {MAX_STOP_STRINGS} strings of at most {MAX_STOP_LEN} chars")
        if any(not s for s in p.stop):
            raise InvalidRequestError("stop: empty stop string")
        bad = [t for t in p.stop_token_ids if not 0 <= t < self.limits.vocab_size]
        if bad:
            raise InvalidRequestError(f"stop_token_ids: {bad[0]} is outside [0, {self.limits.vocab_size})")
        if p.num_draft_tokens is not None and not 0 <= p.num_draft_tokens <= MAX_DRAFT_TOKENS:
            raise InvalidRequestError(f"num_draft_tokens: {p.num_draft_tokens} is outside 0..{MAX_DRAFT_TOKENS}")
        if p.draft_length not in ("", "auto", "fixed"):
            raise InvalidRequestError(f"draft_length: {p.draft_length[:32]!r} is not auto, fixed or empty")
        self._check_sampling(p)
        return SamplingParams(
            max_tokens=max_tokens,
            stop=p.stop,
            stop_token_ids=p.stop_token_ids,
            ignore_eos=p.ignore_eos,
            num_draft_tokens=p.num_draft_tokens,
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k,
            seed=p.seed,
            acceptance=p.acceptance,
            relaxed_top_k=p.relaxed_top_k,
            relaxed_delta=p.relaxed_delta,
            force_accept=p.force_accept,
            draft_length=p.draft_length,
        )

    def _check_sampling(self, p: UserParams) -> None:
        ok = p.temperature == 0 or MIN_TEMPERATURE <= p.temperature <= MAX_TEMPERATURE
        if not (math.isfinite(p.temperature) and ok):
            raise InvalidRequestError(
                f"temperature: {p.temperature} is neither 0 (greedy) nor in [{MIN_TEMPERATURE}, {MAX_TEMPERATURE}]"
            )
        if not 0 < p.top_p <= 1:
            raise InvalidRequestError(f"top_p: {p.top_p} is outside (0, 1]")
        if p.top_k < 0:
            raise InvalidRequestError(f"top_k: {p.top_k} is negative")
        if p.seed is not None and not 0 <= p.seed < 2**63:
            raise InvalidRequestError(f"seed: {p.seed} is outside [0, 2^63)")
        if p.acceptance not in ("strict", "relaxed"):
            raise InvalidRequestError(f"acceptance: {p.acceptance[:32]!r} is not strict or relaxed")
        if p.acceptance == "relaxed":
            if p.temperature > 0:
                raise InvalidRequestError("acceptance: relaxed applies to greedy requests only (temperature 0)")
            if not self.limits.thinking_span:
                raise InvalidRequestError(
                    "acceptance: relaxed needs the server's thinking-span tokens (--think-begin-token, "
                    "--think-end-token)"
                )
        if p.relaxed_top_k is not None and p.relaxed_top_k < 1:
            raise InvalidRequestError(f"relaxed_top_k: {p.relaxed_top_k} is below 1")
        if p.relaxed_delta is not None and not 0 <= p.relaxed_delta <= 1:
            raise InvalidRequestError(f"relaxed_delta: {p.relaxed_delta} is outside [0, 1]")
        if p.force_accept is not None and not 0 <= p.force_accept <= MAX_DRAFT_TOKENS:
            raise InvalidRequestError(f"force_accept: {p.force_accept} is outside 0..{MAX_DRAFT_TOKENS}")
