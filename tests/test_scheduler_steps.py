"""The learner's decisions are the engine's scheduler: in every configuration the continuous scheduler
calls each part it was given (EngineParts), and does what it decided. Each part here is a recording
variant (the choices of lesson 06 and 07 decide differently from minicb's own, but legally); the trace
must show their decisions and no others."""
from __future__ import annotations

import itertools

import pytest

from minicb.costs import PreemptionCost
from minicb.engine import LLMEngine
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams
from minicb.scheduler.plan import StepPlan, plan_step
from minicb.course.contracts import may_give_way

CONFIGS = [dict(enable_chunked_prefill=chunked, scheduling_policy=policy, preemption_mode=mode, schedule_priority=order)
           for chunked, policy, mode, order in itertools.product(
               (False, True), ("fcfs", "priority"), ("recompute", "swap", "auto"), ("decode_first", "prefill_first"))]
MAX_CHUNK = 3   # the recording chunk_size never gives more: every chunk of the run must obey it


class Recorder:
    """Variants of the five decisions, each logging what it was asked and what it decided."""

    def __init__(self):
        self.calls = {name: 0 for name in ("plan_step", "choose_victim", "should_swap", "chunk_size")}
        self.victims: list[str] = []
        self.swapped: list[str] = []
        self.plans: list[StepPlan] = []

    def parts(self) -> EngineParts:
        return EngineParts(plan_step=self.plan_step, choose_victim=self.choose_victim, should_swap=self.should_swap,
                           chunk_size=self.chunk_size)

    def plan_step(self, state):
        """minicb's plan, on this run's other decisions; the scheduler checks it as it checks a learner's."""
        self.calls["plan_step"] += 1
        self.plans.append(plan_step(state))
        return self.plans[-1]

    def choose_victim(self, running):
        """Of the least urgent, the one with the fewest computed tokens, never the first in serving order
        (legal, and unlike minicb's latest-arrival rule)."""
        self.calls["choose_victim"] += 1
        victim = min(may_give_way(running), key=lambda r: (r.num_computed_tokens, r.request_id)).request_id
        self.victims.append(victim)
        return victim

    def should_swap(self, victim, mode, cost):
        """Swap only even-numbered requests; recompute the others (the scheduler asks only when the swap pool
        has room)."""
        self.calls["should_swap"] += 1
        swap = mode != "recompute" and int(victim.request_id) % 2 == 0
        if swap:
            self.swapped.append(victim.request_id)
        return swap

    def chunk_size(self, uncomputed, budget, step_is_empty, config):
        self.calls["chunk_size"] += 1
        return max(0, min(MAX_CHUNK, budget, uncomputed))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_every_step_is_called_and_obeyed(config):
    recorder = Recorder()
    engine = LLMEngine(parts=recorder.parts(), device="cpu", simulate=True, check_kv_invariants=True, max_num_seqs=4,
                       num_blocks=10, block_size=4, max_model_len=40, max_num_batched_tokens=12,
                       long_prefill_token_threshold=6, swap_space_mb=1,
                       preemption_cost=PreemptionCost(1.0, 0.0, 0.0, 0.0, 0.0), **config)
    for i, (n, max_tokens) in enumerate([(7, 12), (3, 9), (9, 14), (2, 6), (5, 11), (4, 8), (6, 5)]):
        priority = i % 3 if config["scheduling_policy"] == "priority" else 0
        engine.add_request(list(range(10, 10 + n)), SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                           priority=priority)
    finished, plan_of_record = 0, {}
    for _ in range(1000):
        if not engine.has_unfinished_requests():
            break
        recorded, recorder.plans = engine.trace.num_steps, []
        finished += sum(o.finished for o in engine.step())
        if engine.trace.num_steps > recorded:
            plan_of_record[recorded] = recorder.plans[-1]
    steps = engine.trace.steps
    assert finished == 7, "the run did not finish"
    assert recorder.victims and (recorder.swapped or config["preemption_mode"] == "recompute"), (
        "the run must preempt, and swap where the mode allows")
    # Under "recompute" the engine has no swap pool, so it never asks should_swap.
    expected = [name for name in recorder.calls if name != "should_swap" or config["preemption_mode"] != "recompute"]
    assert all(recorder.calls[name] for name in expected), f"a part was never called: {recorder.calls}"
    assert all(n <= MAX_CHUNK for s in steps for n in s.tokens.values()), "a chunk ignored chunk_size"
    # choose_victim is asked more often than requests give way: check_plan asks it again for minicb's plan.
    assert {rid for s in steps for rid in s.preempted} <= set(recorder.victims), (
        "the preempted are not choose_victim's victims")
    assert [rid for s in steps for rid in s.swapped_out] == recorder.swapped, "the swapped are not should_swap's"
    for s in steps:
        plan = plan_of_record[s.step]
        assert set(plan.victims) <= set(s.preempted), f"step {s.step}: a victim of the plan did not give way"
        assert set(s.admitted) | set(s.swapped_in) == set(plan.starts), f"step {s.step}: others started than planned"
        # Under priority a request may give way after the plan (to a more urgent one in the line): it then runs nothing.
        assert s.tokens.items() <= (plan.runs | plan.starts).items(), f"step {s.step}: tokens other than planned"
