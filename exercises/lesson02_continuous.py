"""Lesson 02: iteration-level scheduling (Orca). Before every step the scheduler decides again who runs and
how many tokens each gets; a finished request has already left (update_from_output).

Task 1  plan_step   pytest tests/exercises -k lesson02_task1

ContinuousScheduler.schedule (minicb/scheduler/continuous.py) asks plan_step for every step, in every
configuration, and applies the plan; `course.llm(lesson=2)` plugs yours in. If your plan breaks the
contract, the scheduler refuses it with the rule it breaks and the case, in words.
"""
from __future__ import annotations

from minicb.scheduler.plan import StepPlan, StepState


def plan_step(state: StepState) -> StepPlan:
    """Decide the step: which running requests give way (victims), how many tokens each running request
    runs (runs), and which requests of the line start with how many tokens (starts).

    What it may read: `state` (minicb/scheduler/plan.py::StepState) and nothing else. Its views say what
    each request has computed; its functions answer what-if questions about the pool (blocks to grow,
    to start, freed by a victim), ask lesson 07's chunk decision how many tokens a request may run with a
    given budget left, and ask lesson 06's choose_victim who gives way among some running requests.

    The contract (the scheduler checks each rule, and names the one a plan breaks):
    - never more than state.token_budget tokens (a step running one request alone may, if its chunk
      says so), state.free_seats new requests, or the blocks the pool holds;
    - victims: a running request gives way only while the running requests' next tokens need more
      blocks than the pool has, and each is the one choose_victim names among those still running.
      "Their next tokens" are what runs would give them if nobody started: under prefill_first the
      decodes' chunks with the budget the running prompts leave;
    - runs: every running request that has not given way runs, with the tokens its chunk gives it at its
      turn, asked with the budget the requests before it left (a request its chunk gives 0 is left out of
      runs: it waits for the next step). state.order says whose turn comes first:
      "decode_first", the running requests, in order; "prefill_first", the running prompts (more than
      one uncomputed token), then the requests that start, then the running decodes;
    - starts: first come, first served: the requests that start are the first of state.line, in its
      order, as many as get a seat, tokens and blocks; nobody starts in a step where someone gave way,
      and under prefill_first the blocks the running decodes will need are not theirs to take.
    """
    raise NotImplementedError("Lesson 02, task 1: plan_step: the step's plan, who gives way, runs and starts. "
                              "Check it with: pytest tests/exercises -k lesson02_task1")
