"""Distillation on an accelerator: the shards of ``training.distill``, decoded by transformers' batched generate.

``training.distill`` runs the project's own engine, which is what a CPU wants. On a GPU the cheapest way
to many answers is one large batch: prompts are answered in length-sorted, left-padded batches, then one
teacher-forced pass per batch (right-padded, so positions are plain) gives every position's final hidden
state ``h_q`` and the target's greedy choice ``a_q``. The shards are the same ``DistillSequence`` rows, so
``training.train`` reads either. End-of-sequence is suppressed: every answer has exactly ``--max-tokens``.

Sources (``--sources``, in order, one model load, each into ``OUT/<source>``): ``greedy``, ``second-turn``
and ``sampled`` as in ``training.distill``, and ``self-prompts``: the target first writes a user request
from a category and topic seed (sampled), then answers it greedily. Shards are small and saved as they
finish, so ``--minutes`` (or a kill) loses at most one shard, and a rerun resumes.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from bench import spec_bench
from training.distill import DistillSequence, Job, first_answers, jobs_for
from training.self_prompts import self_prompt_jobs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Batching:
    device: str
    max_batch: int  # sequences per generate call
    batch_tokens: int  # (prompt + answer) tokens per generate call, bounds the KV cache


def batches(lengths: list[int], extra: int, cfg: Batching) -> list[list[int]]:
    """Indices grouped longest first, each group within ``cfg.batch_tokens`` once padded."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    for i in order:
        if (
            out
            and len(out[-1]) < cfg.max_batch
            and (len(out[-1]) + 1) * (lengths[out[-1][0]] + extra) <= cfg.batch_tokens
        ):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def left_padded(rows: list[list[int]], pad: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [B, L] and attention mask [B, L], padding on the left (generation continues on the right)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r) :] = torch.tensor(r)
        mask[b, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


@torch.inference_mode()
def generate(
    model,
    prompts: list[list[int]],
    max_new: int,
    temperature: float,
    seed: int,
    cfg: Batching,
    pad: int,
    eos: int,
    until_eos: bool = False,
) -> list[list[int]]:
    """Answers (token ids) to ``prompts``: up to the first ``eos`` (excluded) with ``until_eos``, else
    exactly ``max_new`` each with ``eos`` suppressed (as the engine's ignore_eos, minus the restarts)."""
    from transformers import GenerationConfig

    gen = GenerationConfig(
        max_new_tokens=max_new,
        min_new_tokens=0 if until_eos else max_new,
        do_sample=temperature > 0,
        temperature=temperature if temperature > 0 else None,
        top_k=0 if temperature > 0 else None,
        top_p=1.0 if temperature > 0 else None,
        pad_token_id=pad,
        eos_token_id=eos,
    )
    out: list[list[int]] = [[] for _ in prompts]
    groups = batches([len(p) for p in prompts], max_new, cfg)
    for n, group in enumerate(groups):
        torch.manual_seed(seed * 1009 + n)
        ids, mask = left_padded([prompts[i] for i in group], pad, cfg.device)
        new = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)[:, ids.shape[1] :]
        for b, i in enumerate(group):
            answer = new[b].tolist()
            if not until_eos and len(answer) != max_new:
                raise RuntimeError(f"generate returned {len(answer)} tokens, not {max_new}")
            out[i] = answer[: answer.index(eos)] if until_eos and eos in answer else answer
        log.info(
            "generated batch %d/%d (%d sequences, prompts up to %d tokens)",
            n + 1,
            len(groups),
            len(group),
            ids.shape[1],
        )
    return out


@torch.inference_mode()
def record(model, full: list[list[int]], cfg: Batching) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per sequence: tokens [n] t_{q+1}, hidden [n, H] float16 h_q, greedy [n] a_q, with n = len - 1."""
    head = model.get_output_embeddings()
    out: list = [None] * len(full)
    for group in batches([len(f) for f in full], 0, cfg):
        width = max(len(full[i]) for i in group)
        ids = torch.zeros((len(group), width), dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for b, i in enumerate(group):
            ids[b, : len(full[i])] = torch.tensor(full[i])
            mask[b, : len(full[i])] = 1
        hidden = model.model(input_ids=ids.to(cfg.device), attention_mask=mask.to(cfg.device)).last_hidden_state
        for b, i in enumerate(group):
            h = hidden[b, : len(full[i]) - 1]  # [n, H]
            greedy = torch.cat([head(part).argmax(-1) for part in h.split(1024)])
            out[i] = (torch.tensor(full[i][1:]), h.half().cpu(), greedy.cpu())
    return out


def answer_jobs(
    model, tokenizer, jobs: list[Job], source: str, args, shard: int, cfg: Batching
) -> list[DistillSequence]:
    """Answer ``jobs`` (sampled at ``args.temperature`` for the sampled source, else greedy) and record them."""
    from target_service.tokenizer import chat_prompt_ids

    prompts = [
        chat_prompt_ids(tokenizer, [{"role": r, "content": c} for r, c in j.messages])[-args.max_prompt_tokens :]
        for j in jobs
    ]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    temperature = args.temperature if source == "sampled" else 0.0
    seed = args.seed * 1_000_003 + shard
    answers = generate(model, prompts, args.max_tokens, temperature, seed, cfg, pad, tokenizer.eos_token_id)
    rows = record(model, [p + a for p, a in zip(prompts, answers)], cfg)
    return [
        DistillSequence(j.prompt.category, len(p), t, h, g, source, j.prompt.question_id)
        for j, p, (t, h, g) in zip(jobs, prompts, rows)
    ]


def save_shard(rows: list[DistillSequence], path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save([vars(r) for r in rows], tmp)
    tmp.rename(path)


def main(argv: list[str] | None = None) -> None:
    from tandem_core.model_loader import load_model

    parser = argparse.ArgumentParser(prog="python -m training.distill_batched", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--prompts", type=Path, default=spec_bench.DEFAULT_PROMPTS)
    parser.add_argument("--split", default="train", help="train (default), held_out or all")
    parser.add_argument("--limit", type=int, default=0, help="only the first N prompts (self-prompts: N topics)")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--max-prompt-tokens", type=int, default=1536, help="longer prompts keep their tail")
    parser.add_argument("--sources", default="greedy", help=f"comma-separated, in order, of {','.join(SOURCES)}")
    parser.add_argument("--samples", type=int, default=1, help="sampled answers per prompt")
    parser.add_argument("--temperature", type=float, default=0.8, help="of sampled answers")
    parser.add_argument("--self-samples", type=int, default=1, help="self-written requests per (category, topic)")
    parser.add_argument("--self-temperature", type=float, default=0.7, help="of writing the requests")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-batch", type=int, default=1024)
    parser.add_argument("--batch-tokens", type=int, default=300_000)
    parser.add_argument("--shard-size", type=int, default=128, help="jobs per shard (each shard is saved at once)")
    parser.add_argument("--minutes", type=float, default=0, help="start no shard after this long; 0 = no limit")
    parser.add_argument("--out", type=Path, required=True, help="each source writes OUT/<source>/shard-*.pt")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sources = args.sources.split(",")
    if unknown := set(sources) - set(SOURCES):
        parser.error(f"unknown sources {sorted(unknown)}: choose from {', '.join(SOURCES)}")
    t0 = time.monotonic()
    cfg = Batching(args.device, args.max_batch, args.batch_tokens)
    loaded = load_model(args.model, "float32", device=args.device)
    for source in sources:
        if args.minutes and time.monotonic() - t0 > args.minutes * 60:
            break
        out = args.out / source
        jobs = make_jobs(loaded, source, args, cfg)
        out.mkdir(parents=True, exist_ok=True)
        for n in range(0, len(jobs), args.shard_size):
            path = out / f"shard-{n // args.shard_size:04d}.pt"
            if path.exists():
                continue  # resumable: finished shards are kept
            if args.minutes and time.monotonic() - t0 > args.minutes * 60:
                log.info("time budget reached: %s stops at %d of %d jobs", source, n, len(jobs))
                break
            rows = answer_jobs(loaded.model, loaded.tokenizer, jobs[n : n + args.shard_size], source, args, n, cfg)
            save_shard(rows, path)
            log.info("%s/%s: %d of %d jobs, %.0f s", source, path.name, n + len(rows), len(jobs), time.monotonic() - t0)


SOURCES = ("greedy", "second-turn", "sampled", "self-prompts")


def make_jobs(loaded, source: str, args, cfg: Batching) -> list[Job]:
    if source == "self-prompts":

        def gen(model, prompts, max_new, temperature, seed, pad, eos):
            return generate(model, prompts, max_new, temperature, seed, cfg, pad, eos, until_eos=True)

        return self_prompt_jobs(
            loaded.model, loaded.tokenizer, args.self_samples, args.self_temperature, args.seed, gen, args.limit
        )
    prompts = spec_bench.split(spec_bench.load(args.prompts), args.split)
    prompts = prompts[: args.limit] if args.limit > 0 else prompts
    answers = first_answers(args.out / "greedy", loaded.tokenizer) if source == "second-turn" else {}
    if source == "second-turn" and not answers:
        raise SystemExit("second-turn needs the greedy first answers: put greedy before it in --sources")
    return jobs_for(source, prompts, args, answers)


if __name__ == "__main__":
    main()
