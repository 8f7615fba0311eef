"""Batched distillation (the accelerator path): padded batches give what one sequence at a time gives,
EOS is suppressed, the token budget is kept, and self-written requests are shaped and kept apart."""

from __future__ import annotations

import torch

from tests.helpers import hf_greedy, tiny_model
from training.distill import DistillSequence
from training.distill_batched import Batching, batches, generate, record
from training.self_prompts import ASKS, SELF_PROMPT_ID, TOPICS, seeds, self_prompt_jobs
from training.train import split_validation

CPU = Batching("cpu", max_batch=8, batch_tokens=10_000)


def test_batches_keep_the_token_budget_and_group_longest_first():
    lengths = [5, 40, 12, 33, 7, 40, 1]
    groups = batches(lengths, extra=10, cfg=Batching("cpu", max_batch=3, batch_tokens=110))
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) <= 3
        assert len(g) * (lengths[g[0]] + 10) <= 110 or len(g) == 1  # padded to the group's first (longest)
        assert all(lengths[i] <= lengths[g[0]] for i in g)


def test_left_padded_generation_equals_one_prompt_at_a_time_and_never_ends():
    model = tiny_model("llama")
    prompts = [[5, 9, 14, 3], [7, 7], [200, 1, 2, 3, 4, 5, 6], [11]]
    plain = [hf_greedy(model, p, 6) for p in prompts]
    eos = plain[0][2]  # a token the target does say: generation must go on past it without saying it
    got = generate(model, prompts, 6, 0.0, 0, CPU, pad=0, eos=eos)
    for answer, alone in zip(got, plain):
        assert len(answer) == 6 and eos not in answer
        if eos not in alone:  # where the plain answer says EOS, the batched one must say something else
            assert answer == alone
    assert sum(eos not in alone for alone in plain) >= 2  # the comparison above ran


def test_generation_until_eos_cuts_there():
    model = tiny_model("llama")
    free = generate(model, [[5, 9, 14, 3]], 8, 0.0, 0, CPU, pad=0, eos=10_000 % 256)
    stop = free[0][3]
    cut = generate(model, [[5, 9, 14, 3]], 8, 0.0, 0, CPU, pad=0, eos=stop, until_eos=True)[0]
    assert stop not in cut and cut == free[0][: free[0].index(stop)]


def test_recorded_pairs_match_an_unpadded_forward():
    model = tiny_model("llama")
    full = [[4, 8, 15, 16, 23, 42], [1, 2, 3], [9] * 11]
    rows = record(model, full, CPU)
    for ids, (tokens, hidden, greedy) in zip(full, rows):
        with torch.no_grad():
            h = model.model(input_ids=torch.tensor([ids])).last_hidden_state[0, :-1]
            best = model.lm_head(h).argmax(-1)
        assert tokens.tolist() == ids[1:]
        torch.testing.assert_close(hidden.float(), h, atol=2e-2, rtol=1e-2)  # stored as float16
        assert greedy.tolist() == best.tolist()


class _Tokenizer:
    """Stands in for a chat tokenizer: one id per character, the template is the text itself."""

    eos_token_id, pad_token_id = 0, None

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [ord(c) % 250 + 1 for c in messages[-1]["content"]]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(96 + i % 26) for i in ids)


def test_self_written_requests_take_their_category_shape():
    asked: list[int] = []

    def write(model, prompts, max_new, temperature, seed, pad, eos):
        asked.append(len(prompts))
        return [[] if n == 1 else [1, 2, 3] for n in range(len(prompts))]  # the second writing comes back empty

    jobs = self_prompt_jobs(None, _Tokenizer(), samples=2, temperature=0.7, seed=0, generate=write, topics=3)
    assert asked == [len(ASKS) * 3 * 2] == [len(seeds(2, 3))]
    assert len(jobs) == len(ASKS) * 3 * 2 - 1
    assert all(j.prompt.question_id >= SELF_PROMPT_ID for j in jobs)
    shaped = {j.prompt.category: j.prompt.text for j in jobs}
    assert shaped["translation"].startswith("Translate German to English: ")
    assert shaped["summarization"].startswith("Summarize: ")
    assert TOPICS[0] in shaped["rag"] or any(t in shaped["rag"] for t in TOPICS[:3])


def test_validation_is_chosen_among_benchmark_prompts_only():
    def seq(qid, source):
        return DistillSequence(
            "qa", 2, torch.zeros(4, dtype=torch.long), torch.zeros(4, 8), torch.zeros(4), source, qid
        )

    data = [seq(q, "greedy") for q in range(10)] + [seq(SELF_PROMPT_ID + i, "self-prompts") for i in range(30)]
    train, val = split_validation(data, 4)
    assert len(val) == 4 and all(s.question_id < SELF_PROMPT_ID for s in val)
    assert len(train) == len(data) - 4
