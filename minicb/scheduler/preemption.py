"""Lesson 06: preemption. When a running request needs a KV block and none is free, the least
urgent running request gives its blocks back.

The victim is the last in serving order (minicb.request.rank): the largest priority value, then the latest
arrival. Under FCFS every priority is 0, so simply the latest arrival; the oldest request is never
evicted by a younger one and always makes progress.

How it gives memory back (EngineConfig.preemption_mode):
- "recompute": drop its KV blocks; later it prefills its prompt and generated tokens again. Costs compute.
- "swap": copy its blocks to the CPU swap pool and back later. Costs twice its KV bytes over the copy link.
- "auto": whichever PreemptionCost says is cheaper for this victim. Prefill is fast per token, so
  short sequences recompute; a swap costs the same per byte at any length, so long ones swap.
A swap needs room in the swap pool; without it the victim is recomputed.
"""
from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from minicb.request import Request, RequestStatus, rank
from minicb.scheduler.output import BlockCopy

if TYPE_CHECKING:
    from minicb.scheduler.continuous import ContinuousScheduler, Step


def make_room(sched: ContinuousScheduler, step: Step) -> Request:
    """Preempt the least urgent running request and return it."""
    victim = max(sched.running, key=rank)
    sched.running.remove(victim)
    step.out.preempted.append(victim)
    for chunk in [c for c in step.out.chunks if c.request is victim]:   # its tokens go back to the step
        step.out.chunks.remove(chunk)
        step.token_budget += chunk.num_new_tokens
    sched.kv.truncate(victim.request_id, victim.num_computed_tokens)    # the slots it took this step
    if sched.should_swap(victim):
        step.out.block_copies.append(BlockCopy(to_cpu=True, pairs=sched.kv.swap_out(victim.request_id)))
        step.out.swapped_out.append(victim)
        victim.status = RequestStatus.SWAPPED
        bisect.insort(sched.swapped, victim, key=rank)
        return victim
    sched.kv.free(victim.request_id)
    victim.num_computed_tokens = 0   # prompt and output so far are prefilled again
    victim.status = RequestStatus.PREEMPTED
    if sched.config.scheduling_policy == "priority":
        bisect.insort(sched.waiting, victim, key=rank)
    else:
        sched.waiting.appendleft(victim)   # it arrived before everyone waiting
    return victim


def should_swap(sched: ContinuousScheduler, victim: Request) -> bool:
    """Swap (True) or recompute (False) this victim, as preemption_mode says; "auto" swaps when
    moving its computed tokens' KV out and back is cheaper than prefilling them again."""
    mode = sched.config.preemption_mode
    if mode == "recompute" or not sched.kv.can_swap_out(victim.request_id):
        return False
    if mode == "swap":
        return True
    cost, tokens = sched.preemption_cost, victim.num_computed_tokens
    return cost.swap_s(tokens) < cost.recompute_s(tokens)
