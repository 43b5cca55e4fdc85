"""Lesson 06's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions).
Each test runs only its own task's step from there; every other step is minicb's."""
from __future__ import annotations

import pytest
from grading import add, decisions, ids, obeying, run_both, simulated_engine

from minicb import course
from minicb.costs import PreemptionCost
from minicb.parts import EngineParts
from minicb.request import RequestStatus
from minicb.sampling import SamplingParams
from minicb.scheduler.continuous import Step
from minicb.scheduler.output import BlockCopy, SchedulerOutput

mine = course.lesson("lesson06_preemption")
PRESSURE = [(4, 12, 0), (5, 9, 1), (7, 14, 0), (3, 6, 1), (6, 11, 0), (4, 8, 1)]


def decoding(priorities: list[int] | None = None, n: int = 6, **config):
    """n requests that ran their 4-token prefill (one full block each) and now decode: each decode
    needs a new block."""
    policy = "priority" if priorities else "fcfs"
    engine = simulated_engine(**{"max_num_seqs": 8, "num_blocks": 16, "block_size": 4, "scheduling_policy": policy,
                                 **config})
    add(engine, [4] * n, priorities=priorities)
    engine.step()
    return engine.scheduler


def preempt(sched, step: Step):
    return obeying("make_room takes the victim out of sched.running and returns it", mine.make_room, sched, step)


def test_lesson06_task1_the_least_urgent_gives_way():
    sched = decoding([0, 1, 0, 1, 0, 1])
    step = Step(SchedulerOutput(), token_budget=100)
    assert preempt(sched, step).request_id == "f", "rule 1: the largest priority (1), then the latest arrival: f"
    assert preempt(sched, step).request_id == "d", "rule 1: f is gone; of priority 1, d arrived last"
    assert preempt(sched, step).request_id == "b", "rule 1: b is the last request of priority 1"
    assert preempt(sched, step).request_id == "e", "rule 1: all left have priority 0: the latest arrival, e"
    assert [r.request_id for r in step.out.preempted] == ["f", "d", "b", "e"], (
        "rule 2: every victim is appended to step.out.preempted")
    assert [r.request_id for r in sched.running] == ["a", "c"], "rule 2: a victim leaves sched.running"
    sched = decoding()
    sched.running[2].metrics.arrival_time = sched.running[5].metrics.arrival_time   # equal times: arrival order
    sched.running[2].arrival_index, sched.running[5].arrival_index = 9, 5
    assert preempt(sched, Step(SchedulerOutput(), 100)).request_id == "c", (
        "rule 1: equal priority and arrival time: the largest arrival_index gives way")


def test_lesson06_task1_a_recomputed_victim_gives_its_tokens_back_and_waits_at_the_head():
    sched = decoding()
    step = Step(SchedulerOutput(), token_budget=100)
    sched.run(sched.running[5], 1, step)   # f already has its decode in this step
    victim = preempt(sched, step)
    assert victim.request_id == "f" and step.out.chunks == [], (
        "rule 3: the victim's chunk leaves step.out.chunks: a victim computes nothing this step")
    assert step.token_budget == 100, "rule 3: the victim's tokens go back to step.token_budget"
    assert victim.request_id not in sched.kv.tables and victim.request_id not in sched.kv.num_tokens, (
        "rule 5: a recomputed victim's blocks go back to the pool: sched.kv.free")
    assert victim.num_computed_tokens == 0 and victim.status is RequestStatus.PREEMPTED, (
        "rule 5: a recomputed victim starts again from token 0, with status PREEMPTED")
    assert sched.waiting and sched.waiting[0] is victim, "rule 5: under fcfs it waits at the head of sched.waiting"
    assert not step.out.block_copies and not step.out.swapped_out, "rule 5: recompute copies nothing"


def test_lesson06_task1_under_priorities_a_victim_waits_in_serving_order():
    engine = simulated_engine(max_num_seqs=2, num_blocks=16, block_size=4, scheduling_policy="priority")
    add(engine, [4, 4], priorities=[1, 1])
    engine.step()                                        # a and b run
    for rid, priority in (("c", 0), ("d", 2)):           # then c (more urgent) and d (less) arrive and wait
        engine.add_request(ids(4), SamplingParams(max_tokens=4, ignore_eos=True), request_id=rid, priority=priority)
    sched = engine.scheduler
    victim = preempt(sched, Step(SchedulerOutput(), 100))
    assert victim.request_id == "b", "rule 1: of the running a and b (priority 1), b arrived last"
    assert [r.request_id for r in sched.waiting] == ["c", "b", "d"], (
        "rule 5: under scheduling_policy='priority' a recomputed victim waits in serving order (priority 0 c, then b "
        "with 1, then d with 2), not at the head")


def test_lesson06_task1_a_swapped_victim_keeps_only_its_computed_tokens():
    sched = decoding(preemption_mode="swap", swap_space_mb=1)
    step = Step(SchedulerOutput(), token_budget=100)
    sched.run(sched.running[5], 1, step)   # f's decode took a second block in this step
    victim = preempt(sched, step)
    assert victim.status is RequestStatus.SWAPPED and list(sched.swapped) == [victim], (
        "rule 4: a swapped victim has status SWAPPED and waits in sched.swapped")
    assert step.out.swapped_out == [victim], "rule 4: a swapped victim is appended to step.out.swapped_out"
    assert len(step.out.block_copies) == 1 and step.out.block_copies[0].to_cpu, (
        "rule 4: append BlockCopy(to_cpu=True, pairs=sched.kv.swap_out(...)) to step.out.block_copies")
    assert len(step.out.block_copies[0].pairs) == 1, (
        "rule 3: truncate to num_computed_tokens before swapping: the 4 computed tokens fill one block, and the "
        "block this step's decode took is given back, not copied")
    assert sched.kv.num_tokens[victim.request_id] == victim.num_computed_tokens == 4, (
        "rule 3: the victim keeps slots for its computed tokens only (sched.kv.truncate)")
    assert step.out.block_copies[0] == BlockCopy(True, step.out.block_copies[0].pairs)


def test_lesson06_task1_the_engine_runs_yours_under_pressure():
    for config in (dict(), dict(scheduling_policy="priority"), dict(preemption_mode="swap", swap_space_mb=1)):
        workload = [(n, m, p if config.get("scheduling_policy") else 0) for n, m, p in PRESSURE]
        yours, reference = run_both(EngineParts(make_room=mine.make_room), workload, max_num_seqs=6, num_blocks=10,
                                    block_size=4, max_model_len=40, **config)
        assert any(decisions(reference, "preempted")), "the workload must put the pool under pressure"
        for what in ("preempted", "swapped_out"):
            assert decisions(yours, what) == decisions(reference, what), (
                f"{config or 'fcfs, recompute'}: with your make_room the engine {what} other requests than minicb's "
                "at some step: check the rules in its docstring")


COST = PreemptionCost(recompute_fixed=1e-3, recompute_per_token=1e-4, recompute_per_token_sq=0.0,
                      swap_fixed=5e-3, swap_per_token=2e-5)   # equal at 50 tokens: 0.001 + 0.005 = 0.005 + 0.001


def victim_of(mode: str, swap_space_mb: float = 1):
    sched = decoding(n=1, preemption_mode=mode, preemption_cost=COST, swap_space_mb=swap_space_mb)
    return sched, sched.running[0]


def swaps(sched, victim, tokens: int | None = None) -> bool:
    if tokens is not None:
        victim.num_computed_tokens = tokens   # the cost model reads only this
    return obeying("should_swap reads sched.config.preemption_mode, sched.kv and sched.preemption_cost",
                   mine.should_swap, sched, victim)


def test_lesson06_task2_the_mode_decides():
    sched, victim = victim_of("recompute")
    assert swaps(sched, victim) is False, "preemption_mode 'recompute' never swaps"
    sched, victim = victim_of("swap")
    assert swaps(sched, victim) is True, "preemption_mode 'swap' swaps when the swap pool has room"
    sched, victim = victim_of("swap", swap_space_mb=0)
    assert swaps(sched, victim) is False, "with no room in the swap pool (sched.kv.can_swap_out False), recompute"


@pytest.mark.parametrize("tokens,swap", [(1, False), (49, False), (50, False), (51, True), (4000, True)])
def test_lesson06_task2_auto_swaps_when_strictly_cheaper(tokens, swap):
    sched, victim = victim_of("auto")
    assert swaps(sched, victim, tokens) is swap, (
        f"'auto' with {tokens} computed tokens: swap costs {COST.swap_s(tokens):.4f} s, recompute "
        f"{COST.recompute_s(tokens):.4f} s; swap only when strictly cheaper")
    sched.preemption_cost = PreemptionCost(1e-3, 0.0, 1e-6, 1e-3, 1e-4)   # recompute t^2 vs swap t: cross at 100
    assert (swaps(sched, victim, 99), swaps(sched, victim, 101)) == (False, True), (
        "'auto' must use recompute_per_token_sq too: recompute = fixed + per_token t + per_token_sq t^2")
    sched, victim = victim_of("auto", swap_space_mb=0)
    assert swaps(sched, victim, 4000) is False, "'auto' with no room in the swap pool recomputes"


@pytest.mark.parametrize("cost,swapping", [(PreemptionCost(1.0, 0, 0, 0, 0), True),    # recompute dear: swap
                                           (PreemptionCost(0, 0, 0, 1.0, 0), False)])  # swap dear: recompute
def test_lesson06_task2_the_engine_follows_your_choice(cost, swapping):
    fcfs = [(n, m, 0) for n, m, _ in PRESSURE]
    yours, _ = run_both(EngineParts(should_swap=mine.should_swap), fcfs, max_num_seqs=6, num_blocks=10,
                        block_size=4, max_model_len=40, preemption_mode="auto", preemption_cost=cost,
                        swap_space_mb=1)
    preempted, swapped = decisions(yours, "preempted"), decisions(yours, "swapped_out")
    assert any(preempted) and swapped == (preempted if swapping else [[] for _ in preempted]), (
        f"'auto' should {'swap' if swapping else 'recompute'} every victim with these costs")
