"""Lesson 02: iteration-level scheduling (Orca). Before every step the scheduler decides again who runs and
who joins; a finished request has already left (update_from_output).

Task 1  plan_step   pytest tests/exercises -k lesson02_task1

ContinuousScheduler.schedule (minicb/scheduler/continuous.py) asks plan_step for every step and applies the
plan; `course.llm(lesson=2)` plugs yours in. If your plan breaks the contract, the course refuses it with the
rule it breaks and the case, in words. Lessons 04, 06 and 07 grow this same function (their task 3).
"""
from __future__ import annotations

from minicb.scheduler.plan import StepPlan, StepState


def plan_step(state: StepState) -> StepPlan:
    """Decide the step: how many tokens each running request runs (runs), and which requests of the line start,
    with how many tokens (starts): return StepPlan(runs, starts).

    What it may read: state.running (the running requests, in the order they run), state.line (who waits, first
    come first), state.free_seats, state.token_budget (the most tokens one step may run), and
    state.uncomputed(request_id) (1 for a running request: its next token; a newcomer's whole prompt).

    The contract (the course checks each rule, and names the one a plan breaks with the plan it gives):
    - limits: the step runs at most state.token_budget tokens and starts at most state.free_seats requests.
      One exception: a prompt longer than the whole budget runs alone in a step that runs nothing else, or it
      would never run;
    - runs: the running requests go first: each runs its next token, in their order, while the budget lasts;
    - starts: a newcomer runs its whole prompt. First come, first served: the first of state.line start, as
      many as the seats and the budget left take. A request that can start is never passed over.
    Your decision: when one in the line cannot start (the budget left is too small for its prompt), may later,
    shorter ones start past it? They fill the step. But each becomes a decode that takes budget in later steps,
    so the one passed over may wait much longer. The tests run your plan on workloads you have not seen: no
    request may get its first token more than minicb.course.passing.MAX_DELAY_STEPS (20) steps later than
    first come, first served gives it (the reference never lets anyone pass). Try yours on practice bursts:
    minicb.course.passing.compare(plan_step).
    """
    raise NotImplementedError("Lesson 02, task 1: plan_step: the step's plan, who runs and who starts. "
                              "Check it with: pytest tests/exercises -k lesson02_task1")
