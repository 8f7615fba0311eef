"""In-process peers on the same prompts: transformers ``generate`` and its prompt lookup decoding.

Same weights (the default model loaded by the project's loader), same chat template, greedy, exactly
``max_tokens`` new tokens; a streamer timestamps every token block as it is produced.
"""

from __future__ import annotations

import time

from bench.records import Config, RequestRecord

PROMPT_LOOKUP_TOKENS = 10  # transformers' suggested default for prompt_lookup_num_tokens


class TimingStreamer:
    """transformers streamer that records when each block of new tokens arrives."""

    def __init__(self, t0: float):
        self.t0, self.seen_prompt = t0, False
        self.times: list[float] = []
        self.sizes: list[int] = []

    def put(self, value) -> None:
        if not self.seen_prompt:  # generate first puts the prompt
            self.seen_prompt = True
            return
        self.times.append(time.perf_counter() - self.t0)
        self.sizes.append(int(value.numel()))

    def end(self) -> None:
        return None


def run_hf(model, tokenizer, cfg: Config, prompt, max_tokens: int) -> RequestRecord:
    extra = {"prompt_lookup_num_tokens": PROMPT_LOOKUP_TOKENS} if cfg.runner == "hf_prompt_lookup" else {}
    t0 = time.perf_counter()
    streamer = TimingStreamer(t0)
    new_ids = hf_generate(model, tokenizer, prompt.text, max_tokens, streamer=streamer, **extra)
    e2e = time.perf_counter() - t0
    return RequestRecord(
        config=cfg.name,
        concurrency=1,
        category=prompt.category,
        prompt_index=prompt.index,
        token_ids=new_ids,
        chunk_times=streamer.times,
        chunk_sizes=streamer.sizes,
        e2e_s=e2e,
    )


def hf_generate(model, tokenizer, text: str, max_tokens: int, **generate_kwargs) -> list[int]:
    """Exactly ``max_tokens`` greedy tokens from transformers' ``generate`` for one user message."""
    import torch

    from target_service.tokenizer import chat_prompt_ids

    ids = torch.tensor([chat_prompt_ids(tokenizer, [{"role": "user", "content": text}])])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_tokens,
            min_new_tokens=max_tokens,
            do_sample=False,
            pad_token_id=tokenizer.eos_token_id,
            **generate_kwargs,
        )
    return out[0, ids.shape[1] :].tolist()
