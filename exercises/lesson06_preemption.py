"""Lesson 06: preemption. When a running sequence needs a KV block and none is free, one running
sequence gives its blocks back: recompute drops them (prefill again later), swap copies them to
CPU memory (and back later).

Task 1  choose_victim   pytest tests/exercises -k lesson06_task1
Task 2  should_swap     pytest tests/exercises -k lesson06_task2

The engine calls both from minicb/scheduler/continuous.py (minicb's own are in
minicb/scheduler/policy.py); `course.llm()` plugs yours in.
"""
from __future__ import annotations

from minicb.request import Request
from minicb.scheduler.policy import PreemptionCost


def choose_victim(running: list[Request]) -> Request:
    """The running request that gives way: the least urgent one, which is the largest
    `request.priority`; among equals the latest `request.metrics.arrival_time`; among equals the
    largest `request.arrival_index`. The oldest request is then never evicted by a younger one of
    equal priority, so it always makes progress."""
    raise NotImplementedError("Lesson 06, task 1: choose_victim: the running request that gives way. "
                              "Check it with: pytest tests/exercises -k lesson06_task1")


def should_swap(cost: PreemptionCost, num_tokens: int) -> bool:
    """The "auto" mode's choice for a victim with num_tokens tokens of context: True to swap, when
    swapping is cheaper than recomputing. From the fitted coefficients:
    recompute = recompute_fixed + recompute_per_token * t + recompute_per_token_sq * t^2,
    swap = swap_fixed + swap_per_token * t (seconds)."""
    raise NotImplementedError("Lesson 06, task 2: should_swap: recompute or swap this victim. "
                              "Check it with: pytest tests/exercises -k lesson06_task2")
