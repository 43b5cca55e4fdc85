"""ContinuousScheduler.preempt, the mechanism behind lesson 06's decisions: the victim leaves the running
requests, its tokens of the step go back, and it is swapped out or freed and queued again where it belongs."""
from __future__ import annotations

from minicb.engine import LLMEngine
from minicb.sampling import SamplingParams
from minicb.scheduler.continuous import Step
from minicb.scheduler.output import SchedulerOutput
from minicb.scheduler.request import RequestStatus


def decoding(n: int = 6, priorities: list[int] | None = None, **config):
    """A scheduler whose n requests ran their 4-token prefill (one full block each) and now decode."""
    engine = LLMEngine(device="cpu", simulate=True, check_kv_invariants=True, max_num_seqs=8, num_blocks=16,
                       block_size=4, scheduling_policy="priority" if priorities else "fcfs", **config)
    for i in range(n):
        engine.add_request(list(range(10, 14)), SamplingParams(max_tokens=8, ignore_eos=True), request_id="abcdef"[i],
                           priority=priorities[i] if priorities else 0)
    engine.step()
    return engine.scheduler


def test_a_recomputed_victim_gives_its_tokens_back_and_waits_at_the_head():
    sched = decoding()
    step = Step(SchedulerOutput(), token_budget=100)
    victim = sched.running[5]
    sched.run(victim, 1, step)   # f already has its decode in this step
    sched.preempt(victim, step)
    assert step.out.chunks == [] and step.token_budget == 100 and step.out.preempted == ["f"]
    assert victim not in sched.running and "f" not in sched.kv.tables and "f" not in sched.kv.num_tokens
    assert victim.num_computed_tokens == 0 and victim.status is RequestStatus.PREEMPTED
    assert sched.waiting[0] is victim and victim.metrics.num_preemptions == 1
    assert not step.out.block_copies and not step.out.swapped_out


def test_under_priorities_a_recomputed_victim_waits_in_serving_order():
    engine = LLMEngine(device="cpu", simulate=True, max_num_seqs=2, num_blocks=16, block_size=4,
                       scheduling_policy="priority")
    for rid in "ab":
        engine.add_request(list(range(10, 14)), SamplingParams(max_tokens=4, ignore_eos=True), rid, priority=1)
    engine.step()
    for rid, priority in (("c", 0), ("d", 2)):
        engine.add_request(list(range(10, 14)), SamplingParams(max_tokens=4, ignore_eos=True), rid, priority=priority)
    sched = engine.scheduler
    assert sched.make_room(Step(SchedulerOutput(), 100)).request_id == "b"
    assert [r.request_id for r in sched.waiting] == ["c", "b", "d"]


def test_a_swapped_victim_keeps_only_its_computed_tokens():
    sched = decoding(preemption_mode="swap", swap_space_mb=1)
    step = Step(SchedulerOutput(), token_budget=100)
    victim = sched.running[5]
    sched.run(victim, 1, step)   # f's decode took a second block in this step
    sched.preempt(victim, step)
    assert victim.status is RequestStatus.SWAPPED and list(sched.swapped) == [victim]
    assert step.out.swapped_out == ["f"] and len(step.out.block_copies) == 1 and step.out.block_copies[0].to_cpu
    assert len(step.out.block_copies[0].pairs) == 1, "the block this step's decode took is given back, not copied"
    assert sched.kv.num_tokens["f"] == victim.num_computed_tokens == 4


def test_without_room_in_the_swap_pool_a_victim_is_recomputed_whatever_should_swap_says():
    sched = decoding(preemption_mode="swap", swap_space_mb=0)
    victim = sched.make_room(Step(SchedulerOutput(), 100))
    assert victim.status is RequestStatus.PREEMPTED and sched.waiting[0] is victim
