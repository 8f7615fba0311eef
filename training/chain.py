"""The serving draft chain, unrolled over a whole sequence at once for training.

At serving time a module's KV cache holds the sequence's *real* pairs ``(t_{q+1}, h_q)`` up to the
last accepted position p, followed by the step's *draft* pairs: depth d (1-based) is the pair
``(d_d, out_{d-1})`` at position p+d, where ``out_{d-1}`` is the output that proposed d_d (see
mtp_worker.py). Training runs this for every p of a sequence in parallel:

* the real pass runs all T pairs with a causal mask (row p = the output a step at p would use);
* draft pass d feeds, in row p, the teacher token ``t_{p+d+1}`` with ``out_{d-1}[p]`` at position p+d.
  Row p's query sees the real keys 0..p and the draft keys of its own row up to depth d, exactly the
  keys the serving cache holds at that moment.

Depth i's output in row p predicts ``a_{p+i+1}``, the target's greedy token after position p+i+1.
Teacher tokens stand for drafts, so depth i only counts where the i tokens it was fed are the ones
the target would have chosen (always true inside the target's own answers).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from draft_service.mtp_module import MTPHeads


@dataclass
class ChainAttention:
    """Attention for one module over one sequence: the real pass first, then draft passes."""

    first_row: int = 0  # draft passes run rows first_row..T-1 only (their queries see every real key <= p)
    real: tuple[torch.Tensor, torch.Tensor] | None = None  # keys, values [1, kv_heads, T, head_dim]
    drafts: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # per depth, row-aligned
    drafting: bool = False  # set once the real pass (possibly in two parts) is done

    def __call__(self, module, query, key, value, scaling) -> torch.Tensor:  # -> [1, T, heads, head_dim]
        group = query.shape[1] // key.shape[1]
        if not self.drafting:
            return self._real(query, key, value, scaling, group)
        self.drafts.append((key, value))
        k0, v0 = (t.repeat_interleave(group, dim=1) for t in self.real)
        t = k0.shape[2]  # real keys; the draft pass has T - first_row query rows
        real_scores = (query @ k0.transpose(-1, -2)) * scaling  # [1, heads, T - first_row, T]
        causal = torch.ones(t, t, dtype=torch.bool, device=query.device).tril()[self.first_row :]
        real_scores = real_scores.masked_fill(~causal, float("-inf"))
        own = [(query * k.repeat_interleave(group, dim=1)).sum(-1, keepdim=True) * scaling for k, _ in self.drafts]
        probs = torch.softmax(torch.cat([real_scores, *own], dim=-1), dim=-1)  # [1, heads, T, T + depth]
        out = probs[..., :t] @ v0
        for d, (_, v) in enumerate(self.drafts):
            out = out + probs[..., t + d : t + d + 1] * v.repeat_interleave(group, dim=1)
        return out.transpose(1, 2)

    def _real(self, query, key, value, scaling, group: int) -> torch.Tensor:
        """Causal attention of real rows; a second part's rows also see every row of the first part."""
        if self.real is None:
            self.real = (key, value)
            out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling, enable_gqa=group > 1)
            return out.transpose(1, 2)
        before, n = self.real[0].shape[2], query.shape[2]
        key, value = torch.cat([self.real[0], key], dim=2), torch.cat([self.real[1], value], dim=2)
        self.real = (key, value)
        mask = torch.ones(n, before + n, dtype=torch.bool, device=query.device).tril(diagonal=before)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling, enable_gqa=group > 1)
        return out.transpose(1, 2)


CHAIN_ATTENTION = "tandem_chain"


def _chain_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-interface signature; the work is done by the call's ChainAttention."""
    return kwargs["tandem_chain"](module, query, key, value, scaling), None


@contextmanager
def chain_attention(heads: MTPHeads):
    """Run the heads' decoder blocks on the chain attention (not the serving cache) inside the block."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(CHAIN_ATTENTION, _chain_attention)
    AttentionMaskInterface.register(CHAIN_ATTENTION, lambda *args, **kwargs: None)
    serving = heads.config._attn_implementation
    heads.config._attn_implementation = CHAIN_ATTENTION
    try:
        yield
    finally:
        heads.config._attn_implementation = serving


def depth_modules(mode: str, depths: int) -> list[int]:
    """Which module serves each depth: Eagle reuses module 0, vanilla uses module i at depth i."""
    return [0] * depths if mode == "eagle" else list(range(depths))


def shifted(tokens: torch.Tensor, d: int) -> torch.Tensor:  # [T] -> [T], row p = tokens[p + d] (edge-padded)
    return torch.cat([tokens[d:], tokens[-1:].expand(d)]) if d else tokens


def chain_outputs(
    heads: MTPHeads,
    mode: str,
    depths: int,
    tokens: torch.Tensor,
    hidden: torch.Tensor,
    first_row: int = 0,
    frozen_prefix: bool = False,
):
    """Outputs of every depth for rows first_row..T-1: list over depth of [T - first_row, hidden_size].

    The real pass always runs all T rows (they are the keys every row attends to); the draft passes,
    and so the outputs, only the rows from ``first_row`` (e.g. the answer, where drafting happens).
    ``frozen_prefix`` runs the real rows before ``first_row`` without gradients: their keys and values
    are context only, and a long prompt then costs one forward instead of forward and backward.
    """
    owner = depth_modules(mode, depths)
    positions = torch.arange(len(tokens), device=tokens.device)
    rows = slice(first_row, None)
    outs: list[torch.Tensor | None] = [None] * depths
    with chain_attention(heads):
        for m in sorted(set(owner)):
            layer, ctx = heads.layers[m], ChainAttention(first_row)
            last_depth = max(i for i, o in enumerate(owner) if o == m)
            h = _real_pass(layer, heads, tokens, hidden, positions, ctx, first_row if frozen_prefix else 0)
            ctx.drafting = True
            if owner[0] == m:
                outs[0] = h
            for d in range(1, last_depth + 1):
                tok, pos = shifted(tokens, d)[rows], (positions + d)[rows]
                h = layer.run_pairs(tok, outs[d - 1], pos, heads.embed, heads.rotary, tandem_chain=ctx)
                if owner[d] == m:
                    outs[d] = h
    return outs


def _real_pass(layer, heads: MTPHeads, tokens, hidden, positions, ctx: ChainAttention, frozen: int) -> torch.Tensor:
    """Real-pair outputs of rows ctx.first_row..T-1; rows before ``frozen`` run without gradients."""

    def run(rows: slice) -> torch.Tensor:
        return layer.run_pairs(tokens[rows], hidden[rows], positions[rows], heads.embed, heads.rotary, tandem_chain=ctx)

    if frozen <= 0:
        return run(slice(None))[ctx.first_row :]
    with torch.no_grad():
        run(slice(0, frozen))
    return run(slice(frozen, None))[ctx.first_row - frozen :]


def depth_targets(tokens: torch.Tensor, greedy: torch.Tensor, depths: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per depth i: (rows [n] int64 with a valid target, labels [n] int64 = a_{p+i+1})."""
    t = len(tokens)
    match = tokens == greedy  # the fed token is the one the target would choose
    out = []
    ok = torch.ones(t, dtype=torch.bool, device=tokens.device)
    for i in range(depths):
        if i:
            ok = ok & shifted(match, i)
            ok[t - i :] = False
        rows = torch.nonzero(ok[: max(t - i - 1, 0)]).flatten()
        out.append((rows, greedy[rows + i + 1]))
    return out
