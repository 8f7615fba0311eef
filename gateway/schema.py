"""OpenAI request bodies (the fields Tandem serves) and their translation into SDK generation kwargs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class UnsupportedParameter(ValueError):
    """A parameter OpenAI defines that this server does not serve (or a value it cannot honour)."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Sampling(BaseModel):
    """Fields shared by chat and text completions (OpenAI names; Tandem extensions last)."""

    model_config = ConfigDict(extra="ignore")
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = 1
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: bool | int | None = None
    # Tandem extensions (send them with the openai client's extra_body)
    top_k: int = Field(default=0, ge=0)
    num_draft_tokens: int | None = Field(default=None, ge=0, le=4)
    ignore_eos: bool = False

    def generation_kwargs(self) -> dict[str, Any]:
        """kwargs for the SDK's ``stream``/``generate``; raises UnsupportedParameter for what is not served."""
        if self.n != 1:
            raise UnsupportedParameter("n", f"n={self.n} is not supported: this server returns one choice (n=1)")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name):
                raise UnsupportedParameter(name, f"{name} is not supported (send 0 or leave it out)")
        if self.logprobs:
            raise UnsupportedParameter("logprobs", "logprobs are not supported")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stop) > 4:
            raise UnsupportedParameter("stop", "at most 4 stop sequences")
        kwargs: dict[str, Any] = {
            "max_tokens": self.max_output_tokens() or 0,
            "stop": stop,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "seed": self.seed,
            "ignore_eos": self.ignore_eos,
        }
        if self.num_draft_tokens is not None:
            kwargs["num_draft_tokens"] = self.num_draft_tokens
        return kwargs

    def max_output_tokens(self) -> int | None:
        return self.max_tokens

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def max_output_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def chat(self) -> list[dict[str, str]]:
        """Messages as the SDK takes them; content parts other than text are refused."""
        out = []
        for i, m in enumerate(self.messages):
            if isinstance(m.content, list):
                kinds = {part.get("type") for part in m.content}
                if kinds - {"text"}:
                    raise UnsupportedParameter(f"messages[{i}].content", "only text content parts are supported")
                text = "".join(str(part.get("text", "")) for part in m.content)
            else:
                text = m.content or ""
            out.append({"role": m.role, "content": text})
        return out


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    def prompt_input(self) -> str | list[int]:
        if self.echo or self.suffix or (self.best_of or 1) != 1:
            raise UnsupportedParameter("echo", "echo, suffix and best_of are not supported")
        if isinstance(self.prompt, list) and self.prompt and all(isinstance(p, str) for p in self.prompt):
            if len(self.prompt) != 1:
                raise UnsupportedParameter("prompt", "one prompt per request (a list of several is not supported)")
            return self.prompt[0]
        return self.prompt  # text, or token ids


Endpoint = Literal["chat", "completions"]
