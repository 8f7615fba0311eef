"""Which (token, hidden-row) pairs of a target step the drafter needs: a pure function of StepOutput.

A pair ``(t_{q+1}, h_q)`` is complete once the token after position q is known:
* prefill chunk at positions s..e-1: every row, with tokens chunk[1:] + [prompt[e] or the sampled token];
* generation block with n tokens accepted (drafts + bonus): its first n rows, with those n tokens.
Rows of rejected drafts are never sent; finished sequences send nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from target_service.step_output import StepOutput


@dataclass(frozen=True)
class SequencePairs:
    index: int  # sequence index in the StepOutput
    start: int  # position q of the first pair
    rows: range  # packed rows of the step's hidden states
    tokens: list[int]  # [len(rows)] t_{q+1} of each pair
    num_drafts: int  # drafts wanted next step


def draft_pairs(step: StepOutput) -> list[SequencePairs]:
    out = []
    offset = 0
    accepted = step.accepted_tokens.tolist()  # one conversion each per step: element reads cost ~1-2 us each
    positions = step.positions.tolist()
    for i, q_len in enumerate(step.q_lens):
        first = offset
        offset += q_len
        if step.finished[i]:
            continue
        start = positions[first]
        if step.is_context[i]:
            after = step.next_prompt_token[i]
            if after < 0:
                after = accepted[i][0]
            tokens = step.input_ids[first + 1 : first + q_len].tolist() + [after]
            rows = range(first, first + q_len)
        else:
            n = step.num_accepted[i]
            tokens = accepted[i][:n]
            rows = range(first, first + n)
        out.append(SequencePairs(i, start, rows, tokens, step.num_draft_tokens[i]))
    return out


def gather_rows(step: StepOutput, pairs: list[SequencePairs]) -> torch.Tensor:  # [num_pairs_total, hidden]
    index = torch.tensor([r for p in pairs for r in p.rows], dtype=torch.long, device=step.hidden_states.device)
    return step.hidden_states.index_select(0, index)
