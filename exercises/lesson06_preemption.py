"""Lesson 06: preemption. When a running request needs a KV block and none is free, the least
urgent running request gives its blocks back: recompute drops them (it prefills again later), swap
copies them to CPU memory (and back later).

Task 1  make_room     pytest tests/exercises -k lesson06_task1
Task 2  should_swap   pytest tests/exercises -k lesson06_task2

The scheduler calls make_room from schedule_running (lesson 02) whenever the pool is full, and
make_room calls sched.should_swap(victim), which runs your should_swap. minicb's own are in
minicb/scheduler/preemption.py; `course.llm(lesson=6)` plugs yours in.
"""
from __future__ import annotations

from minicb.request import Request, RequestStatus  # noqa: F401  (RequestStatus: the states you set)
from minicb.scheduler.continuous import ContinuousScheduler, Step
from minicb.scheduler.output import BlockCopy  # noqa: F401  (BlockCopy: the swap-out you hand the engine)


def make_room(sched: ContinuousScheduler, step: Step) -> Request:
    """Preempt the least urgent running request to free its KV blocks, and return it.

    Rules (each is checked by a test):
    1. The victim is the least urgent request in sched.running: the largest `priority`; among equals
       the latest `metrics.arrival_time`; among equals the largest `arrival_index`. The oldest
       request is then never evicted by a younger one of equal priority, so it always progresses.
    2. It leaves sched.running and is appended to step.out.preempted.
    3. If it already has a chunk in step.out.chunks, the chunk goes and its num_new_tokens go back
       to step.token_budget; sched.kv.truncate(victim.request_id, victim.num_computed_tokens) gives
       back the slots that chunk took.
    4. Swap when sched.should_swap(victim) says so: pairs = sched.kv.swap_out(victim.request_id);
       append BlockCopy(to_cpu=True, pairs=pairs) to step.out.block_copies and the victim to
       step.out.swapped_out; status RequestStatus.SWAPPED; insert it into sched.swapped in serving
       order (the order of rule 1, most urgent first: bisect.insort with key=minicb.request.rank).
    5. Otherwise recompute: sched.kv.free(victim.request_id); victim.num_computed_tokens = 0 (its
       prompt and output so far are prefilled again); status RequestStatus.PREEMPTED; it waits again
       at the head of sched.waiting (it arrived before everyone there) under scheduling_policy
       "fcfs", or in serving order under "priority" (sched.config.scheduling_policy).
    """
    raise NotImplementedError("Lesson 06, task 1: make_room: preempt the least urgent running request. "
                              "Check it with: pytest tests/exercises -k lesson06_task1")


def should_swap(sched: ContinuousScheduler, victim: Request) -> bool:
    """True to swap the victim's KV out to the CPU, False to recompute it later.

    Rules (each is checked by a test), by sched.config.preemption_mode:
    - "recompute": never swap;
    - whatever the mode, never swap when the swap pool cannot hold the victim's blocks
      (sched.kv.can_swap_out(victim.request_id) is False): recompute instead;
    - "swap": swap;
    - "auto": swap when it is cheaper for the victim's t = victim.num_computed_tokens tokens of
      context, from the cost model sched.preemption_cost:
      recompute = recompute_fixed + recompute_per_token * t + recompute_per_token_sq * t^2,
      swap = swap_fixed + swap_per_token * t (seconds); swap only when strictly cheaper.
    """
    raise NotImplementedError("Lesson 06, task 2: should_swap: recompute or swap this victim. "
                              "Check it with: pytest tests/exercises -k lesson06_task2")
