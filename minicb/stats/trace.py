"""The trace: one StepRecord per forward step, what the widgets animate and the metrics count.

Plain data only, so it exports to JSON and means the same on Bard or in the simulator. To stay cheap, a step
stores only its occupied seats and Trace.max_steps bounds the kept steps; the metrics' totals cover all steps.
"""
from __future__ import annotations

import heapq
import json
from dataclasses import asdict, dataclass, field

from minicb.kv.block_manager import BlockManager, BlockUsage
from minicb.scheduler.output import SchedulerOutput
from minicb.scheduler.request import Request

PREFILL, DECODE = "prefill", "decode"   # useful work
IDLE = "idle"     # finished, still holding its seat (static batching)
PAD = "pad"       # finished, holding its seat and computing throwaway tokens (the dense baseline)
EMPTY = "empty"


@dataclass
class StepRecord:
    step: int                             # index among all steps run, dropped ones included
    start_time: float
    duration: float
    num_seats: int
    seats: dict[int, tuple[str, str]]     # occupied seats only: seat -> (request id, phase)
    num_tokens: int                       # useful tokens: prefill + decode
    context_tokens: int                   # KV entries attention read, summed over sequences
    prefill_tokens: int
    decode_tokens: int
    padding_tokens: int                   # computed and thrown away (dense baseline only)
    blocks_used: int
    blocks_free: int
    reserved_slots: int                   # KV slots in owned blocks
    token_slots: int                      # KV slots holding real tokens
    tokens: dict[str, int] = field(default_factory=dict)  # request id -> tokens it computed this step
    admitted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)   # results returned to users this step
    preempted: list[str] = field(default_factory=list)   # by recompute or by swap
    swapped_out: list[str] = field(default_factory=list)
    swapped_in: list[str] = field(default_factory=list)
    waiting: int = 0
    cached_tokens: int = 0                # admitted tokens found in the prefix cache (re-admissions too)
    kv_blocks: list[tuple[str | None, int, int]] | None = None  # per block (owner, tokens, holders) if traced

    def occupant(self, seat: int) -> tuple[str | None, str]:
        return self.seats.get(seat, (None, EMPTY))

    @property
    def all_seats(self) -> list[tuple[str | None, str]]:
        """Every seat, empty ones included: built on demand, O(num_seats)."""
        per_seat: list[tuple[str | None, str]] = [(None, EMPTY)] * self.num_seats
        for seat, held_by in self.seats.items():
            per_seat[seat] = held_by
        return per_seat

    @property
    def useful_seats(self) -> int:
        return sum(phase in (PREFILL, DECODE) for _, phase in self.seats.values())

    def to_row(self) -> dict:
        """The step as plain data, with every seat (empty ones too) under "seats"."""
        row = {}
        for name, value in asdict(self).items():
            if name == "seats":
                row["seats"] = self.all_seats
            elif name != "num_seats":
                row[name] = value
        return row

    @classmethod
    def from_row(cls, row: dict) -> "StepRecord":
        """The inverse of to_row, from its dict or its JSON (e.g. a server's /debug/trace)."""
        values = {name: row[name] for name in cls.__dataclass_fields__ if name in row}
        values["num_seats"] = len(row["seats"])
        values["seats"] = {seat: (rid, phase) for seat, (rid, phase) in enumerate(row["seats"])
                           if phase != EMPTY}
        if row.get("kv_blocks") is not None:
            values["kv_blocks"] = [tuple(block) for block in row["kv_blocks"]]
        return cls(**values)


@dataclass
class Trace:
    num_seats: int
    max_steps: int | None = None      # keep at most this many recent steps; 0 keeps none; None keeps all
    steps: list[StepRecord] = field(default_factory=list)
    arrivals: dict[str, float] = field(default_factory=dict)   # request id -> arrival time
    num_dropped_steps: int = 0        # steps run but not kept
    _seat_of: dict[str, int] = field(default_factory=dict)
    _released_seats: list[int] = field(default_factory=list)   # heap of freed seats below _seats_opened
    _seats_opened: int = 0            # seats below this were handed out at least once
    # Preempted and swapped-out ids wait here: a step that runs nothing records nothing.
    _pending_preempted: list[str] = field(default_factory=list)
    _pending_swapped_out: list[str] = field(default_factory=list)
    # Totals over every step, dropped ones included, so the metrics do not depend on max_steps.
    _useful_seat_steps: int = 0
    _useful_tokens: int = 0
    _padding_tokens: int = 0

    @property
    def enabled(self) -> bool:
        return self.max_steps != 0

    @property
    def num_steps(self) -> int:
        """Every step the engine ran, kept or not."""
        return self.num_dropped_steps + len(self.steps)

    def seat_for(self, request_id: str) -> int:
        """A request keeps its seat until it leaves (a widget row is a seat); it gets the lowest free one."""
        if request_id not in self._seat_of:
            if self._released_seats:
                seat = heapq.heappop(self._released_seats)
            elif self._seats_opened < self.num_seats:
                seat, self._seats_opened = self._seats_opened, self._seats_opened + 1
            else:
                raise RuntimeError(f"all {self.num_seats} seats are taken: the scheduler ran more sequences "
                                   "than max_num_seqs")
            self._seat_of[request_id] = seat
        return self._seat_of[request_id]

    def release(self, request_id: str) -> None:
        seat = self._seat_of.pop(request_id, None)
        if seat is not None:
            heapq.heappush(self._released_seats, seat)

    def record(self, step: StepRecord) -> None:
        """Keep a step; past max_steps, drop the oldest ones."""
        self.steps.append(step)
        self._useful_seat_steps += step.useful_seats
        self._useful_tokens += step.num_tokens
        self._padding_tokens += step.padding_tokens
        if self.max_steps is not None and len(self.steps) > self.max_steps:
            # Drop down to half the limit at once, so the copy costs O(1) per step on average.
            drop = len(self.steps) - (self.max_steps + 1) // 2
            del self.steps[:drop]
            self.num_dropped_steps += drop

    def count_unkept_step(self) -> None:
        """A step ran with the trace off: count it, keep nothing."""
        self.num_dropped_steps += 1

    def note_preemptions(self, out: SchedulerOutput) -> None:
        """Call after every scheduling, even if the step runs nothing. Preempted requests free their seats now
        (for this step's admissions); the preemptions wait for the next recorded step."""
        for request_id in out.preempted:
            self.release(request_id)
        if self.enabled:
            self._pending_preempted += out.preempted
            self._pending_swapped_out += out.swapped_out

    def record_step(self, out: SchedulerOutput, start: float, end: float, returned: list[Request],
                    context_tokens: int, usage: BlockUsage, waiting: int,
                    kv_blocks: list[tuple[str | None, int, int]] | None = None) -> None:
        """Record a step that ran; `returned` requests free their seats. usage: the pool after the step;
        waiting: requests queued after it; kv_blocks: the block map, if traced. Trace off: only count it."""
        if not self.enabled:
            self.count_unkept_step()
            return
        seats: dict[int, tuple[str, str]] = {}
        for chunk in out.chunks:
            phase = PREFILL if chunk.prefill else DECODE
            seats[self.seat_for(chunk.request_id)] = (chunk.request_id, phase)
        for request_id in out.idle_seats:
            seats[self.seat_for(request_id)] = (request_id, PAD if out.padding else IDLE)
        for req in returned:
            self.release(req.request_id)
        prefill = sum(c.num_new_tokens for c in out.chunks if c.prefill)
        self.record(StepRecord(
            step=self.num_steps, start_time=start, duration=end - start, num_seats=self.num_seats,
            seats=seats, num_tokens=out.num_tokens, context_tokens=context_tokens, prefill_tokens=prefill,
            decode_tokens=out.num_tokens - prefill, padding_tokens=out.padding_tokens,
            blocks_used=usage.owned_blocks, blocks_free=usage.free_blocks,
            reserved_slots=usage.reserved_slots, token_slots=usage.token_slots,
            tokens={c.request_id: c.num_new_tokens for c in out.chunks},
            admitted=list(out.admitted), finished=[r.request_id for r in returned],
            preempted=self._pending_preempted, swapped_out=self._pending_swapped_out,
            swapped_in=list(out.swapped_in), waiting=waiting,
            cached_tokens=out.cached_tokens, kv_blocks=kv_blocks))
        self._pending_preempted, self._pending_swapped_out = [], []

    @property
    def seat_utilization(self) -> float:
        """Useful seat-steps / all seat-steps over every step; nan with the trace off."""
        if not self.enabled:
            return float("nan")
        total = self.num_steps * self.num_seats
        return self._useful_seat_steps / total if total else 0.0

    @property
    def seat_utilization_while_queued(self) -> float:
        """Seat utilization over the kept steps after which a request still waited for a seat, so the final
        drain and lulls between arrivals do not count. nan when no kept step had a queue."""
        queued = [s for s in self.steps if s.waiting > 0]
        return (sum(s.useful_seats for s in queued) / (len(queued) * self.num_seats) if queued
                else float("nan"))

    @property
    def queued_step_share(self) -> float:
        """Share of the kept steps after which a request still waited for a seat; nan with none kept."""
        return sum(s.waiting > 0 for s in self.steps) / len(self.steps) if self.steps else float("nan")

    def seat_utilization_until(self, step: int) -> float:
        """Seat utilization over the kept steps 0..step (what a widget has played so far)."""
        played = self.steps[:step + 1]
        total = len(played) * self.num_seats
        return sum(s.useful_seats for s in played) / total if total else 0.0

    @property
    def padding_waste(self) -> float:
        """Discarded / all computed tokens over every step (dense baseline only); nan with the trace off."""
        if not self.enabled:
            return float("nan")
        total = self._padding_tokens + self._useful_tokens
        return self._padding_tokens / total if total else 0.0

    def to_rows(self) -> list[dict]:
        return [s.to_row() for s in self.steps]

    def to_json(self) -> str:
        return json.dumps({"num_seats": self.num_seats, "arrivals": self.arrivals, "steps": self.to_rows()})


def block_map(kv: BlockManager) -> list[tuple[str | None, int, int]]:
    """Per device block: (owner, tokens in it, tables holding it). Owner None: free if 0 tokens, else cached
    with no table. Owner with 0 tokens: reserved but empty (contiguous reservation's waste).
    Several holders: a shared prefix, the owner being the first."""
    blocks: list[tuple[str | None, int, int]] = [(None, 0, 0)] * kv.num_blocks
    for block in kv.evictable:
        blocks[block] = (None, kv.block_size, 0)
    for seq_id, table in kv.tables.items():
        for i, block in enumerate(table):
            if blocks[block][0] is None:
                tokens = min(kv.block_size, max(0, kv.num_tokens[seq_id] - i * kv.block_size))
                blocks[block] = (seq_id, tokens, kv.ref_counts[block])
    return blocks
