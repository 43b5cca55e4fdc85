"""Lesson 06: preemption's two decisions, which ContinuousScheduler.preempt applies:
which request gives its KV blocks back (choose_victim), and how (should_swap)."""
from __future__ import annotations

from minicb.costs import PreemptionCost
from minicb.scheduler.request import RequestView


def choose_victim(running: tuple[RequestView, ...]) -> str:
    """The request_id of the victim: the last in serving order (rank)."""
    return max(running, key=lambda r: r.rank).request_id


def should_swap(victim: RequestView, mode: str, cost: PreemptionCost | None) -> bool:
    """Swap (True) or recompute (False), by preemption_mode; "auto" takes the cheaper by cost.
    The scheduler asks only when the swap pool has room for the victim."""
    if mode != "auto":
        return mode == "swap"
    tokens = victim.num_computed_tokens
    return cost.swap_s(tokens) < cost.recompute_s(tokens)
