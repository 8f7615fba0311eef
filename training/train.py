"""Train MTP heads (vanilla or Eagle) on self-distillation data: `python -m training.train`.

Each sequence runs the unrolled draft chain (chain.py); the loss is cross-entropy of every depth's
draft logits against the target's own greedy tokens, over the draft sub-vocabulary (the N most
frequent greedy tokens of the training data; the LM head and embedding stay the target's, frozen).
A module starts as a copy of the target's last decoder layer and final norm, with ``eh_proj``
passing the hidden half through. Seeded; checkpoints every few steps and resumes from the last one.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from draft_service.checkpoint import load_mtp_checkpoint, save_mtp_checkpoint
from draft_service.mtp_module import MTPHeads
from draft_service.sub_vocab import SubVocab
from training.chain import chain_outputs, depth_modules, depth_targets
from training.distill import DistillSequence, load_shards

STATE_FILE = "trainer_state.pt"


@dataclass(frozen=True)
class TrainConfig:
    mode: str  # "vanilla" or "eagle"
    depths: int  # draft tokens trained (k)
    sub_vocab: int  # N
    epochs: float
    lr: float
    warmup_steps: int
    tokens_per_step: int  # pairs per optimizer step (gradient accumulation over sequences)
    max_seq_pairs: int  # longer sequences keep their last pairs
    val_sequences: int  # sequences kept out of training for the acceptance estimate
    seed: int
    answer_only: bool = False  # loss (and draft passes) on answer rows only; the prompt is context
    depth_decay: float = 1.0  # loss weight of depth i is depth_decay ** i (depth 0 matters most)
    feature_weight: float = 0.0  # EAGLE's regression of each depth's output onto the target's next hidden state
    frozen_prefix: bool = False  # prompt rows are context computed without gradients (with answer_only)


def init_from_target(heads: MTPHeads, target: torch.nn.Module, seed: int) -> None:
    """Each module = the target's last layer and final norm; eh_proj passes the hidden half through."""
    torch.manual_seed(seed)
    last, hidden = target.model.layers[-1], heads.config.hidden_size
    for layer in heads.layers:
        layer.block.load_state_dict(last.state_dict())
        layer.final_norm.load_state_dict(target.model.norm.state_dict())
        with torch.no_grad():
            w = torch.randn(hidden, 2 * hidden) * 0.01
            hid = slice(0, hidden) if layer.hidden_first else slice(hidden, 2 * hidden)
            w[:, hid] += torch.eye(hidden)
            layer.eh_proj.weight.copy_(w)


def count_greedy(data: list[DistillSequence], vocab_size: int) -> torch.Tensor:  # [vocab] counts
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for s in data:
        counts += torch.bincount(s.greedy, minlength=vocab_size)
    return counts


class Trainer:
    def __init__(self, heads: MTPHeads, cfg: TrainConfig, sub: SubVocab, out: Path, device: str = "cpu"):
        self.heads, self.cfg, self.sub, self.out, self.device = heads.to(device), cfg, sub, out, device
        self.index = sub.index_of(heads.config.vocab_size).to(device)  # target id -> sub index (-1 absent)
        self.sub_ids = sub.ids.to(device)  # [N] sub index -> target id
        self.weight = heads.lm_head.weight.detach()[self.sub_ids]  # [N, H] frozen
        used = sorted(set(depth_modules(cfg.mode, cfg.depths)))
        self.params = [p for m in used for p in heads.layers[m].parameters()]
        for p in heads.parameters():
            p.requires_grad_(False)
        for p in self.params:
            p.requires_grad_(True)
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=0.0)
        self.step = 0

    def losses(self, seq: DistillSequence) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        """Summed loss over depths and rows, and per depth (correct, counted)."""
        tokens, hidden, greedy, answer = window(seq, self.cfg.max_seq_pairs, self.device)
        first = answer if self.cfg.answer_only else 0
        frozen = self.cfg.frozen_prefix and self.cfg.answer_only
        outs = chain_outputs(self.heads, self.cfg.mode, self.cfg.depths, tokens, hidden, first, frozen)
        owner = depth_modules(self.cfg.mode, self.cfg.depths)
        total, stats = torch.zeros((), device=self.device), []
        for i, (rows, labels) in enumerate(depth_targets(tokens, greedy, self.cfg.depths)):
            target = self.index[labels]
            keep = (target >= 0) & (rows >= first)
            rows, target = rows[keep], target[keep]
            out = outs[i][rows - first]  # [n, H]
            logits = F.linear(self.heads.layers[owner[i]].final_norm(out), self.weight)
            loss = F.cross_entropy(logits, target, reduction="sum")
            if self.cfg.feature_weight:  # out_i at row p stands for the target's hidden state at p + i + 1
                goal = hidden[rows + i + 1]
                loss = loss + self.cfg.feature_weight * F.smooth_l1_loss(out, goal, reduction="none").mean(-1).sum()
            total = total + self.cfg.depth_decay**i * loss
            stats.append((int((logits.argmax(-1) == target).sum()), len(target)))
        return total, stats

    def lr_at(self, step: int, total: int, time_frac: float = 0.0) -> float:
        """Warm-up, then cosine to a tenth; ``time_frac`` (elapsed / time budget) moves it on when later."""
        if step < self.cfg.warmup_steps:
            return self.cfg.lr * (step + 1) / self.cfg.warmup_steps
        frac = max(time_frac, (step - self.cfg.warmup_steps) / max(1, total - self.cfg.warmup_steps))
        return self.cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))

    def save(self, epoch_order: list[int], position: int) -> None:
        state = {
            "step": self.step,
            "modules": self.heads.layers.state_dict(),
            "opt": self.opt.state_dict(),
            "order": epoch_order,
            "position": position,
            "config": asdict(self.cfg),
        }
        tmp = self.out / (STATE_FILE + ".tmp")
        torch.save(state, tmp)
        tmp.rename(self.out / STATE_FILE)

    def export(self, meta: dict) -> None:
        save_mtp_checkpoint(self.heads.to("cpu"), self.out, self.cfg.mode, extra=meta, dtype=torch.float16)
        self.sub.save(self.out)


def window(seq: DistillSequence, n: int, device: str = "cpu"):
    """The last ``n`` pairs of a sequence: tokens [n], hidden [n, H] float32, greedy [n], first answer row.

    Row q >= prompt_len - 1 is where serving drafts happen (its token is generated, not prompt).
    """
    cut = max(0, len(seq.tokens) - n)
    answer = max(0, seq.prompt_len - 1 - cut)
    parts = (seq.tokens[cut:], seq.hidden[cut:], seq.greedy[cut:])
    tokens, hidden, greedy = (t.to(device, non_blocking=True) for t in parts)
    return tokens, hidden.float(), greedy, answer


def split_validation(data: list[DistillSequence], count: int) -> tuple[list[DistillSequence], list[DistillSequence]]:
    """(train, validation): the greedy sequences of ``count`` prompts spread over the data are kept out
    (chosen among prompts with a greedy answer, so never a self-written request),
    and so is every other sequence of those prompts (sampled answers, second turns), so validation
    measures prompts the heads never saw."""
    ids = sorted({s.question_id for s in data if s.source == "greedy"}) or sorted({s.question_id for s in data})
    chosen = set(ids[:: max(1, len(ids) // max(1, count))][:count])
    held = [s for s in data if s.question_id in chosen]
    val = [s for s in held if s.source == "greedy"] or held
    return [s for s in data if s.question_id not in chosen], val[:count]


def schedule(num_sequences: int, epochs: float, seed: int) -> list[int]:
    """The sequence order for the whole run: shuffled epochs (seeded), cut at the fractional epoch."""
    g = torch.Generator().manual_seed(seed)
    order: list[int] = []
    for _ in range(math.ceil(epochs)):
        order += torch.randperm(num_sequences, generator=g).tolist()
    return order[: int(round(epochs * num_sequences))]


@torch.no_grad()
def acceptance_estimate(trainer: Trainer, data: list[DistillSequence]) -> dict:
    """Teacher-forced chain accuracy on answer positions = the serving acceptance of a step there.

    A step at real position p accepts drafts while every depth so far matches the target; the mean
    acceptance length at k is 1 + the mean run length capped at k.
    """
    depths = trainer.cfg.depths
    runs: list[int] = []
    per_depth = [0] * depths
    walks: list[list[torch.Tensor]] = [[] for _ in range(depths)]  # per k: accepted drafts per row, per sequence
    for seq in data:
        tokens, hidden, greedy, first = window(seq, trainer.cfg.max_seq_pairs, trainer.device)  # answer rows only
        last = len(tokens) - depths - 1
        if last <= first:
            continue
        outs = chain_outputs(trainer.heads, trainer.cfg.mode, depths, tokens, hidden, first)
        owner = depth_modules(trainer.cfg.mode, depths)
        correct = []
        for i in range(depths):
            normed = trainer.heads.layers[owner[i]].final_norm(outs[i][: last - first])
            ids = trainer.sub_ids[F.linear(normed, trainer.weight).argmax(-1)]
            correct.append(ids == greedy[first + i + 1 : last + i + 1])
        ok = torch.stack(correct, dim=1)  # [rows, depths]
        run = torch.cumprod(ok.long(), dim=1)
        for i in range(depths):
            per_depth[i] += int(run[:, i].sum())
            walks[i].append(run[:, : i + 1].sum(1))
        runs.append(len(ok))
    rows = max(1, sum(runs))
    accept = [per_depth[i] / rows for i in range(depths)]  # P(first i+1 drafts all accepted)
    return {
        "rows": rows,
        "accept_prefix": accept,
        "mean_acceptance_length": {k: 1 + sum(accept[:k]) for k in range(1, depths + 1)},
        "served_acceptance_length": {k: served_length(walks[k - 1]) for k in range(1, depths + 1)},
    }


def served_length(accepted: list[torch.Tensor]) -> float:
    """Tokens per step of a serving walk: per sequence, ``accepted[r]`` drafts pass at answer row r.

    Serving does not visit every row: a step that accepts ``a`` drafts moves on ``a + 1`` rows and
    skips the rows inside the accepted run. So the per-row mean (``mean_acceptance_length``) is not
    what serving measures: on the target's answers to the 48 held-out prompts, Eagle k=3 gave 1.90
    per row and 1.62 walked, and ``tandem-bench`` served 1.61.
    """
    steps = tokens = 0
    for run in accepted:
        r = 0
        while r < len(run):
            a = int(run[r])
            steps, tokens, r = steps + 1, tokens + a + 1, r + a + 1
    return tokens / max(1, steps)


def main(argv: list[str] | None = None) -> None:
    from tqdm import tqdm

    from tandem_core.model_loader import load_model

    p = argparse.ArgumentParser(prog="python -m training.train", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, nargs="+", required=True, help="directories written by training.distill")
    p.add_argument("--model", default="default")
    p.add_argument("--mode", choices=["vanilla", "eagle"], required=True)
    p.add_argument("--depths", type=int, default=4)
    p.add_argument("--sub-vocab", type=int, default=8192)
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--tokens-per-step", type=int, default=4096)
    p.add_argument("--max-seq-pairs", type=int, default=768)
    p.add_argument("--val-sequences", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--answer-only", action="store_true", help="loss on answer rows only (prompt = context)")
    p.add_argument("--depth-decay", type=float, default=1.0, help="loss weight of depth i = decay ** i")
    p.add_argument("--feature-weight", type=float, default=0.0, help="weight of the next-hidden-state regression")
    p.add_argument("--frozen-prefix", action="store_true", help="with --answer-only: prompt rows without gradients")
    p.add_argument("--eval-every", type=int, default=0, help="optimizer steps between validation points (curve.jsonl)")
    p.add_argument("--init-from", type=Path, help="start from these heads (mtp.safetensors) instead of the target")
    p.add_argument("--max-minutes", type=float, default=0, help="stop (and export) after this long; 0 = no limit")
    p.add_argument("--save-every", type=int, default=10, help="optimizer steps between resumable checkpoints")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu or cuda (the data stays in host memory)")
    p.add_argument("--lr-by-time", action="store_true", help="with --max-minutes: the schedule ends with the budget")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = TrainConfig(
        args.mode,
        args.depths,
        args.sub_vocab,
        args.epochs,
        args.lr,
        args.warmup_steps,
        args.tokens_per_step,
        args.max_seq_pairs,
        args.val_sequences,
        args.seed,
        args.answer_only,
        args.depth_decay,
        args.feature_weight,
        args.frozen_prefix,
    )
    t0 = time.monotonic()
    data = [seq for directory in args.data for seq in load_shards(directory)]
    train, val = split_validation(data, cfg.val_sequences)
    print(f"{len(train)} training sequences ({sum(len(s.tokens) for s in train)} pairs), {len(val)} validation")
    target = load_model(args.model, "float32").model
    heads = MTPHeads(target, 1 if cfg.mode == "eagle" else cfg.depths)
    init_from_target(heads, target, cfg.seed)
    if args.init_from:
        load_mtp_checkpoint(heads, args.init_from)
    sub = SubVocab.from_counts(count_greedy(train, heads.config.vocab_size), cfg.sub_vocab)
    args.out.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(heads, cfg, sub, args.out, args.device)
    order, position = schedule(len(train), cfg.epochs, cfg.seed), 0
    state_path = args.out / STATE_FILE
    if state_path.exists():
        state = torch.load(state_path, map_location=args.device)
        if state["config"] != asdict(cfg):
            raise SystemExit(f"{state_path} was written with another configuration; use a new --out")
        heads.layers.load_state_dict(state["modules"])
        trainer.opt.load_state_dict(state["opt"])
        trainer.step, order, position = state["step"], state["order"], state["position"]
        print(f"resumed at step {trainer.step} (sequence {position}/{len(order)})")
    total_steps = _count_steps(train, order, cfg)
    bar = tqdm(total=len(order), initial=position, desc=f"train {cfg.mode}", unit="seq")
    pending, stats, loss_sum = 0, [[0, 0] for _ in range(cfg.depths)], 0.0
    while position < len(order):
        seq = train[order[position]]
        loss, st = trainer.losses(seq)
        (loss / cfg.tokens_per_step).backward()
        loss_sum += float(loss.detach())
        for i, (c, n) in enumerate(st):
            stats[i][0] += c
            stats[i][1] += n
        pending += loss_rows(seq, cfg)
        position += 1
        bar.update(1)
        if pending >= cfg.tokens_per_step or position == len(order):
            elapsed = (time.monotonic() - t0) / 60 / args.max_minutes if args.lr_by_time and args.max_minutes else 0.0
            for group in trainer.opt.param_groups:
                group["lr"] = trainer.lr_at(trainer.step, total_steps, elapsed)
            torch.nn.utils.clip_grad_norm_(trainer.params, 1.0)
            trainer.opt.step()
            trainer.opt.zero_grad(set_to_none=True)
            trainer.step += 1
            acc = " ".join(f"{c / max(1, n):.2f}" for c, n in stats)
            bar.set_postfix_str(
                f"step {trainer.step}/{total_steps} loss {loss_sum / max(1, stats[0][1]):.3f} acc {acc}"
            )
            pending, stats, loss_sum = 0, [[0, 0] for _ in range(cfg.depths)], 0.0
            if trainer.step % args.save_every == 0:
                trainer.save(order, position)
            if args.eval_every and trainer.step % args.eval_every == 0:
                point = {"step": trainer.step, "sequences": position, "minutes": round((time.monotonic() - t0) / 60, 1)}
                with open(args.out / "curve.jsonl", "a") as f:
                    f.write(json.dumps({**point, **acceptance_estimate(trainer, val)}) + "\n")
        if args.max_minutes and time.monotonic() - t0 > args.max_minutes * 60:
            print(f"time budget of {args.max_minutes} min reached at sequence {position}/{len(order)}")
            break
    bar.close()
    trainer.save(order, position)
    estimate = acceptance_estimate(trainer, val)
    meta = {
        "train": asdict(cfg),
        "trained_sequences": position,
        "optimizer_steps": trainer.step,
        "minutes": round((time.monotonic() - t0) / 60, 1),
        "validation": estimate,
    }
    trainer.export(meta)
    print(json.dumps(meta["validation"], indent=2))


def loss_rows(seq: DistillSequence, cfg: TrainConfig) -> int:
    """Rows a sequence contributes to the loss (what --tokens-per-step counts)."""
    n = min(len(seq.tokens), cfg.max_seq_pairs)
    return n - window(seq, cfg.max_seq_pairs)[3] if cfg.answer_only else n


def _count_steps(train: list[DistillSequence], order: list[int], cfg: TrainConfig) -> int:
    steps, pending = 0, 0
    for i in order:
        pending += loss_rows(train[i], cfg)
        if pending >= cfg.tokens_per_step:
            steps, pending = steps + 1, 0
    return steps + (pending > 0)


if __name__ == "__main__":
    main()
