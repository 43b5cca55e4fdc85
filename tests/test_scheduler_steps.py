"""The learner's steps are the engine's scheduler: in every configuration the continuous scheduler
calls each step it was given (EngineParts), and does what the step decided. Each step here is a
recording variant that decides differently from minicb's own, but legally; the trace must show
its decisions and no others."""
from __future__ import annotations

import itertools

import pytest

from minicb.costs import PreemptionCost
from minicb.engine import LLMEngine
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams
from minicb.scheduler import continuous
from minicb.scheduler.preemption import may_give_way

CONFIGS = [dict(enable_chunked_prefill=chunked, scheduling_policy=policy, preemption_mode=mode, schedule_priority=order)
           for chunked, policy, mode, order in itertools.product(
               (False, True), ("fcfs", "priority"), ("recompute", "swap", "auto"), ("decode_first", "prefill_first"))]
MAX_CHUNK = 3   # the recording chunk_size never gives more: every chunk of the run must obey it


class Recorder:
    """Variants of the five steps, each logging what it was asked and what it decided."""

    def __init__(self):
        self.calls = {name: 0 for name in ("schedule_running", "admit_waiting", "choose_victim", "should_swap",
                                           "chunk_size")}
        self.victims: list[str] = []
        self.swapped: list[str] = []
        self.admitted_per_call: list[int] = []
        self.engine_step = 0
        self.skipped: set[int] = set()   # engine steps in which running requests got nothing

    def parts(self) -> EngineParts:
        return EngineParts(schedule_running=self.schedule_running, admit_waiting=self.admit_waiting,
                           choose_victim=self.choose_victim, should_swap=self.should_swap, chunk_size=self.chunk_size)

    def schedule_running(self, sched, step, requests):
        """Every fifth step, running requests get nothing (legal: they just wait a step)."""
        self.calls["schedule_running"] += 1
        if self.engine_step % 5 == 4:
            self.skipped.add(self.engine_step)
            return
        continuous.schedule_running(sched, step, requests)

    def admit_waiting(self, sched, step):
        """At most one new request per step."""
        self.calls["admit_waiting"] += 1
        if sched.waiting and sched.free_seats and (n := sched.chunk_size(sched.waiting[0], step)) \
                and sched.kv.can_allocate(n, keep_free=step.keep_free):
            sched.start(sched.waiting[0], n, step)
            self.admitted_per_call.append(1)
            return None
        self.admitted_per_call.append(0)
        return sched.waiting[0] if sched.waiting else None

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
    finished, skipped_records = 0, set()
    for recorder.engine_step in range(1000):
        if not engine.has_unfinished_requests():
            break
        recorded = engine.trace.num_steps
        finished += sum(o.finished for o in engine.step())
        if recorder.engine_step in recorder.skipped and engine.trace.num_steps > recorded:
            skipped_records.add(recorded)
    steps = engine.trace.steps
    assert finished == 7, "the run did not finish"
    assert skipped_records, "no recorded step had its running requests skipped"
    assert recorder.victims and (recorder.swapped or config["preemption_mode"] == "recompute"), (
        "the run must preempt, and swap where the mode allows")
    # Under "recompute" the engine has no swap pool, so it never asks should_swap.
    expected = [name for name in recorder.calls if name != "should_swap" or config["preemption_mode"] != "recompute"]
    assert all(recorder.calls[name] for name in expected), f"a step was never called: {recorder.calls}"
    assert all(n <= MAX_CHUNK for s in steps for n in s.tokens.values()), "a chunk ignored chunk_size"
    assert all(len(s.admitted) <= 1 for s in steps), "more requests started in a step than admit_waiting started"
    assert [rid for s in steps for rid in s.preempted] == recorder.victims, "the preempted are not choose_victim's victims"
    assert [rid for s in steps for rid in s.swapped_out] == recorder.swapped, "the swapped are not should_swap's"
    for s in steps:
        if s.step in skipped_records:
            assert set(s.tokens) <= set(s.admitted) | set(s.swapped_in), (
                f"step {s.step}: schedule_running gave running requests nothing, yet some computed")
