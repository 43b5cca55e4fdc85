"""Lesson 02: iteration-level scheduling (Orca). Before every step the scheduler decides again:
who leaves the batch, and who joins it.

Task 1  requests_that_leave   pytest tests/exercises -k lesson02_task1
Task 2  plan_admissions       pytest tests/exercises -k lesson02_task2

The engine calls both from minicb/scheduler/continuous.py (ContinuousScheduler.update and _admit),
where minicb's own versions live; `course.llm()` plugs yours in instead.
"""
from __future__ import annotations

from minicb.request import Request
from minicb.scheduler.continuous import QueuedRequest


def requests_that_leave(running: list[Request]) -> list[Request]:
    """The requests of `running` that leave the batch after this step: those that finished
    (`request.status.finished`), in their order in `running`. Nobody waits for the rest of the batch."""
    raise NotImplementedError("Lesson 02, task 1: requests_that_leave: the running requests that leave the batch "
                              "now. Check it with: pytest tests/exercises -k lesson02_task1")


def plan_admissions(queue: list[QueuedRequest], free_seats: int, token_budget: int, free_blocks: int,
                    step_is_empty: bool) -> list[str]:
    """The ids of the waiting requests that start this step, in queue order.

    First come, first served: admit the head of the queue, then the next, and stop at the first
    request that does not fit (nobody jumps the line). A request fits when
    - a seat is free (each admitted request takes one of `free_seats`);
    - its `num_tokens` fit what is left of `token_budget` (the step's max_num_batched_tokens after the
      running decodes took theirs); exception: when `step_is_empty` and nothing is admitted yet, the
      head may start even if it is bigger than the budget, so that it cannot starve;
    - its `num_blocks` fit what is left of `free_blocks`.
    """
    raise NotImplementedError("Lesson 02, task 2: plan_admissions: which waiting requests start this step. "
                              "Check it with: pytest tests/exercises -k lesson02_task2")
