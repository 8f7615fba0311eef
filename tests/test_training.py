"""Training pieces: the unrolled chain equals the serving worker, targets and masks, sub-vocabulary,
and a few optimizer steps on the tiny model actually learn (loss falls, chain accuracy rises)."""

from __future__ import annotations

import pytest
import torch

from draft_service.mtp_module import MTPHeads
from draft_service.mtp_worker import DraftBatch, MTPMode, MTPWorker
from draft_service.sub_vocab import SubVocab
from tests.helpers import tiny_model
from training.chain import chain_outputs, depth_modules, depth_targets
from training.distill import DistillSequence
from training.train import TrainConfig, Trainer, acceptance_estimate, init_from_target

K = 3


@pytest.mark.parametrize(
    "mode,first_row,frozen",
    [("eagle", 0, False), ("vanilla", 0, False), ("eagle", 6, False), ("vanilla", 8, False), ("eagle", 6, True)],
)
def test_unrolled_chain_equals_serving_worker(mode, first_row, frozen):
    """Row p of the training chain sees exactly what a serving step at p sees: same hidden outputs.

    With a frozen prefix the real pass runs in two parts (rows before first_row without gradients);
    the second part's rows must still see the whole first part.
    """
    torch.manual_seed(0)
    target = tiny_model("llama")
    heads = MTPHeads(target, 1 if mode == "eagle" else K).eval()
    worker = MTPWorker(heads, MTPMode(mode), K, num_slots=1, max_seq_len=64)
    seen: list[tuple[int, torch.Tensor]] = []
    greedy = heads.greedy
    heads.greedy = lambda module, hidden: (seen.append((module, hidden.clone())), greedy(module, hidden))[1]
    n = 9
    tokens, hidden = torch.randint(0, 256, (n,)), torch.randn(n, 64)
    drafts = worker.step(DraftBatch([0], [0], [n], tokens, hidden, [K]))[0]

    # The sequence continues with the drafts (as if all were accepted); later rows are never seen by row n-1.
    ext_tokens = torch.cat([tokens, torch.tensor(drafts)])
    ext_hidden = torch.cat([hidden, torch.randn(K, 64)])
    with torch.no_grad():
        outs = chain_outputs(heads, mode, K, ext_tokens, ext_hidden, first_row, frozen)  # rows first_row.. only
    owner = depth_modules(mode, K)
    assert [m for m, _ in seen] == owner
    row = n - 1 - first_row
    for i, (_, served) in enumerate(seen):
        torch.testing.assert_close(outs[i][row], served[0], atol=1e-5, rtol=1e-5)
    # and the training logits pick the same drafts
    assert [heads.greedy(owner[i], outs[i][row : row + 1])[0] for i in range(K)] == drafts


def test_depth_targets_follow_the_target_greedy_choices():
    # a_q = greedy[q]; tokens[q] = t_{q+1}. Position 2's token differs from the target's choice.
    tokens = torch.tensor([5, 6, 9, 8, 9, 10])
    greedy = torch.tensor([1, 6, 7, 8, 9, 11])
    (r0, l0), (r1, l1), (r2, l2) = depth_targets(tokens, greedy, 3)
    assert r0.tolist() == [0, 1, 2, 3, 4] and l0.tolist() == [6, 7, 8, 9, 11]
    # depth 1 row p was fed tokens[p+1]: valid where it equals greedy[p+1] (not p=1), label a_{p+2}
    assert r1.tolist() == [0, 2, 3] and l1.tolist() == [7, 9, 11]
    # depth 2 also needs tokens[p+2] == greedy[p+2]
    assert r2.tolist() == [2] and l2.tolist() == [11]


def test_sub_vocab_maps_back_to_target_ids():
    counts = torch.tensor([0, 5, 1, 9, 5, 0, 2, 0])
    sub = SubVocab.from_counts(counts, 4)
    assert sub.ids.tolist() == [3, 1, 4, 6]  # ties (1, 4) by the lower id
    assert sub.index_of(8).tolist() == [-1, 1, -1, 0, 2, -1, 3, -1]
    assert sub.truncate(2).ids.tolist() == [3, 1]
    with pytest.raises(ValueError):
        SubVocab(torch.tensor([1, 1]))

    torch.manual_seed(0)
    heads = MTPHeads(tiny_model("llama"), 1).eval()
    hidden = torch.randn(32, 64)
    full = torch.argmax(heads.logits(0, hidden), dim=-1)
    top = SubVocab(torch.unique(full))  # every full-vocab argmax is inside
    heads.use_sub_vocab(top)
    assert heads.logits(0, hidden).shape == (32, len(top.ids))
    assert heads.greedy(0, hidden) == full.tolist()
    heads.use_sub_vocab(None)
    assert heads.logits(0, hidden).shape == (32, 256)


def _toy_sequence(target, n: int = 48) -> DistillSequence:
    """A sequence the target 'generated': tokens follow a fixed cycle, so every depth is learnable."""
    cycle = torch.tensor([3, 17, 42, 99, 7, 250, 64, 128])
    tokens = cycle.repeat(n // len(cycle) + 1)[:n]
    with torch.no_grad():
        hidden = target.model(tokens[None]).last_hidden_state[0]
    return DistillSequence("toy", 8, tokens, hidden.half(), tokens.clone())  # 8 prompt tokens, then the answer


@pytest.mark.parametrize(
    "mode,feature_weight,frozen", [("eagle", 0.0, False), ("vanilla", 0.0, False), ("eagle", 0.5, True)]
)
def test_a_few_steps_learn_the_toy_sequence(mode, feature_weight, frozen, tmp_path):
    torch.manual_seed(0)
    target = tiny_model("llama")
    seq = _toy_sequence(target)
    heads = MTPHeads(target, 1 if mode == "eagle" else K)
    init_from_target(heads, target, seed=0)
    cfg = TrainConfig(mode, K, 64, 1.0, 3e-3, 1, 48, 256, 1, 0, True, 0.8, feature_weight, frozen)
    trainer = Trainer(heads, cfg, SubVocab.from_counts(torch.bincount(seq.tokens, minlength=256), 64), tmp_path)
    before = acceptance_estimate(trainer, [seq])["mean_acceptance_length"][K]
    first = None
    for _ in range(40):
        loss, _ = trainer.losses(seq)
        loss.backward()
        trainer.opt.step()
        trainer.opt.zero_grad()
        first = first if first is not None else float(loss.detach())
    assert float(loss) < 0.2 * first
    after = acceptance_estimate(trainer, [seq])["mean_acceptance_length"][K]
    assert after > before and after > 3.0


def test_validation_keeps_every_sequence_of_its_prompts_out_of_training():
    from training.train import split_validation

    def seq(qid: int, source: str) -> DistillSequence:
        return DistillSequence(
            "qa", 2, torch.zeros(4, dtype=torch.long), torch.zeros(4, 8), torch.zeros(4), source, qid
        )

    data = [seq(q, src) for q in range(10) for src in ("greedy", "sampled", "sampled", "second-turn")]
    train, val = split_validation(data, 3)
    assert len(val) == 3 and {s.source for s in val} == {"greedy"}
    held = {s.question_id for s in val}
    assert not held & {s.question_id for s in train}
    assert len(train) == len(data) - 4 * len(held)


def test_distillation_sources_build_the_right_conversations(tmp_path):
    from argparse import Namespace

    from bench.spec_bench import Prompt
    from tests.helpers import FakeTokenizer
    from training.distill import first_answers, jobs_for

    prompts = [Prompt(0, 81, "mt_bench", "Q1", ("Q1b",)), Prompt(1, 90, "qa", "Q2")]
    args = Namespace(samples=2, temperature=0.7, seed=3)
    greedy = jobs_for("greedy", prompts, args, {})
    assert [(j.messages, j.temperature) for j in greedy] == [((("user", "Q1"),), 0.0), ((("user", "Q2"),), 0.0)]
    sampled = jobs_for("sampled", prompts, args, {})
    assert len(sampled) == 4 and {j.temperature for j in sampled} == {0.7}
    assert len({j.seed for j in sampled}) == 4 and len({j.rid for j in sampled}) == 4
    assert [j.seed for j in jobs_for("sampled", prompts, args, {})] == [j.seed for j in sampled]  # reproducible

    # a greedy run's shard: prompt of 3 tokens, answer 5 6 then the end-of-turn token 2 and more
    tokens = torch.tensor([11, 12, 5, 6, 2, 7])
    row = DistillSequence("mt_bench", 3, tokens, torch.zeros(6, 4), torch.zeros(6), "greedy", 81)
    torch.save([vars(row)], tmp_path / "shard-0000.pt")
    tok = FakeTokenizer()
    tok.eos_token_id = 2
    answers = first_answers(tmp_path, tok)
    assert answers == {81: "<5><6>"}
    (second,) = jobs_for("second-turn", prompts, args, answers)  # only the prompt with a later turn
    assert second.messages == (("user", "Q1"), ("assistant", "<5><6>"), ("user", "Q1b"))


def test_served_length_walks_rows_as_serving_does():
    from training.train import served_length

    # row 0 accepts 2 drafts (3 tokens, next step at row 3), row 3 none, row 4 one (rows 4-5), row 6 none
    run = torch.tensor([2, 0, 0, 0, 1, 0, 0])
    assert served_length([run]) == (3 + 1 + 2 + 1) / 4
    # the per-row mean (1 + 3/7) also counts rows 1, 2 and 5, which serving skips
    assert served_length([run]) != 1 + float(run.float().mean())
    assert served_length([torch.zeros(5, dtype=torch.long)]) == 1.0


def test_evaluate_reads_exported_heads_and_splits_figures_by_category(tmp_path):
    from dataclasses import replace

    from training.evaluate import evaluate, trainer_for

    torch.manual_seed(0)
    target = tiny_model("llama")
    seq = _toy_sequence(target)
    heads = MTPHeads(target, 1)
    init_from_target(heads, target, seed=0)
    cfg = TrainConfig("eagle", K, 64, 1.0, 3e-3, 1, 48, 256, 1, 0, True, 0.8)
    trainer = Trainer(heads, cfg, SubVocab.from_counts(torch.bincount(seq.tokens, minlength=256), 64), tmp_path)
    for _ in range(40):
        loss, _ = trainer.losses(seq)
        loss.backward()
        trainer.opt.step()
        trainer.opt.zero_grad()
    trainer.export({})  # float16 heads, as shipped
    noise = replace(seq, category="noise", tokens=torch.randint(0, 256, (48,)), greedy=torch.randint(0, 256, (48,)))
    got = evaluate(trainer_for(target, tmp_path, K), [seq, noise], K)
    assert set(got) == {"toy", "noise", "all"}
    assert got["toy"][1] > 3.0 and got["noise"][1] < 1.5  # learnt cycle vs labels it cannot know
    assert got["noise"][1] < got["all"][1] < got["toy"][1]
    assert got["toy"][2] <= got["toy"][1]  # walking visits only where a step starts
