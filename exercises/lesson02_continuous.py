"""Lesson 02: iteration-level scheduling (Orca). Before every step the scheduler decides again who
runs and how many tokens each gets; a finished request has already left (update_from_output).

Task 1  schedule_running   pytest tests/exercises -k lesson02_task1
Task 2  admit_waiting      pytest tests/exercises -k lesson02_task2

ContinuousScheduler.schedule (minicb/scheduler/continuous.py) calls both every step, in every
configuration; `course.llm(lesson=2)` plugs yours in. What you may use:
- sched.running (list), sched.waiting (deque, head first), sched.free_seats (max_num_seqs - running);
- sched.kv: the KV pool; kv.can_append(seq_id, n) / kv.can_allocate(n, keep_free=k) say whether it
  can hold n more tokens of a running sequence / the first n tokens of a new one;
- sched.chunk_size(req, step): the tokens req may run this step (1 for a decode; 0: none fit);
- sched.make_room(step): preempts the running request lesson 06's choose_victim picks, returns it,
  and gives its tokens of this step back to step.token_budget;
- sched.run(req, n, step) / sched.start(req, n, step): record the decision (slots, chunk, budget);
- step.token_budget (tokens left this step), step.keep_free (blocks admission must leave free).
"""
from __future__ import annotations

from minicb.request import Request
from minicb.scheduler.continuous import ContinuousScheduler, Step


def schedule_running(sched: ContinuousScheduler, step: Step, requests: list[Request]) -> None:
    """Give each of `requests` its tokens for this step, in the order given.

    Rules (each is checked by a test):
    1. A request that is no longer in sched.running (it was preempted earlier in this step) gets nothing.
    2. A request gets n = sched.chunk_size(req, step) tokens; n == 0 means nothing this step (and no
       preemption for it).
    3. While sched.kv.can_append(req.request_id, n) is False, call sched.make_room(step). If the
       request it returns is req itself, req gets nothing this step; otherwise check again.
    4. Then record it: sched.run(req, n, step). Never call sched.run for a request that cannot hold
       its tokens: the pool would raise NoFreeBlocks.
    """
    raise NotImplementedError("Lesson 02, task 1: schedule_running: give each running request its tokens this "
                              "step. Check it with: pytest tests/exercises -k lesson02_task1")


def admit_waiting(sched: ContinuousScheduler, step: Step) -> Request | None:
    """Start waiting requests, first come, first served, and return the one that could not start.

    Rules (each is checked by a test):
    1. Look only at the head of sched.waiting; start it with sched.start(req, n, step), then look
       at the new head. Stop at the first request that does not fit and return it: nobody behind it
       may start this step, even one that would fit (no jumping the line).
    2. The head fits when all three hold:
       - n = sched.chunk_size(req, step) is not 0 (its tokens fit what is left of the step);
       - a seat is free (sched.free_seats > 0);
       - the pool can hold its n tokens and still keep step.keep_free blocks free:
         sched.kv.can_allocate(n, keep_free=step.keep_free).
    3. Return None when the queue runs out (everyone waiting started).
    """
    raise NotImplementedError("Lesson 02, task 2: admit_waiting: start waiting requests, first come first served. "
                              "Check it with: pytest tests/exercises -k lesson02_task2")
