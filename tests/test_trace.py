"""The trace stays small: a step stores only its occupied seats, a long run keeps only its newest steps,
and the trace can be turned off; seats, views and metrics read the same as from a full trace."""
from __future__ import annotations

import math
import random
import sys
from dataclasses import fields
from types import SimpleNamespace

import pytest

from minicb.config import EngineConfig
from minicb.engine import LLMEngine
from minicb.kv.block_manager import BlockUsage
from minicb.lab.workload import make_workload
from minicb.sampling import SamplingParams
from minicb.scheduler.output import ScheduledChunk, SchedulerOutput
from minicb.scheduler.request import RequestOutput
from minicb.stats.metrics import summarize
from minicb.stats.trace import EMPTY, IDLE, PAD, StepRecord, Trace


class ScanSeats:
    """The reference seat rule: the lowest seat no request holds, found by scanning every seat."""

    def __init__(self, num_seats: int):
        self.num_seats, self.seat_of = num_seats, {}

    def seat_for(self, rid: str) -> int:
        if rid not in self.seat_of:
            taken = set(self.seat_of.values())
            self.seat_of[rid] = min(s for s in range(self.num_seats) if s not in taken)
        return self.seat_of[rid]

    def release(self, rid: str) -> None:
        self.seat_of.pop(rid, None)


def test_seat_for_picks_the_lowest_free_seat_like_a_full_scan():
    rng = random.Random(0)
    trace, reference = Trace(num_seats=8), ScanSeats(8)
    holding: list[str] = []
    for k in range(2000):
        if holding and (len(holding) == 8 or rng.random() < 0.5):
            rid = holding.pop(rng.randrange(len(holding)))
            trace.release(rid)
            reference.release(rid)
        else:
            holding.append(str(k))
            assert trace.seat_for(str(k)) == reference.seat_for(str(k))
        assert all(trace.seat_for(rid) == reference.seat_for(rid) for rid in holding)   # a seat is kept
    trace.release("never seated")   # a rejected request never had a seat


def simulated(max_num_seqs: int = 4, num_blocks: int = 6, **config) -> LLMEngine:
    """A simulated engine whose pool (6 blocks of 16) is tight enough for the workload below to preempt."""
    return LLMEngine(device="cpu", simulate=True, max_num_seqs=max_num_seqs, num_blocks=num_blocks,
                     max_model_len=num_blocks * 16, **config)


def serve(engine: LLMEngine) -> tuple[list[RequestOutput], int]:
    """Serve a fixed heavy-tailed workload, all queued at once; return the outputs and the most steps the trace
    ever held."""
    for request in make_workload(40, lengths="heavy", seed=5, max_tokens=48):
        engine.add_request(request.prompt, request.params)
    outputs, most_kept = [], 0
    while engine.has_unfinished_requests():
        outputs += [o for o in engine.step() if o.finished]
        most_kept = max(most_kept, len(engine.trace.steps))
    return sorted(outputs, key=lambda o: int(o.request_id)), most_kept


@pytest.mark.parametrize("batching", ["continuous", "static", "padded"])
def test_each_step_seats_its_requests_where_the_scan_rule_would(batching):
    """Replay each step's events (preempted leave first, then the step's requests take seats, then the finished
    leave) through the reference rule: every step's per-seat view matches it."""
    engine = simulated(batching=batching)
    serve(engine)
    assert any(s.preempted for s in engine.trace.steps) or batching != "continuous"   # seats churn mid-run
    reference = ScanSeats(engine.trace.num_seats)
    for record in engine.trace.steps:
        for rid in record.preempted:
            reference.release(rid)
        expected: list[str | None] = [None] * engine.trace.num_seats
        held = [rid for rid, phase in record.seats.values() if phase in (IDLE, PAD)]
        for rid in [*record.tokens, *held]:
            expected[reference.seat_for(rid)] = rid
        assert [rid for rid, _ in record.all_seats] == expected, record.step
        for rid in record.finished:
            reference.release(rid)


def test_a_million_seats_store_only_the_occupied_ones():
    engine = simulated(max_num_seqs=10**6, num_blocks=64)
    for k in range(3):
        engine.add_request("ROMEO.\n", SamplingParams(max_tokens=4 + k, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.trace.num_steps >= 5
    for record in engine.trace.steps:
        held = sum(sys.getsizeof(getattr(record, f.name)) for f in fields(record))
        assert held < 4096, f"step {record.step} holds {held} bytes"   # a per-seat list would be 8 MB
        assert set(record.seats) <= {0, 1, 2} and record.occupant(10**6 - 1) == (None, EMPTY)
    assert engine.trace.steps[0].seats == {0: ("0", "prefill"), 1: ("1", "prefill"), 2: ("2", "prefill")}


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in ("start_time", "duration")} for row in rows]


def test_a_long_run_keeps_only_its_newest_steps_and_counts_them_all():
    limit = 10
    kept, full = simulated(trace_max_steps=limit), simulated(trace_max_steps=None)
    outputs, most_kept = serve(kept)
    reference, _ = serve(full)
    assert outputs == reference

    steps = kept.trace.steps
    assert most_kept == limit and math.ceil(limit / 2) <= len(steps) <= limit
    assert kept.trace.num_steps == full.trace.num_steps > 20 * limit
    assert kept.trace.num_dropped_steps == full.trace.num_steps - len(steps)
    assert comparable(kept.trace.to_rows()) == comparable(full.trace.to_rows()[-len(steps):])   # the newest
    assert [s.step for s in steps] == list(range(kept.trace.num_steps - len(steps), kept.trace.num_steps))
    got, want = summarize(outputs, kept.trace), summarize(reference, full.trace)
    assert {k: got[k] for k in ("steps", "seat_utilization", "padding_waste")} == \
        {k: want[k] for k in ("steps", "seat_utilization", "padding_waste")}


def test_with_the_trace_off_the_engine_records_nothing_and_serves_the_same():
    off, on = simulated(trace_max_steps=0), simulated()
    (got, _), (want, _) = serve(off), serve(on)
    assert [(o.outputs[0].token_ids, o.outputs[0].finish_reason) for o in got] == \
        [(o.outputs[0].token_ids, o.outputs[0].finish_reason) for o in want]
    assert any(s.preempted for s in on.trace.steps)   # events the trace-off engine had to let go of
    assert off.trace.steps == [] and off.trace._pending_preempted == [] and off.trace._pending_swapped_out == []
    assert not off.trace.arrivals and not off.requests   # a long-lived engine keeps nothing per request
    stats = summarize(got, off.trace)
    assert stats["steps"] == on.trace.num_steps and stats["served"] == summarize(want, on.trace)["served"]
    assert math.isnan(stats["seat_utilization"]) and math.isnan(stats["padding_waste"])


def test_a_step_record_exports_one_entry_per_seat():
    record = StepRecord(step=3, start_time=0.5, duration=0.25, num_seats=3, seats={2: ("a", "decode")},
                        num_tokens=1, context_tokens=9, prefill_tokens=0, decode_tokens=1, padding_tokens=0,
                        blocks_used=1, blocks_free=2, reserved_slots=16, token_slots=9, tokens={"a": 1})
    row = record.to_row()
    assert list(row)[:5] == ["step", "start_time", "duration", "seats", "num_tokens"]
    assert row["seats"] == [(None, EMPTY), (None, EMPTY), ("a", "decode")] and "num_seats" not in row
    assert record.useful_seats == 1


def stand_in(rid: str) -> SimpleNamespace:
    """All the trace reads of a request is its id."""
    return SimpleNamespace(request_id=rid)


def scheduled(running: dict[str, int] | None = None, prefill: tuple[str, ...] = (),
              **events: list[str]) -> SchedulerOutput:
    """A SchedulerOutput: running maps request id -> tokens this step; events give the request ids of each
    list field (admitted, preempted, swapped_out, ...)."""
    running = running or {}
    chunks = [ScheduledChunk(rid, (1,) * n, 0, (0,), needs_logits=True, prefill=rid in prefill) for rid, n in running.items()]
    return SchedulerOutput(chunks=chunks, **events)


USAGE = BlockUsage(num_blocks=4, free_blocks=1, owned_blocks=3, reserved_slots=48, token_slots=40)


def test_record_step_builds_the_step_and_preemptions_wait_for_the_next_step_that_runs():
    trace = Trace(num_seats=2)
    out = scheduled({"a": 5, "b": 3}, prefill=("a", "b"), admitted=["a", "b"])
    trace.note_preemptions(out)
    trace.record_step(out, 1.0, 1.5, [], context_tokens=8, usage=USAGE, waiting=1, kv_blocks=[("a", 5)])
    [first] = trace.steps
    assert first.seats == {0: ("a", "prefill"), 1: ("b", "prefill")}
    assert (first.step, first.start_time, first.duration) == (0, 1.0, 0.5)
    assert (first.num_tokens, first.prefill_tokens, first.decode_tokens) == (8, 8, 0)
    assert (first.blocks_used, first.blocks_free, first.reserved_slots, first.token_slots) == (3, 1, 48, 40)
    assert (first.context_tokens, first.waiting, first.kv_blocks, first.admitted) == (8, 1, [("a", 5)], ["a", "b"])

    trace.note_preemptions(scheduled(preempted=["a"], swapped_out=["a"]))   # a step that runs nothing
    out = scheduled({"b": 1, "c": 4}, prefill=("c",), admitted=["c"])
    trace.note_preemptions(out)
    trace.record_step(out, 2.0, 2.25, [stand_in("b")], context_tokens=13, usage=USAGE, waiting=0)
    second = trace.steps[-1]
    assert second.seats == {0: ("c", "prefill"), 1: ("b", "decode")}   # c takes the seat a gave up
    assert (second.preempted, second.swapped_out, second.finished) == (["a"], ["a"], ["b"])
    assert (second.step, second.decode_tokens, second.tokens) == (1, 1, {"b": 1, "c": 4})

    out = scheduled({"c": 1, "d": 2}, prefill=("d",), admitted=["d"])
    trace.note_preemptions(out)
    trace.record_step(out, 3.0, 3.5, [], context_tokens=9, usage=USAGE, waiting=0)
    assert trace.steps[-1].seats == {0: ("c", "decode"), 1: ("d", "prefill")}   # b's seat was freed when returned
    assert trace.steps[-1].preempted == [] and trace.steps[-1].swapped_out == []


def test_with_the_trace_off_record_step_only_counts():
    trace = Trace(num_seats=2, max_steps=0)
    trace.note_preemptions(scheduled(preempted=["a"], swapped_out=["a"]))
    out = scheduled({"b": 2})
    trace.note_preemptions(out)
    trace.record_step(out, 0.0, 1.0, [], context_tokens=2, usage=USAGE, waiting=0)
    assert (trace.steps, trace.num_steps, trace._pending_preempted, trace._pending_swapped_out) == ([], 1, [], [])


@pytest.mark.parametrize("value", [-1, 1.5, True, "100"])
def test_trace_max_steps_must_be_a_count_or_none(value):
    with pytest.raises(ValueError, match="trace_max_steps"):
        EngineConfig(trace_max_steps=value)


def test_seat_utilization_while_queued_counts_only_the_steps_after_which_someone_waited():
    """One seat, two requests at once: A's 3 tokens take 3 steps while B waits, then B's 2 run with nobody
    waiting. Over the run the seat works in all 5 steps; while B waited, in all 3 of those."""
    engine = LLMEngine(simulate=True, max_num_seqs=1, num_blocks=16)
    for name, n in (("A", 3), ("B", 2)):
        engine.add_request([5, 6, 7], SamplingParams(max_tokens=n, ignore_eos=True), request_id=name)
    while engine.has_unfinished_requests():
        engine.step()
    trace = engine.trace
    assert [s.waiting for s in trace.steps] == [1, 1, 1, 0, 0]
    assert trace.queued_step_share == 3 / 5 and trace.seat_utilization_while_queued == 1.0
    idle = LLMEngine(simulate=True, max_num_seqs=4, num_blocks=16)
    idle.add_request([5, 6, 7], SamplingParams(max_tokens=2, ignore_eos=True))
    while idle.has_unfinished_requests():
        idle.step()
    assert idle.trace.queued_step_share == 0 and math.isnan(idle.trace.seat_utilization_while_queued)
