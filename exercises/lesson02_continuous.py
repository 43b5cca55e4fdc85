"""Lesson 02: iteration-level scheduling (Orca). Before every step the scheduler decides again who runs and
how many tokens each gets; a finished request has already left (update_from_output).

Task 1  plan_step   pytest tests/exercises -k lesson02_task1

ContinuousScheduler.schedule (minicb/scheduler/continuous.py) asks plan_step for every step, in every
configuration, and applies the plan; `course.llm(lesson=2)` plugs yours in. If your plan breaks the
contract, the course refuses it with the rule it breaks and the case, in words.
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

    The contract (the course checks each rule, and names the one a plan breaks with the plan it gives):
    - limits: the step runs at most state.token_budget tokens (one request running alone may run more, if
      its chunk gives it more), starts at most state.free_seats requests, and takes no more blocks than
      the pool has, with what its victims give back;
    - victims: as few as the pool needs. Nobody gives way while the running requests' next tokens fit
      the pool, and each victim is choose_victim's pick among the running requests that are still in;
    - every request in the plan gets what its chunk gives it with the budget left to it, no more, no
      less: the chunk, not the plan, decides how a request is cut;
    - nothing waits that could run: every running request that is not a victim is in runs, unless its
      chunk gives it nothing;
    - first come, first served: the requests that start are the first of state.line, as many as the
      seats, the budget and the pool take; nobody starts after one that cannot, or in a step where
      someone gave way;
    - state.order says whom the budget serves first. decode_first: the running requests, in their order,
      before anyone starts. prefill_first: the running prompts, then the newcomers, before the running
      decodes; a newcomer never takes the blocks a running decode will need.
    """
    raise NotImplementedError("Lesson 02, task 1: plan_step: the step's plan, who gives way, runs and starts. "
                              "Check it with: pytest tests/exercises -k lesson02_task1")
