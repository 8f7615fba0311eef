"""Runs the MTP modules over one draft step: consume the new (token, hidden) pairs, propose drafts.

Bookkeeping (one sequence, target positions q):

* A *pair* is ``(t_{q+1}, h_q)``: the token that follows position q and the target's hidden state at q.
  After a target step the target knows new pairs for q = start .. start+n-1: for a prefill chunk the
  chunk's rows with the tokens that follow them, for a generation block the rows of the accepted
  positions with the accepted tokens (drafts + bonus). The drafter's KV for a slot is rewound to
  ``start`` (writes begin there; anything beyond is stale) and the pairs are written at their q.
* Eagle mode (module 0 applied k times): module 0 runs the pairs; its last output gives d_1; then
  ``(d_i, last output)`` at the next position gives d_{i+1}.
* Vanilla mode (k depths): every depth runs the same real pairs; depth j (0-based) additionally
  runs j draft pairs ``(d_i, out_{i-1})`` at positions start+n-1+i, where out_{i-1} is depth
  i-1's output at its last position; depth j's last output gives d_{j+1}. Depth j runs module
  j mod (modules in the checkpoint) with its own KV cache. A depth runs only in the steps that
  draft that deep: the real pairs it has not seen wait in the slot's pair log and reach its cache
  the next time it drafts (or once more than ``MAX_LAG`` wait), so a step asking one draft costs
  one module, not k.
* "Output" passed to the next depth is the block output, or its final norm for imported checkpoints
  (``MTPHeads.chain_hidden``).

With the reference's example (prompt ABCD, k=3): the context step feeds module 0 tokens BCDE with
H_A..H_D; after drafts FGH with FGX accepted it feeds FGX with H_E, H_F, H_G; after accept-none
(K) it feeds K with H_X at position 7, its KV rewound to 7. The reference re-feeds a fixed
window of k pairs each step instead (GXK with H_F, H_G, H_X); the pairs it repeats are unchanged,
so module 0's cache ends the same. Module j>0 here also keeps the first j real pairs of the
prompt, which the reference's shifted windows drop.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

import torch

from draft_service.mtp_module import MTPHeads, MTPInput
from tandem_core.kv_cache import AttentionBatch, query_group


class MTPMode(enum.Enum):
    VANILLA = "vanilla"
    EAGLE = "eagle"


class DraftProtocolError(ValueError):
    """The target sent a step that contradicts the drafter's state (e.g. a gap in positions)."""


@dataclass(frozen=True)
class DraftBatch:
    """New pairs per sequence, packed in sequence order."""

    slots: list[int]  # [num_seqs]
    starts: list[int]  # [num_seqs] position q of each sequence's first new pair
    num_pairs: list[int]  # [num_seqs] new pairs (>= 1)
    tokens: torch.Tensor  # [num_pairs_total] int64, t_{q+1}
    hidden: torch.Tensor  # [num_pairs_total, hidden_size] target hidden states h_q
    num_drafts: list[int]  # [num_seqs] drafts wanted (0 = only record the pairs)


@dataclass(frozen=True)
class ModuleCall:
    """What one module saw for one sequence (kept for bookkeeping tests)."""

    module: int
    slot: int
    tokens: list[int]  # [q_len]
    positions: list[int]  # [q_len]
    hidden: torch.Tensor  # [q_len, hidden_size] inputs h_q
    kv_len_after: int  # valid KV entries for this module and slot after the call


@dataclass
class Trace:
    calls: list[ModuleCall] = field(default_factory=list)


MAX_LAG = 256  # real pairs a vanilla depth may leave waiting in a slot's log before it catches up
# a call of at most this many rows runs the whole block over every row, not a keys-and-values pass for the
# rows before each sequence's last and then the block over the last ones: the second pass's embedding,
# norms and projections cost more than the few rows' attention and MLP. Shipped Eagle head, bfloat16
# weights, one draft (`docs/bench/whole-block/probe.txt`): one sequence with 2-9 rows took 1.78-2.43 ms
# whole against 2.05-2.64 in two passes, 4 sequences with 2-3 rows 3.49-3.55 against 4.16-4.31; from 24
# rows in a call on, two passes won or tied (8 x 3 rows: 3.74 against 4.33 whole; 1 x 33: 4.51 against 5.14)
WHOLE_BLOCK_ROWS = 12


@dataclass
class PairLog:
    """Real pairs of one slot from position ``base`` on, kept until every vanilla depth has run them."""

    base: int = 0
    tokens: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # [n]
    hidden: torch.Tensor | None = None  # [n, hidden_size]

    def write(self, start: int, tokens: torch.Tensor, hidden: torch.Tensor) -> None:
        """The pairs at ``start`` on replace whatever the log held from there."""
        keep = max(0, start - self.base)
        old_hidden = hidden[:0] if self.hidden is None else self.hidden[:keep]
        self.tokens = torch.cat([self.tokens[:keep], tokens.cpu()])
        self.hidden = torch.cat([old_hidden.to(hidden.device), hidden])
        self.base = min(self.base, start)

    def since(self, position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens [n] and hidden [n, H] of the pairs from ``position`` to the end."""
        return self.tokens[position - self.base :], self.hidden[position - self.base :]

    def drop_before(self, position: int) -> None:
        cut = max(0, position - self.base)
        self.tokens, self.hidden, self.base = self.tokens[cut:], self.hidden[cut:], self.base + cut


class MTPWorker:
    def __init__(self, heads: MTPHeads, mode: MTPMode, k: int, num_slots: int, max_seq_len: int):
        self.heads, self.mode, self.k = heads, mode, k
        self._group = query_group(heads.config)
        depths = k if mode is MTPMode.VANILLA else 1
        self.caches = heads.new_caches(depths, num_slots, max_seq_len)
        self.kv_len = [0] * num_slots  # real pairs received per slot
        self.depth_len = [[0] * num_slots for _ in range(depths)]  # [depth][slot] real pairs in its cache (vanilla)
        self.logs = [PairLog() for _ in range(num_slots)]  # vanilla: pairs some depth has not run yet
        self.max_seq_len = max_seq_len
        self.trace: Trace | None = None

    def reset(self, slot: int) -> None:
        self.kv_len[slot] = 0
        for lens in self.depth_len:
            lens[slot] = 0
        self.logs[slot] = PairLog()

    @torch.inference_mode()
    def step(self, batch: DraftBatch) -> list[list[int]]:
        batch = self._check(batch)
        rows = _split(batch)
        if self.mode is MTPMode.EAGLE:
            drafts = self._eagle(batch, rows)
        else:
            drafts = self._vanilla(batch, rows)
        for slot, start, n in zip(batch.slots, batch.starts, batch.num_pairs):
            self.kv_len[slot] = start + n
        return drafts

    def _check(self, batch: DraftBatch) -> DraftBatch:
        """Validate a peer's step; near the end of a slot, ask for fewer drafts instead of failing."""
        wants = []
        if len(set(batch.slots)) != len(batch.slots):
            raise DraftProtocolError("a slot appears twice in one step")
        spare = 1  # the last draft pair sits at start + n - 1 + (drafts - 1), in either mode
        for slot, start, n, want in zip(batch.slots, batch.starts, batch.num_pairs, batch.num_drafts):
            if not 0 <= slot < len(self.kv_len):
                raise DraftProtocolError(f"slot {slot} outside 0..{len(self.kv_len) - 1}")
            if start < 0:
                raise DraftProtocolError(f"slot {slot}: negative start {start}")
            if start > self.kv_len[slot]:
                raise DraftProtocolError(f"slot {slot}: pairs start at {start} but only {self.kv_len[slot]} are held")
            if n < 1 or start + n > self.max_seq_len:
                raise DraftProtocolError(f"slot {slot}: {n} pairs at {start} do not fit max_seq_len")
            if not 0 <= want <= self.k:
                raise DraftProtocolError(f"slot {slot}: {want} drafts asked, k is {self.k}")
            wants.append(max(0, min(want, self.max_seq_len - (start + n) + spare)))  # draft pairs stay in the slot
        return replace(batch, num_drafts=wants)

    def _eagle(self, batch: DraftBatch, rows) -> list[list[int]]:
        drafts: list[list[int]] = [[] for _ in batch.slots]
        inputs = {i: (rows[i][0], rows[i][1], batch.starts[i]) for i in range(len(batch.slots))}
        seqs = list(inputs)  # depth 0 runs every sequence: its real pairs must reach the cache
        for depth in range(self.k):
            last = self._run(0, batch, seqs, inputs)
            wanting = [(i, h) for i, h in zip(seqs, last) if batch.num_drafts[i] > depth]
            if not wanting:
                break
            tokens = self._argmax(0, torch.stack([h for _, h in wanting]))
            seqs = []
            for (i, h), t in zip(wanting, tokens):
                drafts[i].append(t)
                if batch.num_drafts[i] > depth + 1:  # feed (d, its hidden) at the next position
                    fed = self.heads.chain_hidden(0, h.unsqueeze(0))
                    inputs[i] = (torch.tensor([t]), fed, inputs[i][2] + len(inputs[i][0]))
                    seqs.append(i)
            if not seqs:
                break
        return drafts

    def _vanilla(self, batch: DraftBatch, rows) -> list[list[int]]:
        seqs = range(len(batch.slots))
        for i in seqs:
            self._log(batch.slots[i], batch.starts[i], rows[i])
        drafts: list[list[int]] = [[] for _ in seqs]
        outs: list[list[torch.Tensor]] = [[] for _ in seqs]  # last output of each depth, per sequence
        for j in range(self.k):
            drafting = [i for i in seqs if batch.num_drafts[i] > j]
            lagging = [i for i in seqs if i not in drafting and self._lag(j, batch.slots[i]) > MAX_LAG]
            if not drafting and not lagging:
                continue
            run = drafting + lagging
            inputs = {i: self._depth_input(j, batch.slots[i], drafts[i] if i in drafting else [], outs[i]) for i in run}
            last = self._run(j, batch, run, inputs)
            for i in run:
                self.depth_len[j][batch.slots[i]] = _end(batch, i)
            if not drafting:
                continue
            wanting = last[: len(drafting)]
            tokens = self._argmax(j, wanting)
            chained = self.heads.chain_hidden(self.heads.module_for_depth(j), wanting)
            for i, t, h in zip(drafting, tokens, chained):
                drafts[i].append(t)
                outs[i].append(h)
        for slot in batch.slots:
            self.logs[slot].drop_before(min(lens[slot] for lens in self.depth_len))
        return drafts

    def _log(self, slot: int, start: int, pairs: tuple[torch.Tensor, torch.Tensor]) -> None:
        """New real pairs join the slot's log; a depth that had run past ``start`` is rewound to it."""
        for lens in self.depth_len:
            lens[slot] = min(lens[slot], start)
        self.logs[slot].write(start, pairs[0], pairs[1].to(self.heads.device))

    def _lag(self, depth: int, slot: int) -> int:
        log = self.logs[slot]
        return log.base + len(log.tokens) - self.depth_len[depth][slot]

    def _depth_input(self, depth: int, slot: int, drafts: list[int], outs: list[torch.Tensor]):
        """(tokens, hidden, start) for one depth: the real pairs it has not run, then its draft pairs."""
        start = self.depth_len[depth][slot]
        tokens, hidden = self.logs[slot].since(start)
        tokens = torch.cat([tokens, torch.tensor(drafts, dtype=torch.long)])
        hidden = torch.cat([hidden, *[o.unsqueeze(0).to(hidden.dtype) for o in outs[: len(drafts)]]])
        return tokens, hidden, start

    def _run(self, depth: int, batch: DraftBatch, seqs: list[int], inputs) -> torch.Tensor:
        """Run one depth over the given sequences; return each one's last output row [len(seqs), H].

        Only the last row's output of each sequence is read; the rows before it only have to reach the
        depth's KV cache, so where the block can, they store their keys and values alone (a long
        prompt caught up at once then costs a few GEMMs, not a whole layer)."""
        device = self.heads.device
        module = self.heads.layers[self.heads.module_for_depth(depth)]
        tokens = torch.cat([inputs[i][0].to(device) for i in seqs])
        hidden = torch.cat([inputs[i][1].to(device) for i in seqs]).to(self.heads.eh_dtype)
        slots = [batch.slots[i] for i in seqs]
        starts = [inputs[i][2] for i in seqs]
        q_lens = [len(inputs[i][0]) for i in seqs]
        if self.trace is not None:
            self._record(depth, slots, starts, q_lens, tokens, hidden)
        cache = self.caches[depth]
        if module.fills_cache_alone and max(q_lens) > 1 and len(tokens) > WHOLE_BLOCK_ROWS:
            tokens, hidden, starts = self._fill_before_last(module, cache, tokens, hidden, slots, starts, q_lens)
            q_lens = [1] * len(seqs)
        attn = AttentionBatch.build(slots, starts, q_lens, device, self._group, self.heads.eh_dtype)
        out = module(MTPInput(tokens, hidden, attn), self.heads.embed, self.heads.rotary, cache)
        return out[torch.tensor(q_lens, device=device).cumsum(0) - 1]

    def _fill_before_last(self, module, cache, tokens, hidden, slots, starts, q_lens):
        """Store keys and values of every row but each sequence's last; return the last rows and their positions."""
        device = tokens.device
        ends = (torch.tensor(q_lens).cumsum(0) - 1).tolist()
        pick = [j for j, q in enumerate(q_lens) if q > 1]
        rows = torch.cat([torch.arange(ends[j] - q_lens[j] + 1, ends[j]) for j in pick]).to(device)
        fill = AttentionBatch.build(
            [slots[j] for j in pick], [starts[j] for j in pick], [q_lens[j] - 1 for j in pick], device
        )
        module.fill_cache(MTPInput(tokens[rows], hidden[rows], fill), self.heads.embed, self.heads.rotary, cache)
        last = torch.tensor(ends, device=device)
        return tokens[last], hidden[last], [s + q - 1 for s, q in zip(starts, q_lens)]

    def _argmax(self, depth: int, last: torch.Tensor) -> list[int]:
        return self.heads.greedy(self.heads.module_for_depth(depth), last)

    def _record(self, module, slots, starts, q_lens, tokens, hidden) -> None:
        offset = 0
        for slot, start, q in zip(slots, starts, q_lens):
            self.trace.calls.append(
                ModuleCall(
                    module,
                    slot,
                    tokens[offset : offset + q].tolist(),
                    list(range(start, start + q)),
                    hidden[offset : offset + q].clone(),
                    start + q,
                )
            )
            offset += q


class EmptyMTPWorker(MTPWorker):
    """An MTP with no layers, for measuring transport and protocol cost alone: it validates the step,
    touches every staged row, and proposes token 0 as each draft."""

    def step(self, batch: DraftBatch) -> list[list[int]]:
        batch = self._check(batch)
        float(batch.hidden.sum())  # the rows must really be read
        for slot, start, n in zip(batch.slots, batch.starts, batch.num_pairs):
            self.kv_len[slot] = start + n
        return [[0] * want for want in batch.num_drafts]


def _end(batch: DraftBatch, i: int) -> int:
    """Real pairs sequence ``i``'s slot holds after the step."""
    return batch.starts[i] + batch.num_pairs[i]


def _split(batch: DraftBatch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per sequence: (tokens [n], hidden [n, H]) views of the packed batch."""
    out, offset = [], 0
    for n in batch.num_pairs:
        out.append((batch.tokens[offset : offset + n], batch.hidden[offset : offset + n]))
        offset += n
    return out
