"""Kernel settings (tandem_core/kernels.py): what runs where, and that the fast path changes no result."""

from __future__ import annotations

import json

import pytest
import torch

from draft_service.mtp_module import MTPHeads, MTPInput
from draft_service.sub_vocab import SubVocab
from tandem_core import kernels
from tandem_core.kernels import MIN_ROWS, FastDecoderLayer, GatedMLP, PackedLinear, apply_kernels, resolve_kernels
from tandem_core.kv_cache import AttentionBatch
from tests.helpers import clone_model, tiny_model


def test_auto_picks_onednn_for_cpu_float32_only():
    assert resolve_kernels("auto", "cpu", torch.float32) == "onednn"
    assert resolve_kernels("auto", "cpu", torch.bfloat16) == "eager"
    assert resolve_kernels("onednn", "cpu", torch.bfloat16) == "eager"  # asked for, cannot run: eager, warned
    assert resolve_kernels("eager", "cpu", torch.float32) == "eager"
    with pytest.raises(ValueError, match="kernels must be one of"):
        resolve_kernels("fast", "cpu", torch.float32)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_onednn_rewrites_every_linear_of_a_known_decoder(family):
    model = tiny_model(family)
    assert apply_kernels(model, "onednn") == "onednn"
    layers = list(model.model.layers)
    assert all(isinstance(layer, FastDecoderLayer) for layer in layers)
    assert isinstance(model.lm_head, PackedLinear)
    assert not any(type(m) is torch.nn.Linear for m in model.modules())


def test_gated_mlp_of_an_unknown_layer_is_fused_and_equal():
    source = tiny_model("llama").model.layers[0].mlp
    x = torch.randn(1, 5, source.gate_proj.in_features)
    with torch.no_grad():
        expected = source(x)
        fused = GatedMLP(source)
        assert torch.allclose(fused(x), expected, atol=1e-5)


@pytest.mark.parametrize("shape", [(3,), (1, 2), (1, 3), (2, 1)])
def test_packed_linear_pads_steps_of_few_rows_and_returns_only_theirs(shape):
    torch.manual_seed(0)
    linear = torch.nn.Linear(24, 40)
    x = torch.randn(*shape, 24)
    padded, unpadded = PackedLinear(linear), PackedLinear(linear, min_rows=1)
    with torch.no_grad():
        expected = linear(x)
        out = padded(x)
        assert out.shape == (*shape, 40)
        assert torch.allclose(out, expected, atol=1e-5)
        assert torch.allclose(unpadded(x), expected, atol=1e-5)
        # the rows of a step as the first rows of a step of MIN_ROWS: the pads change none of them
        more = torch.cat([x.reshape(-1, 24), torch.randn(padded.min_rows, 24)])[: padded.min_rows]
        assert torch.equal(padded(more)[: x.numel() // 24], out.reshape(-1, 40))


needs_bf16 = pytest.mark.skipif(not kernels.onednn_bf16(), reason="this CPU's oneDNN has no bfloat16 GEMMs")


@needs_bf16
@pytest.mark.parametrize("shape", [(1,), (6,), (2, 3)])
def test_bfloat16_weights_take_and_give_float32_close_to_the_float32_weights(shape):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 96)
    packed = PackedLinear(linear)
    x = torch.randn(*shape, 64)
    with torch.no_grad():
        expected = linear(x)
        packed.pack(torch.bfloat16)
        out = packed(x)
        assert out.dtype == torch.float32 and out.shape == expected.shape
        error = ((out - expected).abs().max() / expected.abs().max()).item()
        assert 0 < error < 2e-2  # bfloat16's 8-bit mantissa: close, and not the float32 product
        packed.pack(torch.float32)
        assert torch.allclose(packed(x), expected, atol=1e-5)  # repacked: the float32 weights again


def _random_heads(target, modules: int = 1) -> MTPHeads:
    heads = MTPHeads(clone_model(target), modules)
    torch.manual_seed(3)
    for p in heads.layers.parameters():
        torch.nn.init.normal_(p, std=0.05)
    heads.use_sub_vocab(SubVocab(torch.arange(0, 256, 2)))
    return heads


def test_native_bfloat16_is_read_off_the_cpu_flags(tmp_path):
    def cpu(flags: str) -> str:
        path = tmp_path / "cpuinfo"
        path.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {flags}\n\nprocessor\t: 1\nflags\t\t: fpu\n")
        return str(path)

    supported = kernels.onednn_bf16()
    assert kernels.native_bf16(cpu("avx512f avx512_bf16")) == supported
    assert kernels.native_bf16(cpu("avx512f amx_tile amx_bf16")) == supported
    assert not kernels.native_bf16(cpu("avx512f avx512bw avx512_vnni"))  # converted, not native: stays float32
    assert not kernels.native_bf16(str(tmp_path / "missing"))


def test_head_weights_follow_the_setting_and_the_cpu(monkeypatch, caplog):
    heads = _random_heads(tiny_model("llama", seed_std=0.05))
    with pytest.raises(ValueError, match="weights must be one of"):
        kernels.pack_weights(heads, "float8")
    monkeypatch.setattr(kernels, "native_bf16", lambda: False)
    for choice in ("auto", "bfloat16", "float32"):
        caplog.clear()
        assert heads.use_kernels("onednn", choice) == "onednn" and heads.weights == "float32"
        # only bfloat16 asked for by name where it is not native is worth a warning
        assert ("native bfloat16" in caplog.text) == (choice == "bfloat16")
    monkeypatch.setattr(kernels, "native_bf16", lambda: True)
    assert heads.use_kernels("eager", "bfloat16") == "eager" and heads.weights == "float32"  # nothing packed


@needs_bf16
def test_heads_on_bfloat16_weights_keep_their_float32_cache_and_nearly_their_logits(monkeypatch):
    target = tiny_model("llama", seed_std=0.05)
    exact, half = _random_heads(target), _random_heads(target)
    exact.use_kernels("onednn", "float32")
    monkeypatch.setattr(kernels, "native_bf16", lambda: True)
    assert half.use_kernels("onednn", "auto") == "onednn" and half.weights == "bfloat16"
    packed = [m for m in half.modules() if isinstance(m, PackedLinear)]
    assert packed and all(m.packed_dtype == torch.bfloat16 for m in packed)
    assert half.eh_dtype == torch.float32  # what crosses the link and what the caches hold stay float32
    tokens, hidden = torch.randint(0, 256, (7,)), torch.randn(7, target.config.hidden_size)
    logits = []
    for heads in (exact, half):
        cache = heads.new_caches(1, 2, 32)[0]
        with torch.inference_mode():
            inp = MTPInput(tokens, hidden, _attn([1, 0], [0, 0], [4, 3]))
            out = heads.layers[0](inp, heads.embed, heads.rotary, cache)
            logits.append(heads.logits(0, out))
        assert cache.keys[0].dtype == torch.float32
    error = ((logits[0] - logits[1]).abs().max() / logits[0].abs().max()).item()
    assert 0 < error < 5e-2


def _attn(slots, starts, q_lens):
    return AttentionBatch.build(slots, starts, q_lens)


@pytest.mark.parametrize("mode_modules", [1, 3])
def test_mtp_heads_draft_the_same_on_both_kernels(mode_modules):
    target = tiny_model("llama", seed_std=0.05)
    eager = MTPHeads(clone_model(target), mode_modules)
    torch.manual_seed(3)
    for p in eager.layers.parameters():
        torch.nn.init.normal_(p, std=0.05)
    fast = MTPHeads(clone_model(target), mode_modules)
    fast.layers.load_state_dict(eager.layers.state_dict())
    sub = SubVocab(torch.arange(0, 256, 2))
    for heads in (eager, fast):
        heads.use_sub_vocab(sub)
    assert fast.use_kernels("onednn") == "onednn"
    assert isinstance(fast.sub_head, PackedLinear) and isinstance(fast.layers[0].block, FastDecoderLayer)

    tokens = torch.randint(0, 256, (7,))
    hidden = torch.randn(7, target.config.hidden_size)
    for module in range(mode_modules):
        outs = []
        for heads in (eager, fast):
            cache = heads.new_caches(1, 2, 32)[0]
            with torch.inference_mode():
                out = heads.layers[module](
                    MTPInput(tokens, hidden, _attn([1, 0], [0, 0], [4, 3])), heads.embed, heads.rotary, cache
                )
                outs.append((out, heads.logits(module, out), heads.greedy(module, out)))
        assert torch.allclose(outs[0][0], outs[1][0], atol=1e-5)
        assert torch.allclose(outs[0][1], outs[1][1], atol=1e-4)
        assert outs[0][2] == outs[1][2]


@pytest.mark.parametrize("mode", ["eagle", "vanilla"])
def test_rows_before_the_last_only_fill_the_cache_and_change_nothing(mode, monkeypatch):
    """MTPWorker stores keys and values alone for rows whose output is never read: same drafts, same cache,
    whether every call takes that path (``WHOLE_BLOCK_ROWS`` 0), only the first step's 13 rows do (the
    default) or none does."""
    from draft_service import mtp_worker
    from draft_service.mtp_module import MTPModule
    from draft_service.mtp_worker import DraftBatch, MTPMode, MTPWorker

    target = tiny_model("llama", seed_std=0.05)
    heads = MTPHeads(target, 2)
    torch.manual_seed(5)
    for p in heads.layers.parameters():
        torch.nn.init.normal_(p, std=0.05)
    heads.use_kernels("onednn")
    hidden_size = target.config.hidden_size
    steps = [  # a prompt of 9 pairs and one of 4, then 3 and 1 accepted pairs
        DraftBatch([0, 1], [0, 0], [9, 4], torch.randint(0, 256, (13,)), torch.randn(13, hidden_size), [3, 2]),
        DraftBatch([0, 1], [9, 4], [3, 1], torch.randint(0, 256, (4,)), torch.randn(4, hidden_size), [3, 3]),
    ]
    results = []
    assert 4 <= mtp_worker.WHOLE_BLOCK_ROWS < 13
    for alone, whole_rows in ((True, 0), (True, mtp_worker.WHOLE_BLOCK_ROWS), (False, 0)):
        monkeypatch.setattr(MTPModule, "fills_cache_alone", property(lambda self, alone=alone: alone))
        monkeypatch.setattr(mtp_worker, "WHOLE_BLOCK_ROWS", whole_rows)
        worker = MTPWorker(heads, MTPMode(mode), 3, num_slots=2, max_seq_len=32)
        drafts = [worker.step(b) for b in steps]
        results.append((drafts, [c.keys[0][:, :, :13].clone() for c in worker.caches]))
    for fast in results[:2]:
        assert fast[0] == results[2][0]
        for got, full in zip(fast[1], results[2][1]):
            assert torch.allclose(got, full, atol=1e-5)


def test_qcurve_measures_every_cell_and_setting_and_renders():
    from bench.qcurve import Cell, markdown, measure
    from target_service.model_runner import ModelRunner

    runners = {k: ModelRunner(tiny_model("llama"), 2, 64, k) for k in ("eager", "onednn")}
    cells = [Cell(16, b, q) for b in (1, 2) for q in (1, 4)]
    results = measure(runners, cells, repeats=2, warmup=0)
    results.update(model="tiny", command="test")
    assert [(r["seqs"], r["q"]) for r in results["rows"]] == [(1, 1), (1, 4), (2, 1), (2, 4)]
    assert all(r["eager_ms"] > 0 and r["onednn_ms"] > 0 and r["floor_ms"] > 0 for r in results["rows"])
    text = markdown(results)
    assert text.count("| 16 | 1 | onednn |") == 1 and "q=4" in text and "q=1 vs eager" in text


def test_qcurve_unpadded_setting_runs_every_packed_linear_on_the_rows_given():
    from bench.qcurve import without_padding
    from target_service.model_runner import ModelRunner

    runner = ModelRunner(tiny_model("llama"), 2, 64, "onednn")
    packed = [m for m in runner.model.modules() if isinstance(m, PackedLinear)]
    assert packed and all(m.min_rows == MIN_ROWS > 1 for m in packed)
    assert without_padding(runner.model) == len(packed)
    assert all(m.min_rows == 1 for m in packed)


def test_step_cost_fit_bench_prices_every_cell_under_both_models_and_renders():
    from bench.step_cost_fit import MODELS, markdown, rows, timed_steps
    from target_service.draft_policy import StepCost, calibration_samples
    from target_service.model_runner import ModelRunner

    runner = ModelRunner(tiny_model("llama"), 4, 64, "onednn")
    samples = calibration_samples(runner, 4, 3, contexts=(8, 24), rounds=1)
    assert len(samples) == 2 * 3 * (1 + 2 + 2)  # contexts x new tokens x (1, 2 and 4 sequences; 2 slot orders)
    costs = {MODELS[0]: StepCost.fit(samples, 4), MODELS[1]: StepCost.fit(samples, 4, split_verifying=False)}
    assert costs[MODELS[1]].per_split_verifying == 0.0
    measured = timed_steps(runner, 4, [8, 20], [1, 2, 3, 4], repeats=1)
    table = rows(costs, measured)
    assert [(r["context"], r["q"]) for r in table] == [(c, q) for c in (8, 20) for q in (1, 2, 3, 4)]
    assert all(r[f"{m} ms"] > 0 for r in table for m in MODELS)
    assert "draft_measured_ms" not in table[0] and table[1]["draft_measured_ms"] == pytest.approx(
        table[1]["measured_ms"] - table[0]["measured_ms"]
    )
    text = markdown({"model": "tiny", "kernels": "onednn", "seqs": 4, "machine": "m", "repeats": 1, "command": "c",
                     "date": "d", "coefficients": {m: list(c.coefficients) for m, c in costs.items()},
                     "rows": table})  # fmt: skip
    assert text.count("\n| 8 | ") == 4 and "(2) without" in text


def test_step_layout_bench_times_every_layout_and_renders(tmp_path):
    from bench.step_layout import layouts, markdown, measure
    from target_service.model_runner import ModelRunner

    cases = layouts(seqs=4, short=8, long=30)
    assert sorted(cases[2].slots) == list(range(4)) and cases[2].slots != list(range(4))  # scattered
    assert cases[3].q_lens == [2, 1, 1, 1]
    runner = ModelRunner(tiny_model("llama"), 4, 64, "onednn")
    rows = measure(runner, cases, repeats=1, attention=("padded", "split"))
    assert [(r["layout"], r["attention"]) for r in rows] == [(c.name, a) for a in ("padded", "split") for c in cases]
    assert rows[0]["vs_first"] == 1.0 == rows[len(cases)]["vs_first"]
    assert all(r["ms"] > 0 for r in rows) and rows[6]["tokens"] == 16 and rows[9]["tokens"] == 8
    assert [c.q_lens for c in cases[10:13]] == [[2, 1, 1, 1], [1, 2, 1, 2], [1, 2, 3, 4]]
    from tandem_core.kv_cache import runs_dense

    dense = [runs_dense(c.slots, c.starts, c.q_lens) for c in cases[7:13]]
    assert dense == [True] * 6  # consecutive slots, equal contexts: one call, whatever drafts each verifies
    from bench.step_layout import forward_batch

    ran = [runner.forward(forward_batch(c, runner.vocab_size)).split_attention for c in cases]
    assert ran == [not runs_dense(c.slots, c.starts, c.q_lens) for c in cases]  # what the engine prices by
    assert ran[2] and ran[3]  # scattered slots still split
    text = markdown({"model": "tiny", "kernels": "onednn", "seqs": 4, "machine": "m", "repeats": 1,
                     "command": "c", "date": "d", "rows": rows})  # fmt: skip
    assert text.count("\n| slots ") == 2 * len(cases)


def test_malloc_step_bench_runs_each_setting_in_its_own_process_and_renders(tmp_path):
    from bench.malloc_step import SETTINGS, markdown, run_rounds, summarise
    from bench.tiny_checkpoint import write_tiny_checkpoint

    model = write_tiny_checkpoint(tmp_path / "tiny")
    runs = run_rounds(str(model), rounds=1, repeats=1)
    assert list(runs) == list(SETTINGS) and all(len(r) == 1 for r in runs.values())
    rows = summarise(runs)
    assert all(r["per_token_ms"] > 0 and len(r["layouts_ms"]) == 4 for r in rows)
    assert set(rows[0]["vs_defaults"].values()) == {1.0}
    text = markdown({"model": "tiny", "machine": "m", "rounds": 1, "command": "c", "date": "d", "rows": rows})
    assert text.count("ms/token") == 1 and text.count("\n| ") == len(SETTINGS) + 2  # header, rule, rows


def test_services_fix_glibc_malloc_thresholds_in_a_fresh_process():
    import subprocess
    import sys

    code = "from tandem_core.memory import fix_malloc_thresholds as f; print(f())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"  # glibc (this project's Linux images) takes all three settings


def test_gemm_rows_bench_times_every_shape_and_row_count(tmp_path):
    from bench.gemm_rows import main

    main(["--shapes", "40x24,8x16", "--rows", "1,4", "--repeats", "2", "--evict-mib", "1", "--out", str(tmp_path)])
    text = (tmp_path / "gemm_rows.md").read_text()
    assert "| 40 x 24 |" in text and "| 8 x 16 |" in text and "4 rows" in text
    results = json.loads((tmp_path / "gemm_rows.json").read_text())
    assert [s["shape"] for s in results["shapes"]] == [[40, 24], [8, 16]]
    assert all(v > 0 for s in results["shapes"] for v in s["ms"].values())


def test_dense_split_bench_times_both_ways_and_says_what_the_rule_picks(tmp_path):
    from bench.dense_split import main
    from bench.tiny_checkpoint import write_tiny_checkpoint
    from tandem_core import kv_cache

    model = write_tiny_checkpoint(tmp_path / "tiny")
    main(["--model", str(model), "--seqs", "4", "--spreads", "10-40,5-900", "--q", "1,2", "--repeats", "1",
          "--out", str(tmp_path)])  # fmt: skip
    rows = json.loads((tmp_path / "dense_split.json").read_text())["rows"]
    assert [r["layout"] for r in rows] == ["10-40, q=1", "10-40, q=2", "5-900, q=1", "5-900, q=2"]
    # padded keys a sequence 15 and 448, padded over real keys 1.6x and 2.0x
    assert [r["rule"] for r in rows] == ["one call"] * 2 + ["per sequence"] * 2
    assert all(r["ms"]["one call"] > 0 and r["ms"]["per sequence"] > 0 and r["rule_vs_best"] >= 1 for r in rows)
    assert (kv_cache.DENSE_PADDED_KEYS_PER_SEQ, kv_cache.DENSE_WASTE) == (350, 1.5)  # the bench put the rule back
    assert "| 5-900, q=2 |" in (tmp_path / "dense_split.md").read_text()
