"""Telling a bug from a near-tie when two greedy runs of the same prompts disagree.

Batched and solo logits differ in their last bits, so below a top-2 gap of NEAR_TIE_BOUND[dtype] greedy may
pick either: fp32 logits differ by about 1e-6 of their size, bf16 ones by 0.0625 at a logit of 10.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from minicb.runner.batch import SequenceChunk
from minicb.runner.batch_builder import build_flat_batch

NEAR_TIE_BOUND = {torch.float32: 1e-4, torch.float16: 5e-2, torch.bfloat16: 0.25}


def _gaps(runner, token_ids: list[int], every_row: bool) -> list[float]:
    blocks = list(range(-(-len(token_ids) // runner.block_size)))
    batch = build_flat_batch([SequenceChunk(token_ids, 0, blocks)], runner.block_size, runner.device)
    if every_row:
        batch.logits_indices = torch.arange(len(token_ids), device=runner.device)   # not only the last row's
    return gaps_of(runner.logits(batch)).tolist()


def gaps_of(logits: torch.Tensor) -> torch.Tensor:
    """The gap between the two best logits of each row, in fp32 (as a bf16 model's logits are read)."""
    top = logits.float().topk(2, dim=-1).values   # (rows, 2)
    return top[..., 0] - top[..., 1]


def top2_gaps(runner, token_ids: list[int]) -> list[float]:
    """Entry i: the top-2 logit gap after token_ids[:i + 1], from one solo prefill on `runner`, in fp32."""
    return _gaps(runner, token_ids, every_row=True)


def top2_gap(runner, token_ids: list[int]) -> float:
    """top2_gaps' last entry, from the last row's logits alone."""
    return _gaps(runner, token_ids, every_row=False)[0]


@dataclass
class GreedyComparison:
    """`same` runs match their reference token for token. The others first differ at a step, as
    (run, step, the reference's top-2 gap there): in near_ties if the gap is below `bound`, else in bugs."""
    runs: int
    bound: float
    same: int = 0
    near_ties: list[tuple[int, int, float]] = field(default_factory=list)
    bugs: list[tuple[int, int, float]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.bugs

    def __str__(self) -> str:
        text = f"{self.same} of {self.runs} the same, token for token"
        if self.near_ties:
            text += f"; {len(self.near_ties)} part at a near-tie (top-2 gap below {self.bound:g})"
        if self.bugs:
            run, step, gap = self.bugs[0]
            text += (f"; {len(self.bugs)} part elsewhere, a bug (run {run} at token {step}, "
                     f"top-2 gap {gap:.3g})")
        return text


def compare_greedy_runs(runner, prompt_ids: list[list[int]], got: list[list[int]], want: list[list[int]],
                        bound: float | None = None, gap_at: Callable[[int, int], float] | None = None
                        ) -> GreedyComparison:
    """Where `got` first differs from `want`, a reference top-2 gap below `bound` (default: NEAR_TIE_BOUND
    of the runner's dtype) is a near-tie, else a bug. gap_at(run, step) gives the gap (default: the prompt
    and want's tokens so far, prefilled alone on `runner`). A length mismatch is a bug at the shorter end."""
    if gap_at is None:
        gap_at = lambda run, step: top2_gap(runner, prompt_ids[run] + want[run][:step])  # noqa: E731
    result = GreedyComparison(len(want), NEAR_TIE_BOUND[runner.dtype] if bound is None else bound)
    for run, (_, g, w) in enumerate(zip(prompt_ids, got, want, strict=True)):
        if g == w:
            result.same += 1
            continue
        step = next((i for i, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
        gap = gap_at(run, step) if step < min(len(g), len(w)) else float("inf")
        (result.near_ties if gap < result.bound else result.bugs).append((run, step, gap))
    return result
