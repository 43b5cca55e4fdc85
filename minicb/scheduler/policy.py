"""Preemption policy: which running sequence gives way, and how it gives its memory back.

The victim is the least urgent running sequence: the largest priority value, and the latest
arrival among equals (under FCFS every priority is 0, so simply the latest arrival).

How it gives memory back (EngineConfig.preemption_mode):
- "recompute": drop its KV blocks; later it prefills its prompt and generated tokens again. Costs compute.
- "swap": copy its blocks to the CPU swap pool and back later. Costs twice its KV bytes over the copy link.
- "auto": whichever PreemptionCost says is cheaper for this victim. Prefill is fast per token, so
  short sequences recompute; a swap costs the same per byte at any length, so long ones swap.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from minicb.request import Request

PREEMPTION_MODES = ("recompute", "swap", "auto")


def rank(req: Request) -> tuple[int, float, int]:
    """Who is served first: lower priority value, then earlier arrival (arrival_index breaks ties,
    which the simulated clock makes common). The reverse order picks victims, so the oldest request
    is never evicted by a younger one of equal priority, and always makes progress."""
    return req.priority, req.metrics.arrival_time, req.arrival_index


def victim(running: list[Request]) -> Request:
    """The running request that gives way: the last in serving order (see rank)."""
    return max(running, key=rank)


@dataclass(frozen=True)
class PreemptionCost:
    """Seconds to bring back a victim with `tokens` of context, either way.

    recompute: a + b*t + c*t^2 (a prefill step: fixed cost, per-token layers, attention's square)
    swap:      d + e*t         (two copies of t tokens' KV, out and back, each with a fixed latency)
    """
    recompute_fixed: float
    recompute_per_token: float
    recompute_per_token_sq: float
    swap_fixed: float
    swap_per_token: float

    def recompute_s(self, tokens: int) -> float:
        return self.recompute_fixed + self.recompute_per_token * tokens + self.recompute_per_token_sq * tokens ** 2

    def swap_s(self, tokens: int) -> float:
        return self.swap_fixed + self.swap_per_token * tokens

    def crossover_tokens(self) -> float:
        """The shortest context for which swapping is cheaper: 0 if always, inf if never. Recompute
        grows faster than swap (the square term), so past one crossing swap stays cheaper."""
        lo, hi = 0, 1 << 20
        if should_swap(self, lo):
            return 0.0
        if not should_swap(self, hi):
            return float("inf")
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if should_swap(self, mid) else (mid, hi)
        return float(hi)


def should_swap(cost: PreemptionCost, num_tokens: int) -> bool:
    """The "auto" mode's choice for a victim with num_tokens of context: swap when moving its KV out
    and back is cheaper than prefilling it again."""
    return cost.swap_s(num_tokens) < cost.recompute_s(num_tokens)


def measure_preemption_cost(runner, longest: int = 512) -> PreemptionCost:
    """Time prefills at three lengths (up to `longest`, within the KV pool) and block copies of two
    sizes on the runner's device, and fit PreemptionCost by least squares. Lesson 06 uses it to find
    the crossover. The runner needs a swap pool (num_swap_blocks > 0)."""
    from minicb.batch import FlatBatch, SequenceChunk

    bs = runner.block_size
    longest = min(longest, runner.num_blocks * bs, runner.config.max_model_len - 1)
    lengths = sorted({max(1, longest // 32), max(2, longest // 4), longest})
    prefill = []
    for n in lengths:
        batch = FlatBatch.build([SequenceChunk([1] * n, 0, list(range(-(-n // bs))))], bs, runner.device)
        prefill.append((n, _timed(lambda: runner.execute(batch), runner.device)))
    x = torch.tensor([[1.0, n, n * n] for n, _ in prefill], dtype=torch.float64)
    y = torch.tensor([[t] for _, t in prefill], dtype=torch.float64)
    a, b, c = torch.linalg.lstsq(x, y).solution[:, 0].clamp(min=0).tolist()
    copies = []
    for num in (1, min(64, runner.num_blocks, runner.num_swap_blocks)):
        pairs = [(i, i) for i in range(num)]
        copies.append((num * bs, _timed(lambda: runner.swap_out(pairs), runner.device)))
    (t1, s1), (t2, s2) = copies
    per_token = max(0.0, (s2 - s1) / (t2 - t1)) if t2 > t1 else s1 / t1
    fixed = max(0.0, s1 - per_token * t1)
    return PreemptionCost(a, b, c, 2 * fixed, 2 * per_token)


def _timed(fn, device: torch.device, repeats: int = 3) -> float:
    fn()   # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats
