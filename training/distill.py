"""Collect self-distillation data: the target answers prompts through the project's own engine.

A recording drafter sits where the MTP drafter would and keeps every ``(t_{q+1}, h_q)`` pair the
engine would send it (draft_pairs.py), plus ``a_q = argmax lm_head(h_q)``, the target's own greedy
choice after position q. For a generated position a_q is the next token; for a prompt position it is
what the target would have said there. Prompts are processed in shards (one file each) so an
interrupted run resumes where it stopped.

Sources (``--source``): ``greedy`` answers to the first turn; ``sampled`` answers (``--samples`` per
prompt at ``--temperature``, seeded), still labelled with the target's greedy choice at every
position; ``second-turn`` answers to the later turns with the target's own first answer (from a
``greedy`` directory, ``--first-answers``) as context.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from bench import spec_bench
from target_service.draft_pairs import draft_pairs, gather_rows
from target_service.step_output import StepOutput
from target_service.tokenizer import chat_prompt_ids

log = logging.getLogger(__name__)


@dataclass
class DistillSequence:
    """One prompt + answer as the drafter sees it; pair q pairs h_q with the token after q."""

    category: str
    prompt_len: int  # tokens of the prompt (pairs 0..prompt_len-2 have a prompt token as t_{q+1})
    tokens: torch.Tensor  # [n] int64 t_{q+1}
    hidden: torch.Tensor  # [n, hidden_size] float16 h_q (final, post-norm)
    greedy: torch.Tensor  # [n] int64 a_q = argmax of the target's logits at q
    source: str = "greedy"  # greedy | sampled | second-turn
    question_id: int = -1


class RecordingDrafter:
    """A Drafter that proposes nothing and records the pairs of every live sequence."""

    def __init__(self, lm_head: torch.nn.Module):
        self.lm_head = lm_head
        self.parts: dict[str, list[tuple[int, list[int], torch.Tensor, torch.Tensor]]] = {}

    @torch.inference_mode()
    def propose(self, step: StepOutput) -> list[list[int]]:
        pairs = draft_pairs(step)
        if pairs:
            rows = gather_rows(step, pairs).float()
            greedy = torch.argmax(self.lm_head(rows), dim=-1)
            offset = 0
            for p in pairs:
                n = len(p.rows)
                rid = step.request_ids[p.index]
                self.parts.setdefault(rid, []).append(
                    (p.start, p.tokens, rows[offset : offset + n].half(), greedy[offset : offset + n])
                )
                offset += n
        return [[] for _ in step.request_ids]

    def release(self, request_ids: list[str]) -> None:
        return None

    def status(self) -> None:
        return None

    def close(self) -> None:
        return None

    def sequence(self, rid: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The recorded pairs of one request, checked to be contiguous from position 0."""
        tokens, hidden, greedy, expect = [], [], [], 0
        for start, toks, rows, best in self.parts.pop(rid):
            if start != expect:
                raise RuntimeError(f"{rid}: pairs jump from position {expect} to {start}")
            tokens += toks
            hidden.append(rows)
            greedy.append(best)
            expect = start + len(toks)
        return torch.tensor(tokens, dtype=torch.long), torch.cat(hidden), torch.cat(greedy)


@dataclass(frozen=True)
class Job:
    """One conversation to answer."""

    rid: str
    prompt: spec_bench.Prompt
    messages: tuple[tuple[str, str], ...]  # (role, content)
    temperature: float = 0.0
    seed: int | None = None


def jobs_for(source: str, prompts: list[spec_bench.Prompt], args, first_answers: dict[int, str]) -> list[Job]:
    if source == "greedy":
        return [Job(f"q{p.question_id}", p, (("user", p.text),)) for p in prompts]
    if source == "sampled":
        return [
            Job(f"q{p.question_id}-s{i}", p, (("user", p.text),), args.temperature, _seed(args.seed, p.index, i))
            for p in prompts
            for i in range(args.samples)
        ]
    if source == "second-turn":
        out = []
        for p in prompts:
            if p.followups and p.question_id in first_answers:
                turns = (("user", p.text), ("assistant", first_answers[p.question_id]), ("user", p.followups[0]))
                out.append(Job(f"q{p.question_id}-t2", p, turns))
        return out
    raise ValueError(f"unknown source {source!r}: greedy, sampled or second-turn")


def _seed(seed: int, prompt_index: int, sample: int) -> int:
    return seed * 100_003 + prompt_index * 97 + sample


def collect(engine_factory, tokenizer, jobs: list[Job], source: str, max_tokens: int, max_prompt: int):
    """Answer every job (EOS ignored, exactly ``max_tokens``) and return the recorded sequences."""
    from target_service.sequence import EngineRequest, FinishEvent, SamplingParams

    engine, recorder = engine_factory()
    queues = {}
    for job in jobs:
        messages = [{"role": r, "content": c} for r, c in job.messages]
        ids = chat_prompt_ids(tokenizer, messages)[-max_prompt:]
        params = SamplingParams(
            max_tokens=max_tokens, ignore_eos=True, num_draft_tokens=0, temperature=job.temperature, seed=job.seed
        )
        queues[job.rid] = (engine.submit(EngineRequest(job.rid, tuple(ids), params)), len(ids), job.prompt)
    while engine.step():
        pass
    out = []
    for rid, (q, prompt_len, prompt) in queues.items():
        while not isinstance(q.get_nowait(), FinishEvent):
            pass
        tokens, hidden, greedy = recorder.sequence(rid)
        out.append(DistillSequence(prompt.category, prompt_len, tokens, hidden, greedy, source, prompt.question_id))
    return out


def first_answers(directory: Path, tokenizer) -> dict[int, str]:
    """question_id -> the target's greedy first answer (cut at its end-of-turn token) from a greedy run."""
    out = {}
    for s in load_shards(directory):
        answer = s.tokens[s.prompt_len - 1 :].tolist()
        if tokenizer.eos_token_id in answer:
            answer = answer[: answer.index(tokenizer.eos_token_id)]
        out[s.question_id] = tokenizer.decode(answer, skip_special_tokens=True).strip()
    return out


def _engine_factory(model, tokenizer, slots: int, max_seq_len: int):
    from target_service.engine import Engine, EngineLimits
    from target_service.model_runner import ModelRunner
    from target_service.scheduler import SchedulerLimits

    def make():
        recorder = RecordingDrafter(model.get_output_embeddings())
        limits = SchedulerLimits(slots, max_seq_len, 4096, 100000, max_draft_tokens=0)
        return Engine(ModelRunner(model, slots, max_seq_len), tokenizer, EngineLimits(limits, 0), recorder), recorder

    return make


def load_shards(directory: Path) -> list[DistillSequence]:
    files = sorted(directory.glob("shard-*.pt"))
    if not files:
        raise FileNotFoundError(f"no shard-*.pt in {directory}: run `python -m training.distill` first")
    return [DistillSequence(**row) for f in files for row in torch.load(f)]


def main(argv: list[str] | None = None) -> None:
    from tqdm import tqdm

    from tandem_core.model_loader import load_model

    parser = argparse.ArgumentParser(prog="python -m training.distill", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--prompts", type=Path, default=spec_bench.DEFAULT_PROMPTS)
    parser.add_argument("--split", default="train", help="train (default), held_out or all")
    parser.add_argument("--limit", type=int, default=0, help="use only the first N prompts of the split")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-prompt-tokens", type=int, default=1536, help="longer prompts keep their tail")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--shard-size", type=int, default=32, help="prompts per shard file")
    parser.add_argument("--source", default="greedy", choices=["greedy", "sampled", "second-turn"])
    parser.add_argument("--samples", type=int, default=1, help="sampled answers per prompt (--source sampled)")
    parser.add_argument("--temperature", type=float, default=0.8, help="for --source sampled")
    parser.add_argument("--seed", type=int, default=0, help="for --source sampled")
    parser.add_argument("--first-answers", type=Path, help="a --source greedy directory (for second-turn)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    prompts = spec_bench.split(spec_bench.load(args.prompts), args.split)
    prompts = prompts[: args.limit] if args.limit > 0 else prompts
    loaded = load_model(args.model, "float32")
    make = _engine_factory(loaded.model, loaded.tokenizer, args.slots, args.max_prompt_tokens + args.max_tokens + 8)
    args.out.mkdir(parents=True, exist_ok=True)
    answers = first_answers(args.first_answers, loaded.tokenizer) if args.source == "second-turn" else {}
    if args.source == "second-turn" and not answers:
        raise SystemExit("--source second-turn needs --first-answers DIR (a --source greedy run)")
    shards = [prompts[i : i + args.shard_size] for i in range(0, len(prompts), args.shard_size)]
    for n, shard in enumerate(tqdm(shards, desc=f"distill {args.source}", unit="shard")):
        path = args.out / f"shard-{n:04d}.pt"
        if path.exists():
            continue  # resumable: finished shards are kept
        jobs = jobs_for(args.source, shard, args, answers)
        rows = collect(make, loaded.tokenizer, jobs, args.source, args.max_tokens, args.max_prompt_tokens)
        tmp = path.with_suffix(".tmp")
        torch.save([vars(r) for r in rows], tmp)
        tmp.rename(path)
    total = load_shards(args.out)
    print(f"{len(total)} sequences, {sum(len(s.tokens) for s in total)} pairs in {args.out}")


if __name__ == "__main__":
    main()
