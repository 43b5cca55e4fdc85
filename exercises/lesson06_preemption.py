"""Lesson 06: preemption. When a running request needs a KV block and none is free, a running request
gives its blocks back: recompute drops them (it prefills again later), swap copies them to CPU memory
(and back later). You make the two decisions; the scheduler does the preemption itself
(ContinuousScheduler.preempt: the queues, the blocks, the copies, the budget, the request's state).

Task 1  choose_victim, should_swap                 pytest tests/exercises -k lesson06_task1
Task 2  choose_victim_for_latency (a design task)   pytest tests/exercises -k lesson06_task2
Task 3  plan_step, grown: edit yours in exercises/lesson02_continuous.py
                                                   pytest tests/exercises -k lesson06_task3
        When the running requests' next tokens need more blocks than the pool has, some give way:
        StepPlan.victims, in the order they give way. As few as the pool needs: each victim is
        state.choose_victim's pick among the running requests still in, and it gives back
        state.blocks_freed_by(request_id) blocks. A victim runs nothing this step, and nobody starts in a
        step where someone gave way. A request preempted by recompute waits in the line again, with its
        prompt and its output so far to compute: it starts with all of them. Lesson 04's rules still hold.

minicb's own are in minicb/scheduler/preemption.py; `course.llm(lesson=6)` plugs yours in, and the engine
runs them in every configuration. A decision that breaks its contract stops the step with a ValueError
that names the rule.
"""
from __future__ import annotations

from minicb.costs import PreemptionCost
from minicb.scheduler.request import RequestView


def choose_victim(running: tuple[RequestView, ...]) -> str:
    """Which running request gives its KV blocks back when the pool is full.

    It may read: the views in `running` (at least one), each with request_id, priority (lower is more
    urgent), arrival_time, arrival_index (arrival order at the engine), num_prompt_tokens,
    num_output_tokens, num_computed_tokens, max_tokens, and .rank, the serving order: (priority,
    arrival_time, arrival_index), smallest first.

    The contract (the course checks each rule every time the scheduler asks, and the tests on random cases):
    - it returns the request_id of one of `running`;
    - the victim is never more urgent than another running request: no running request has a larger
      priority value than the victim's;
    - while more than one request runs, the victim is never the first in serving order: that one must
      always make progress, or a run under memory pressure might never end;
    - it depends on the views alone: the same views, in any order, give the same victim.
    Within the contract the choice is yours, and it matters: a victim loses the work it computed (or pays
    for copies), and waits again.
    """
    raise NotImplementedError("Lesson 06, task 1: choose_victim: which running request gives its KV blocks back. "
                              "Check it with: pytest tests/exercises -k lesson06_task1")


def should_swap(victim: RequestView, mode: str, cost: PreemptionCost | None) -> bool:
    """Whether the victim's KV goes to the CPU swap pool (True) or is dropped and recomputed later (False).
    The scheduler asks only when the swap pool has room for the victim.

    It may read: the victim's view (its KV holds its num_computed_tokens: what a swap copies out and back
    in, or what a recompute prefills again); mode, the engine's preemption_mode: "recompute", "swap" or
    "auto"; cost, the engine's PreemptionCost (minicb/costs.py: recompute_s(tokens) and swap_s(tokens), in
    seconds), which the engine has only under "auto": otherwise cost is None.

    The contract: it returns a bool. "recompute" and "swap" are the operator's choice, and it follows
    them. Under "auto" the victim costs the engine as little as `cost` prices it, and swap space, which
    other victims may need, is taken only when it buys something.
    """
    raise NotImplementedError("Lesson 06, task 1: should_swap: recompute or swap this victim. "
                              "Check it with: pytest tests/exercises -k lesson06_task1")


def choose_victim_for_latency(running: tuple[RequestView, ...]) -> str:
    """A victim policy of your design that lowers the average wait under memory pressure, without making the
    slowest requests wait much longer.

    It has choose_victim's contract (the engine checks it at every preemption) and reads the same views. As on
    a real server, nobody knows how long a request will run until it ends: max_tokens is its client's cap, and
    the model ends most answers well before it.
    It is judged on minicb.course.victims' workload, a burst of 200 requests on a pool far too small for them,
    against minicb's own latest-first choice, over seeds you have not seen. Both must hold:
    - the mean end-to-end latency is at most 94% of latest-first's (minicb.course.victims.TARGET);
    - the slowest 2% of the requests wait on average at most 110% as long as under latest-first, averaged over
      the workloads (minicb.course.victims.TAIL_BOUND).
    Try yours on the practice seeds with minicb.course.victims.compare_victim_policies(choose_victim_for_latency).
    """
    raise NotImplementedError("Lesson 06, task 2: choose_victim_for_latency: a victim policy that lowers the mean "
                              "latency and keeps the tail. Check it with: pytest tests/exercises -k lesson06_task2")
