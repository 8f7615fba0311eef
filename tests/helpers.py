"""Shared test helpers: tiny random models, an in-process engine, a fake tokenizer, the default model."""

from __future__ import annotations

import json

import torch

from bench.spec_bench import DEFAULT_PROMPTS
from target_service.engine import Engine, EngineLimits
from target_service.model_runner import ModelRunner
from target_service.scheduler import SchedulerLimits
from target_service.sequence import EngineRequest, FinishEvent, SamplingParams, TokenEvent

SHARED_DATA = DEFAULT_PROMPTS  # the Spec-Bench file beside the project (../shared/data)


# per family, what its real configuration has that Llama's does not (tiny sizes, the real structure)
_FAMILY_EXTRAS = {
    "deepseek_v3": dict(  # MLA with q LoRA, split key/value widths; layer 0 dense, then MoE with a shared expert
        num_key_value_heads=4, head_dim=8, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
        v_head_dim=12, first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, n_group=2,
        topk_group=1, n_shared_experts=1, moe_intermediate_size=32, num_nextn_predict_layers=1,
    ),
    "glm4_moe": dict(  # partial rotary, q/k biases, layer 0 dense, then MoE
        first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        n_shared_experts=1, moe_intermediate_size=32, num_nextn_predict_layers=1, partial_rotary_factor=0.5,
    ),
    "qwen3_next": dict(  # layers: linear attention, full attention; MoE everywhere
        layer_types=["linear_attention", "full_attention"], num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=32, linear_num_value_heads=4,
        linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
    ),
}  # fmt: skip


def tiny_config(family: str = "llama", vocab_size: int = 256, seed_std: float = 0.2):
    """A 2-layer random decoder config; a large init std keeps greedy choices far from ties."""
    from transformers import AutoConfig

    common = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=1024,
        initializer_range=seed_std,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    return AutoConfig.for_model(family, **(common | _FAMILY_EXTRAS.get(family, {})))


def tiny_model(family: str = "llama", seed: int = 0, **kw):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_config(family, **kw)).eval()


def clone_model(model):
    """An independent copy (own config object: _attn_implementation is per config)."""
    from transformers import AutoModelForCausalLM

    config = type(model.config)(**model.config.to_dict())
    copy = AutoModelForCausalLM.from_config(config).eval()
    copy.load_state_dict(model.state_dict())
    return copy.to(next(model.parameters()).dtype)


class FakeTokenizer:
    """Stands in for a tokenizer with tiny random models: token i decodes to "<i>"."""

    eos_token_id = None

    def decode(self, ids, skip_special_tokens=True):
        return "".join(f"<{i}>" for i in ids)


def make_engine(
    model, tokenizer=None, *, slots=4, max_seq_len=256, batch_tokens=64, k=0, drafter=None, queue=64, policy=None
):
    limits = SchedulerLimits(slots, max_seq_len, batch_tokens, queue, max_draft_tokens=k)
    return Engine(
        ModelRunner(clone_model(model), slots, max_seq_len),
        tokenizer or FakeTokenizer(),
        EngineLimits(limits, k),
        drafter,
        policy=policy,
    )


def run_to_completion(engine: Engine, requests: list[EngineRequest]) -> dict[str, tuple[list[int], str, FinishEvent]]:
    """Submit all, step until idle; per request id: (token ids, streamed text, finish event)."""
    queues = {r.request_id: engine.submit(r) for r in requests}
    while engine.step():
        pass
    out = {}
    for rid, q in queues.items():
        ids, text = [], []
        while True:
            event = q.get_nowait()
            if isinstance(event, TokenEvent):
                ids.extend(event.token_ids)
                text.append(event.text)
            else:
                text.append(event.text)
                out[rid] = (ids, "".join(text), event)
                break
    return out


def request(rid: str, prompt: list[int], max_tokens: int, **params) -> EngineRequest:
    return EngineRequest(rid, tuple(prompt), SamplingParams(max_tokens=max_tokens, **params))


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
    return out[0, len(prompt) :].tolist()


def spec_bench_prompts(n: int, offset: int = 0) -> list[str]:
    lines = SHARED_DATA.read_text().splitlines()[offset : offset + n]
    return [json.loads(line)["turns"][0] for line in lines]


_READER = """
import json, sys, torch
from tandem_core.transport import BufferDescriptor, RowRange, open_reader
d = json.loads(sys.argv[1]); d["ipc_handle"] = bytes.fromhex(d["ipc_handle"])
reader = open_reader(BufferDescriptor(**d))
print("mapped", flush=True)
sys.stdin.readline()  # the writer stages rows (and may unlink the name), then tells us to read
rows = reader.read(RowRange(1, 2, 3))
if rows.is_cuda:
    torch.cuda.current_stream().synchronize()
print(json.dumps(rows.cpu().tolist()), flush=True)
reader.close()
"""


def spawn_reader(descriptor):
    """A second process that maps ``descriptor``; it prints "mapped", then rows 2..4 of ring slot 1 on "go"."""
    import os
    import subprocess
    import sys
    from dataclasses import asdict

    from bench.procs import ROOT

    d = asdict(descriptor)
    d["ipc_handle"] = d["ipc_handle"].hex()
    proc = subprocess.Popen(
        [sys.executable, "-c", _READER, json.dumps(d)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.stdout.readline().strip() == "mapped"
    return proc
