"""The trace: one StepRecord per forward step, what the widgets animate and the metrics count.

Plain data only (ints, floats, strings, lists), so a trace exports to a list of dicts or JSON
and means the same whether the step ran on Bard or in the simulator.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

PREFILL, DECODE = "prefill", "decode"   # useful work
IDLE = "idle"     # finished, still holding its seat (static batching)
PAD = "pad"       # finished, holding its seat and computing throwaway tokens (the dense baseline)
EMPTY = "empty"   # no request


@dataclass
class StepRecord:
    step: int
    start_time: float
    duration: float
    slots: list[tuple[str | None, str]]   # per seat: (request id or None, prefill|decode|idle|pad|empty)
    num_tokens: int                       # useful tokens computed this step (prefill + decode)
    context_tokens: int                   # KV entries attention read this step, summed over sequences
    prefill_tokens: int
    decode_tokens: int
    padding_tokens: int                   # computed and thrown away (the dense baseline only)
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
    kv_blocks: list[tuple[str | None, int]] | None = None  # per block: (owner, tokens in it), if traced

    @property
    def useful_slots(self) -> int:
        return sum(phase in (PREFILL, DECODE) for _, phase in self.slots)


@dataclass
class Trace:
    num_seats: int
    steps: list[StepRecord] = field(default_factory=list)
    arrivals: dict[str, float] = field(default_factory=dict)   # request id -> arrival time (the queued phase)
    _seat_of: dict[str, int] = field(default_factory=dict)

    def seat_for(self, request_id: str) -> int:
        """A request keeps one seat from admission until it leaves, so a row in the widget is a seat."""
        if request_id not in self._seat_of:
            taken = set(self._seat_of.values())
            self._seat_of[request_id] = min(s for s in range(self.num_seats) if s not in taken)
        return self._seat_of[request_id]

    def release(self, request_id: str) -> None:
        self._seat_of.pop(request_id, None)

    @property
    def slot_utilization(self) -> float:
        """Useful slot-steps / all slot-steps: how much of the batch's capacity did real work."""
        return self.slot_utilization_until(len(self.steps) - 1)

    def slot_utilization_until(self, step: int) -> float:
        """The same over steps 0..step (what a widget playing the run has shown so far)."""
        played = self.steps[:step + 1]
        total = sum(len(s.slots) for s in played)
        return sum(s.useful_slots for s in played) / total if total else 0.0

    @property
    def padding_waste(self) -> float:
        """Computed-and-discarded tokens / all computed tokens (non-zero for the dense baseline only)."""
        pads = sum(s.padding_tokens for s in self.steps)
        total = pads + sum(s.num_tokens for s in self.steps)
        return pads / total if total else 0.0

    def to_rows(self) -> list[dict]:
        return [asdict(s) for s in self.steps]

    def to_json(self) -> str:
        return json.dumps({"num_seats": self.num_seats, "arrivals": self.arrivals, "steps": self.to_rows()})
