"""Lesson 06's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions)."""
from __future__ import annotations

import pytest

from minicb import course
from minicb.engine import LLMEngine
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams
from minicb.costs import PreemptionCost

mine = course.lesson("lesson06_preemption")


def engine_under_pressure(parts: EngineParts, **config) -> LLMEngine:
    """Six requests that cannot all grow in 10 blocks of 4: someone must give way."""
    engine = LLMEngine(device="cpu", simulate=True, max_num_seqs=6, num_blocks=10, block_size=4, parts=parts,
                       **config)
    for i, n in enumerate((12, 9, 14, 6, 11, 8)):
        priority = i % 2 if engine.config.scheduling_policy == "priority" else 0
        engine.add_request("ROMEO.\n", SamplingParams(max_tokens=n, ignore_eos=True), priority=priority)
    return engine


def test_lesson06_task1_the_least_urgent_gives_way():
    engine = engine_under_pressure(EngineParts(), scheduling_policy="priority")
    engine.step()
    running = sorted(engine.scheduler.running, key=lambda r: r.arrival_index)   # priorities 0 1 0 1 0 1
    assert mine.choose_victim(running) is running[5]                   # priority 1, latest arrival
    assert mine.choose_victim(running[:5]) is running[3]
    assert mine.choose_victim([running[0], running[2]]) is running[2]  # equal priority: the later one
    running[2].metrics.arrival_time = running[0].metrics.arrival_time  # equal time: arrival order decides
    assert mine.choose_victim([running[2], running[0]]) is running[2]


def test_lesson06_task1_engine_preempts_your_victims_and_finishes_everyone():
    engine = engine_under_pressure(EngineParts(choose_victim=mine.choose_victim), scheduling_policy="priority")
    priority = {rid: r.priority for rid, r in engine.requests.items()}
    outputs = []
    while engine.has_unfinished_requests():
        outputs += [o for o in engine.step() if o.finished]
        engine.block_manager.check_invariants()
    preempted = [rid for s in engine.trace.steps for rid in s.preempted]
    assert preempted and all(priority[rid] == 1 for rid in preempted[:1])
    assert sorted(len(o.outputs[0].token_ids) for o in outputs) == [6, 8, 9, 11, 12, 14]


COST = PreemptionCost(recompute_fixed=1e-3, recompute_per_token=1e-4, recompute_per_token_sq=0.0,
                      swap_fixed=5e-3, swap_per_token=2e-5)   # equal at 50 tokens: 0.001 + 0.005 = 0.005 + 0.001


@pytest.mark.parametrize("tokens,swap", [(1, False), (49, False), (51, True), (4000, True)])
def test_lesson06_task2_short_recompute_long_swap(tokens, swap):
    assert mine.should_swap(COST, tokens) is swap
    quadratic = PreemptionCost(1e-3, 0.0, 1e-6, 1e-3, 1e-4)   # recompute t^2 vs swap t: crossing at 100
    assert mine.should_swap(quadratic, 99) is False and mine.should_swap(quadratic, 101) is True


@pytest.mark.parametrize("cost,swaps", [(PreemptionCost(1.0, 0, 0, 0, 0), True),    # recompute dear: swap
                                        (PreemptionCost(0, 0, 0, 1.0, 0), False)])  # swap dear: recompute
def test_lesson06_task2_auto_mode_follows_your_choice(cost, swaps):
    engine = engine_under_pressure(EngineParts(should_swap=mine.should_swap), preemption_mode="auto",
                                   preemption_cost=cost, swap_space_mb=1)
    while engine.has_unfinished_requests():
        engine.step()
    steps = engine.trace.steps
    preempted = [rid for s in steps for rid in s.preempted]
    swapped = [rid for s in steps for rid in s.swapped_out]
    assert preempted and swapped == (preempted if swaps else [])
