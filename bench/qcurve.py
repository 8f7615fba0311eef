"""`tandem-qcurve`: the cost of one target forward against the number of new tokens, per kernel setting.

For every context length, number of sequences and new tokens per sequence ``q``, one
``ModelRunner.forward`` is timed for each kernel setting in turn (interleaved, so machine noise hits
every setting alike; one model copy per setting, same weights). Logits are computed for every new
token, as a verification step needs them. Beside the times: the memory floor of the step, the bytes
it must read (weights once, plus each sequence's keys and values) over a bandwidth measured in the
same run, and each time's ratio to it.

Writes ``qcurve.json`` and ``qcurve.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import torch


@dataclass(frozen=True)
class Cell:
    context: int  # tokens cached per sequence before the step
    seqs: int  # sequences in the step
    q: int  # new tokens per sequence


def measure_bandwidth(mib: int = 512, repeats: int = 7) -> float:
    """Read bandwidth in bytes/s: the median time to sum a ``mib`` MiB float32 tensor."""
    x = torch.ones(mib * 1024 * 1024 // 4)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        float(x.sum())
        times.append(time.perf_counter() - t0)
    return x.numel() * 4 / statistics.median(times)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the weights a step streams: every matmul weight once (the embedding reads a few rows)."""
    embed = model.get_input_embeddings().weight
    total = sum(p.numel() * p.element_size() for p in model.parameters() if p is not embed)
    tied = model.get_output_embeddings().weight is embed
    return total + (embed.numel() * embed.element_size() if tied else 0)


def kv_bytes(runner, cell: Cell) -> int:
    """Bytes of keys and values the step reads: every layer, every sequence's cached prefix."""
    shape = runner.cache.shape
    element = runner.cache.keys[0].element_size()
    per_token = shape.num_kv_heads * (shape.key_dim + shape.value_dim) * element
    return shape.num_layers * cell.seqs * (cell.context + cell.q) * per_token


def forward_batch(cell: Cell, vocab: int):
    from target_service.model_runner import ForwardBatch

    tokens = cell.seqs * cell.q
    return ForwardBatch(
        input_ids=torch.randint(0, vocab, (tokens,)),
        slots=list(range(cell.seqs)),
        starts=[cell.context] * cell.seqs,
        q_lens=[cell.q] * cell.seqs,
        logit_rows=torch.arange(tokens),
    )


UNPADDED = "onednn-unpadded"  # onednn without padding steps of 1-3 rows (kernels.MIN_ROWS), for comparison


def load_runners(kernels: list[str], slots: int, max_seq_len: int, model: str) -> dict:
    from tandem_core.model_loader import load_model
    from target_service.model_runner import ModelRunner

    runners = {}
    for name in kernels:
        setting = "onednn" if name == UNPADDED else name
        runner = ModelRunner(load_model(model, "float32").model, slots, max_seq_len, setting)
        if runner.kernels != setting:
            raise SystemExit(f"--kernels {name} does not run here (got {runner.kernels})")
        if name == UNPADDED:
            without_padding(runner.model)
        runners[name] = runner
    return runners


def without_padding(model: torch.nn.Module) -> int:
    """Let every prepacked linear of ``model`` run on as few rows as it is given; the count changed."""
    from tandem_core.kernels import PackedLinear

    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    for m in packed:
        m.min_rows = 1
    return len(packed)


def run(args) -> dict:
    torch.manual_seed(0)
    kernels = args.kernels.split(",")
    cells = [Cell(c, b, q) for c in _ints(args.contexts) for b in _ints(args.batches) for q in _ints(args.q)]
    max_seq_len = max(c.context + c.q for c in cells) + 1
    runners = load_runners(kernels, max(c.seqs for c in cells), max_seq_len, args.model)
    results = measure(runners, cells, args.repeats, args.warmup)
    results.update(model=args.model, command="tandem-qcurve " + " ".join(args.argv))
    return results


def measure(runners: dict, cells: list[Cell], repeats: int, warmup: int = 1) -> dict:
    """Time every cell on every runner, interleaved; the first runner's model gives the byte counts."""
    first = next(iter(runners.values()))
    bandwidth = measure_bandwidth()
    weights = weight_bytes(first.model)
    print(f"read bandwidth {bandwidth / 1e9:.1f} GB/s, weights {weights / 1e6:.0f} MB", flush=True)
    rows = []
    for i, cell in enumerate(cells):
        times: dict[str, list[float]] = {k: [] for k in runners}
        for rep in range(warmup + repeats):
            for name, runner in runners.items():
                batch = forward_batch(cell, first.vocab_size)
                t0 = time.perf_counter()
                runner.forward(batch)
                if rep >= warmup:
                    times[name].append(time.perf_counter() - t0)
        floor = (weights + kv_bytes(first, cell)) / bandwidth
        row = {"context": cell.context, "seqs": cell.seqs, "q": cell.q, "floor_ms": floor * 1e3}
        row.update({f"{k}_ms": statistics.median(v) * 1e3 for k, v in times.items()})
        rows.append(row)
        shown = "  ".join(f"{k} {row[f'{k}_ms']:7.1f} ms" for k in runners)
        print(f"[{i + 1}/{len(cells)}] ctx {cell.context:5d} seqs {cell.seqs} q {cell.q}: {shown}", flush=True)
    return {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
        "kernels": list(runners),
        "repeats": repeats,
        "bandwidth_gb_s": bandwidth / 1e9,
        "weight_mb": weights / 1e6,
        "rows": rows,
    }


def markdown(results: dict) -> str:
    kernels = results["kernels"]
    qs = sorted({r["q"] for r in results["rows"]})
    lines = [
        "# Target forward cost against new tokens per sequence",
        "",
        f"{results['model']} in float32 on {results['machine']}, median of {results['repeats']} interleaved runs. "
        f"Memory floor: {results['weight_mb']:.0f} MB of weights plus the keys and values read, over the "
        f"{results['bandwidth_gb_s']:.1f} GB/s measured in the same run. Generated by `{results['command']}` "
        f"on {results['date']}.",
        "",
        "Each cell: time of one forward at q=1 in ms, then the cost of q new tokens as a multiple of q=1 for "
        f"the same setting; last columns: q=1 against `{kernels[0]}`, and q=1 over the memory floor.",
    ]
    groups: dict[tuple[int, int], dict[int, dict]] = {}
    for r in results["rows"]:
        groups.setdefault((r["context"], r["seqs"]), {})[r["q"]] = r
    head = ["context", "seqs", "kernels"] + [f"q={q}" for q in qs] + [f"q=1 vs {kernels[0]}", "q=1 / floor"]
    lines += ["", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for (context, seqs), by_q in groups.items():
        one = by_q[qs[0]]
        for k in kernels:
            cells = [f"{one[f'{k}_ms']:.1f} ms"] + [f"{by_q[q][f'{k}_ms'] / one[f'{k}_ms']:.2f}x" for q in qs[1:]]
            versus = one[f"{k}_ms"] / one[f"{kernels[0]}_ms"]
            lines.append(
                f"| {context} | {seqs} | {k} | " + " | ".join(cells) + f" | {versus:.2f}x | "
                f"{one[f'{k}_ms'] / one['floor_ms']:.2f}x |"
            )
    return "\n".join(lines) + "\n"


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> None:
    import sys

    from bench.report import save

    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="tandem-qcurve", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument(
        "--kernels",
        default="eager,onednn",
        help=f"settings side by side, the first is the base ({UNPADDED}: onednn without padding 1-3 rows)",
    )
    parser.add_argument("--contexts", default="128,512,1536")
    parser.add_argument("--batches", default="1,4,8", help="sequences per step")
    parser.add_argument("--q", default="1,2,3,4,5,8", help="new tokens per sequence")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = parser.parse_args(argv)
    args.argv = argv
    results = run(args)
    text = markdown(results)
    save(args.out, "qcurve", results, text)
    print(text)


if __name__ == "__main__":
    main()
