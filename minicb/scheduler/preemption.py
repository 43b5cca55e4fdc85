"""Lesson 06: preemption. When a running request needs a KV block and none is free, a running request
gives its blocks back. These are minicb's two decisions; ContinuousScheduler.preempt applies them.

Which one (choose_victim): the last in serving order (minicb.scheduler.request.rank), the largest priority
value, then the latest arrival. Under FCFS every priority is 0, so simply the latest arrival; the oldest
request is never evicted by a younger one and always makes progress.
vLLM's V1 scheduler picks its victim the same way.

How it gives memory back (should_swap, by EngineConfig.preemption_mode):
- "recompute": drop its KV blocks; later it prefills its prompt and generated tokens again. Costs compute.
- "swap": copy its blocks to the CPU swap pool and back later. Costs twice its KV bytes over the copy link.
- "auto": whichever PreemptionCost says is cheaper for this victim. Prefill is fast per token, so
  short sequences recompute; a swap costs the same per byte at any length, so long ones swap.
The scheduler asks only when the swap pool has room for the victim; without it the victim is recomputed.
"""
from __future__ import annotations

from minicb.costs import PreemptionCost
from minicb.scheduler.request import RequestView


def choose_victim(running: tuple[RequestView, ...]) -> str:
    """The request_id of the running request that gives its KV blocks back."""
    return max(running, key=lambda r: r.rank).request_id


def should_swap(victim: RequestView, mode: str, cost: PreemptionCost | None) -> bool:
    """Swap (True) or recompute (False) this victim, as preemption_mode says; "auto" swaps when moving its
    computed tokens' KV out and back is cheaper than prefilling them again."""
    if mode != "auto":
        return mode == "swap"
    tokens = victim.num_computed_tokens
    return cost.swap_s(tokens) < cost.recompute_s(tokens)
