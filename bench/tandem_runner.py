"""Run one benchmark request through a Tandem target service (the public gRPC API, streamed)."""

from __future__ import annotations

import time

from bench.records import Config, RequestRecord


def profile_snapshot(client) -> dict[str, float]:
    p = client.model_info().profile
    return {"steps": p.steps, "forward_s": p.forward_s, "draft_s": p.draft_s, "other_s": p.other_s}


def run_tandem(client, cfg: Config, prompt, max_tokens: int, concurrency: int, profile: bool) -> RequestRecord:
    """Stream ``prompt`` with exactly ``max_tokens`` new tokens (EOS ignored, so every config does equal work)."""
    before = profile_snapshot(client) if profile else {}
    kwargs = {"max_tokens": max_tokens, "ignore_eos": True, "num_draft_tokens": cfg.k}
    if cfg.k:
        kwargs["draft_length"] = cfg.draft_length
    if cfg.temperature:
        kwargs.update(temperature=cfg.temperature, seed=prompt.index)
    if cfg.acceptance:
        kwargs["acceptance"] = cfg.acceptance
    times, sizes, ids = [], [], []
    t0 = time.perf_counter()
    stream = client.stream([{"role": "user", "content": prompt.text}], **kwargs)
    for chunk in stream:
        times.append(time.perf_counter() - t0)
        sizes.append(len(chunk.token_ids))
        ids.extend(chunk.token_ids)
    e2e = time.perf_counter() - t0
    stats = stream.completion.stats
    after = profile_snapshot(client) if profile else {}
    return RequestRecord(
        config=cfg.name,
        concurrency=concurrency,
        category=prompt.category,
        prompt_index=prompt.index,
        token_ids=ids,
        chunk_times=times,
        chunk_sizes=sizes,
        e2e_s=e2e,
        steps=stats.num_steps,
        drafted_per_position=list(stats.drafted_per_position),
        accepted_per_position=list(stats.accepted_per_position),
        profile={key: after[key] - before[key] for key in after},
    )
