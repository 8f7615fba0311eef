"""The MTP families end to end, from tiny random checkpoints written in each family's real layout.

A checkpoint here is what the family publishes, shrunk: the target's tensors under transformers' names
(MoE experts one by one, as on disk) and its MTP layers under the family's own names (DeepSeek-V3 and
GLM-4.5 at ``model.layers.{num_hidden_layers + i}``, MiMo at ``model.mtp_layers.{i}``, Qwen3-Next under
``mtp.``). The MTP decoder blocks are written by transformers itself: a model with extra layers of the
right type is saved and its extra layers are renamed.

For each family the draft service runs as its own process on the checkpoint: every MTP tensor is
consumed; its drafts for a prompt equal a reference MTP forward written below from the checkpoint's
tensors (depths beyond the checkpoint's modules reuse them in turn, each depth fed the previous depth's
normed output); and a target process on the same checkpoint generates the same greedy tokens with
speculation as without. Qwen3-Next's MTP layer is checked on the drafter side only: the target service
refuses its linear-attention model with the reason (and so does ModelRunner, tests/test_kv_cache.py).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from bench.procs import ServiceProcess, free_port, start_target
from draft_service.checkpoint import build_heads, load_target_pieces
from target_service.grpc_drafter import GrpcDrafter, GrpcDrafterConfig
from target_service.step_output import StepOutput
from tests.helpers import tiny_config

TARGET_LAYERS = 2
PROMPT = [5, 17, 42, 9, 100, 77, 3, 250, 31, 64, 8, 199]


@dataclass(frozen=True)
class Case:
    family: str  # the transformers model type the layers are built with
    mtp_modules: int  # MTP layers in the checkpoint
    k: int  # draft depths asked (more than mtp_modules: depths reuse modules)
    model_type: str = ""  # what config.json says, when it differs ("mimo")
    target_runs: bool = True


CASES = [
    Case("deepseek_v3", 1, 2),
    Case("glm4_moe", 1, 2),
    Case("qwen2", 2, 3, model_type="mimo"),
    Case("qwen3_next", 1, 2, target_runs=False),
]


def _config(case: Case, layers: int):
    config = tiny_config(case.family)
    config.num_hidden_layers = layers
    if case.family == "qwen3_next":  # linear attention, then full attention; MTP layers are full attention
        config.layer_types = ["linear_attention", "full_attention"] + ["full_attention"] * (layers - 2)
    elif getattr(config, "layer_types", None):
        config.layer_types = ["full_attention"] * layers
    return config


def _rms(x: torch.Tensor, weight: torch.Tensor, case: Case) -> torch.Tensor:
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return x * (1 + weight if case.family == "qwen3_next" else weight)  # Qwen3-Next's norms are zero-centred


# ---- checkpoint writer ----------------------------------------------------------------------------------
def _read(directory: Path) -> dict[str, torch.Tensor]:
    out = {}
    for path in directory.glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    return out


def _own_names(case: Case, i: int) -> tuple[str, str, str, str]:
    """Module i's embedding norm, hidden norm, projection and final norm, as the family names them."""
    if case.model_type == "mimo":
        names, prefix = (
            ("token_layernorm", "hidden_layernorm", "input_proj", "final_layernorm"),
            f"model.mtp_layers.{i}.",
        )
    elif case.family == "qwen3_next":
        names, prefix = ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm"), "mtp."
    else:
        names, prefix = ("enorm", "hnorm", "eh_proj", "shared_head.norm"), f"model.layers.{TARGET_LAYERS + i}."
    return tuple(f"{prefix}{n}.weight" for n in names)


def _own_parts(case: Case, i: int, hidden: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """The MTP module's own tensors (norms, projection), random."""
    centre = 0.0 if case.family == "qwen3_next" else 1.0
    e, h, p, f = _own_names(case, i)
    # spread final-norm weights: feeding the next depth the normed or the raw output must give other drafts
    norms = {n: centre + spread * torch.randn(hidden, generator=g) for n, spread in ((e, 0.1), (h, 0.1), (f, 1.0))}
    return norms | {p: 0.1 * torch.randn(hidden, 2 * hidden, generator=g)}


def _block_prefix(case: Case, i: int) -> str:
    if case.model_type == "mimo":
        return f"model.mtp_layers.{i}."
    if case.family == "qwen3_next":
        return f"mtp.layers.{i}."
    return f"model.layers.{TARGET_LAYERS + i}."


def write_checkpoint(case: Case, path: Path, tokenizer_dir: Path) -> set[str]:
    """Write the family's checkpoint; return the names of its MTP tensors."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(3)
    full = AutoModelForCausalLM.from_config(_config(case, TARGET_LAYERS + case.mtp_modules)).eval()
    full.save_pretrained(str(path / "with_mtp_blocks"))  # the reference loads its MTP blocks from here
    state = _read(path / "with_mtp_blocks")
    out, mtp = {}, set()
    for key, value in state.items():
        layer = key.split(".")[2] if key.startswith("model.layers.") else None
        if layer is not None and int(layer) >= TARGET_LAYERS:
            i = int(layer) - TARGET_LAYERS
            key = _block_prefix(case, i) + key.split(".", 3)[3]
            mtp.add(key)
        out[key] = value
    g = torch.Generator().manual_seed(4)
    for i in range(case.mtp_modules):
        parts = _own_parts(case, i, full.config.hidden_size, g)
        out.update(parts)
        mtp.update(parts)
        if case.family in ("deepseek_v3", "glm4_moe"):  # shared copies of the embedding and head
            out[f"model.layers.{TARGET_LAYERS + i}.embed_tokens.weight"] = state["model.embed_tokens.weight"].clone()
            out[f"model.layers.{TARGET_LAYERS + i}.shared_head.head.weight"] = state["lm_head.weight"].clone()
    ckpt = path / "checkpoint"
    ckpt.mkdir()
    save_file({k: v.contiguous() for k, v in out.items()}, str(ckpt / "model.safetensors"))
    config = json.loads((path / "with_mtp_blocks" / "config.json").read_text())
    config["num_hidden_layers"] = TARGET_LAYERS
    if "layer_types" in config:
        config["layer_types"] = config["layer_types"][:TARGET_LAYERS]
    if case.model_type:
        config |= {"model_type": case.model_type, "architectures": ["MiMoForCausalLM"]}
    config["num_nextn_predict_layers"] = case.mtp_modules
    (ckpt / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, ckpt / name)
    return mtp


# ---- reference MTP forward --------------------------------------------------------------------------------
def reference_drafts(case: Case, path: Path, prompt: list[int], k: int) -> tuple[list[int], int, torch.Tensor]:
    """(k drafts, the target's next token, the target's final hidden states of the prompt [L, H])."""
    from transformers import AutoModelForCausalLM

    full = AutoModelForCausalLM.from_pretrained(str(path / "with_mtp_blocks"), local_files_only=True).eval()
    tensors = _read(path / "checkpoint")
    with torch.no_grad():
        target_hidden = _target_hidden(full, prompt)  # [L, H]
        bonus = int(torch.argmax(full.lm_head(target_hidden[-1])))
        tokens, hidden, drafts = prompt[1:] + [bonus], list(target_hidden), []
        for depth in range(k):
            m = depth % case.mtp_modules
            e, h, p, f = (tensors[n] for n in _own_names(case, m))
            embedded = _rms(full.model.embed_tokens(torch.tensor(tokens)), e, case)
            normed = _rms(torch.stack(hidden), h, case)
            x = torch.cat([normed, embedded] if case.model_type == "mimo" else [embedded, normed], dim=-1) @ p.T
            positions = torch.arange(len(tokens))[None]
            block = full.model.layers[TARGET_LAYERS + m]
            rotary = full.model.rotary_emb(x[None], position_ids=positions)
            out = block(x[None], position_embeddings=rotary, position_ids=positions, attention_mask=None)
            out = (out[0] if isinstance(out, tuple) else out)[0, -1]
            last = _rms(out, f, case)  # what the head reads and what the next depth is fed
            drafts.append(int(torch.argmax(full.lm_head(last))))
            tokens, hidden = tokens + [drafts[-1]], hidden + [last]
    return drafts, bonus, target_hidden


def _target_hidden(full, prompt: list[int]) -> torch.Tensor:
    """The target's final normed hidden states: the model with only its target layers."""
    layers = full.model.layers
    full.model.layers = layers[:TARGET_LAYERS]
    try:
        return full.model(torch.tensor([prompt])).last_hidden_state[0]
    finally:
        full.model.layers = layers


def _context_step(prompt: list[int], hidden: torch.Tensor, bonus: int, k: int) -> StepOutput:
    n = len(prompt)
    return StepOutput(
        request_ids=["r"], slots=[0], is_context=[True], q_lens=[n], input_ids=torch.tensor(prompt),
        positions=torch.arange(n), hidden_states=hidden, accepted_tokens=torch.tensor([[bonus] + [0] * k]),
        num_accepted=[1], num_output_tokens=[0], num_draft_tokens=[k], next_prompt_token=[-1], finished=[False],
    )  # fmt: skip


def _drafts_from_service(port: int, case: Case, hidden: torch.Tensor, bonus: int) -> list[int]:
    config = GrpcDrafterConfig(f"127.0.0.1:{port}", case.k, mode="vanilla", transport="shm", deadline_s=30)
    config = dataclasses.replace(config, min_deadline_s=30)
    drafter = GrpcDrafter(config, vocab_size=256, hidden_size=hidden.shape[1], dtype=torch.float32, max_slots=2,
                          max_seq_len=128, rows_per_step=64)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not drafter.attached:
            assert time.monotonic() < deadline, "the test's drafter link never attached"
            time.sleep(0.05)
        (drafts,) = drafter.propose(_context_step(PROMPT, hidden, bonus, case.k))
        return drafts
    finally:
        drafter.close()


@pytest.mark.parametrize("case", CASES, ids=[c.model_type or c.family for c in CASES])
def test_family_checkpoint_drafts_and_speculates_end_to_end(tmp_path, case, default_model_converted):
    mtp_keys = write_checkpoint(case, tmp_path, default_model_converted)
    ckpt = tmp_path / "checkpoint"

    target = load_target_pieces(ckpt, torch.float32)
    heads, report = build_heads(target, case.k, ckpt, seed=0, num_target_layers=TARGET_LAYERS)
    assert report.consumed == mtp_keys  # every MTP tensor has a home (experts fused, MoE block built)
    assert len(heads.layers) == case.mtp_modules and heads.chain_normed

    expected, bonus, hidden = reference_drafts(case, tmp_path, PROMPT, case.k)
    port = free_port()
    # float32 weights: the drafts must equal the float32 reference exactly (bfloat16 moves near-ties)
    args = ["--model", str(ckpt), "--mtp-checkpoint", str(ckpt), "--mode", "vanilla", "--head-weights", "float32"]
    drafter = ServiceProcess("draft_service", [*args, "--num-draft-tokens", str(case.k), "--max-seq-len", "256"], port)
    try:
        drafter.wait_serving()
        assert _drafts_from_service(port, case, hidden, bonus) == expected
        if case.target_runs:
            _speculative_equals_plain(ckpt, port, case.k)
        else:
            _target_refuses(ckpt)
    finally:
        drafter.stop()
    assert f"{len(mtp_keys)} tensors consumed" in drafter.logs()


def _speculative_equals_plain(ckpt: Path, draft_port: int, k: int) -> None:
    from client import TandemClient

    target = start_target(
        "--model", str(ckpt), "--drafter", "grpc", "--draft-address", f"127.0.0.1:{draft_port}",
        "--num-draft-tokens", str(k), "--draft-length", "fixed", "--max-seq-len", "256",
    )  # fmt: skip
    try:
        with TandemClient(target.address, timeout=120) as client:
            deadline = time.monotonic() + 60
            while not client.model_info().drafter_status.attached:
                assert time.monotonic() < deadline, "the target never attached to the drafter"
                time.sleep(0.1)
            for prompt in (PROMPT, PROMPT[:5], [7, 7, 7, 7, 7, 7]):
                plain = client.generate(prompt, max_tokens=24, ignore_eos=True, num_draft_tokens=0)
                spec = client.generate(prompt, max_tokens=24, ignore_eos=True)
                assert spec.token_ids == plain.token_ids
                assert spec.stats.num_drafted > 0  # speculation really ran
    finally:
        target.stop()


def _target_refuses(ckpt: Path) -> None:
    """The target service exits with the reason, before reading weights, without a traceback."""
    import subprocess
    import sys

    args = [sys.executable, "-m", "target_service", "--model", str(ckpt), "--port", "0"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "tandem-target: Qwen3-Next cannot run as a target" in done.stderr and "Traceback" not in done.stderr


def test_eagle_mode_on_an_imported_checkpoint_drafts_what_vanilla_does_with_one_module(
    tmp_path, default_model_converted
):
    """One published MTP layer applied k times (Eagle) = k depths mapped onto it (vanilla, modulo), per step."""
    from draft_service.mtp_worker import DraftBatch, MTPMode, MTPWorker

    case = CASES[0]
    write_checkpoint(case, tmp_path, default_model_converted)
    target = load_target_pieces(tmp_path / "checkpoint", torch.float32)
    heads, _ = build_heads(target, 1, tmp_path / "checkpoint", seed=0, num_target_layers=TARGET_LAYERS)
    workers = [MTPWorker(heads, mode, 3, num_slots=2, max_seq_len=64) for mode in (MTPMode.EAGLE, MTPMode.VANILLA)]
    g = torch.Generator().manual_seed(5)
    start, new = 0, len(PROMPT)
    for _ in range(4):  # a context step, then generation steps of 2 accepted tokens
        batch = DraftBatch([1], [start], [new], torch.randint(0, 256, (new,), generator=g),
                           torch.randn(new, heads.config.hidden_size, generator=g), [3])  # fmt: skip
        eagle, vanilla = (w.step(batch) for w in workers)
        assert eagle == vanilla and len(eagle[0]) == 3
        start, new = start + new, 2
