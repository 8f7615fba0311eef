"""MTP checkpoints in every supported layout: every MTP tensor consumed, none missing, values intact."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from draft_service.checkpoint import build_heads, load_target_pieces, save_mtp_checkpoint
from draft_service.layouts import get_layout
from draft_service.mtp_module import MTPHeads
from tests.helpers import tiny_model

TARGET_LAYERS = 2


@pytest.fixture(scope="module")
def target():
    return tiny_model("llama")


def write_layout(path, target, heads: MTPHeads, layout: str) -> set[str]:
    """A checkpoint directory as the family ships it: target weights + MTP weights (+ shared copies)."""
    lay = get_layout(layout)
    state = {k: v.clone() for k, v in target.state_dict().items()}
    mtp_keys = set()
    for key, value in heads.layers.state_dict().items():
        name = lay.from_own(key, TARGET_LAYERS)
        state[name] = value.clone()
        mtp_keys.add(name)
    if layout == "deepseek":
        for i in range(len(heads.layers)):
            state[f"model.layers.{TARGET_LAYERS + i}.embed_tokens.weight"] = target.model.embed_tokens.weight.clone()
            state[f"model.layers.{TARGET_LAYERS + i}.shared_head.head.weight"] = target.lm_head.weight.clone()
    path.mkdir()
    half = len(state) // 2  # two shards, like a real sharded checkpoint
    items = sorted(state.items())
    save_file(dict(items[:half]), str(path / "model-00001.safetensors"))
    save_file(dict(items[half:]), str(path / "model-00002.safetensors"))
    return mtp_keys


@pytest.mark.parametrize("layout, modules", [("deepseek", 3), ("mimo", 2), ("qwen3_next", 1)])
def test_published_layouts_load_every_tensor(tmp_path, target, layout, modules):
    torch.manual_seed(11)
    reference = MTPHeads(target, modules, hidden_first=layout == "mimo")
    mtp_keys = write_layout(tmp_path / "ckpt", target, reference, layout)
    heads, report = build_heads(target, modules, tmp_path / "ckpt", seed=99, num_target_layers=TARGET_LAYERS)
    assert report.layout == layout
    assert report.consumed == mtp_keys
    assert len(report.dropped) == (2 * modules if layout == "deepseek" else 0)
    loaded, expected = heads.layers.state_dict(), reference.layers.state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)
    assert heads.layers[0].hidden_first is (layout == "mimo")


def test_a_missing_tensor_is_named(tmp_path, target):
    reference = MTPHeads(target, 1)
    write_layout(tmp_path / "ckpt", target, reference, "qwen3_next")
    for shard in (tmp_path / "ckpt").glob("*.safetensors"):
        from safetensors.torch import load_file

        state = load_file(str(shard))
        state.pop("mtp.fc.weight", None)
        save_file(state, str(shard))
    with pytest.raises(KeyError, match="eh_proj"):
        build_heads(target, 1, tmp_path / "ckpt", seed=0, num_target_layers=TARGET_LAYERS)


def test_own_format_round_trip_and_eagle_reads_only_module_0(tmp_path, target):
    torch.manual_seed(5)
    reference = MTPHeads(target, 3)
    save_mtp_checkpoint(reference, tmp_path / "own", mode="vanilla")
    heads, report = build_heads(target, 3, tmp_path / "own", seed=1)
    assert report is None
    assert all(torch.equal(a, b) for a, b in zip(heads.parameters(), reference.parameters()))
    eagle, _ = build_heads(target, 1, tmp_path / "own", seed=1)
    assert torch.equal(eagle.layers[0].eh_proj.weight, reference.layers[0].eh_proj.weight)


def test_target_pieces_load_only_embedding_and_head(tmp_path, target):
    target.save_pretrained(str(tmp_path / "t"))
    skeleton = load_target_pieces(tmp_path / "t", torch.float32)
    assert len(skeleton.model.layers) == 1  # one layer built, for its class only
    assert skeleton.config.num_hidden_layers == target.config.num_hidden_layers  # what MTP layer types follow
    assert torch.equal(skeleton.model.embed_tokens.weight, target.model.embed_tokens.weight)
    assert torch.equal(skeleton.lm_head.weight, target.lm_head.weight)


def test_shipped_heads_are_the_default_and_load(tmp_path):
    """The default model's draft service uses the heads in the repository, with their sub-vocabulary."""
    from draft_service.config import parse_draft_config
    from draft_service.heads import shipped_heads
    from draft_service.main import pick_sub_vocab, resolve_checkpoint
    from draft_service.sub_vocab import SubVocab

    for mode in ("eagle", "vanilla"):
        config = parse_draft_config(["--mode", mode], env={})
        assert resolve_checkpoint(config) == shipped_heads(mode)
        meta = json.loads((shipped_heads(mode) / "mtp.json").read_text())
        assert meta["mode"] == mode and meta["num_modules"] == (1 if mode == "eagle" else 4)
        sub = pick_sub_vocab(shipped_heads(mode), -1)
        assert isinstance(sub, SubVocab) and len(sub.ids) == meta["train"]["sub_vocab"]
        assert len(pick_sub_vocab(shipped_heads(mode), 1024).ids) == 1024
        assert pick_sub_vocab(shipped_heads(mode), 0) is None
    assert resolve_checkpoint(parse_draft_config(["--mtp-checkpoint", "random"], env={})) is None
    with pytest.raises(SystemExit):
        pick_sub_vocab(tmp_path, 1024)  # no draft_vocab.safetensors there
