"""Lesson 02: the step's plan as one decision. plan_step reads a StepState and returns a StepPlan; the
scheduler applies it. The course checks a learner's plan at the seam (minicb/course/contracts.py)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from minicb.scheduler.request import RequestView


@dataclass(frozen=True)
class StepState:
    """What plan_step may read. The functions answer what-if questions and change nothing."""
    running: tuple[RequestView, ...]   # running requests, in the order they run
    line: tuple[RequestView, ...]      # who may start, in order: swapped, then waiting; free_seats + 1
    free_seats: int                    # max_num_seqs minus the running requests
    token_budget: int                  # max_num_batched_tokens: tokens this step may run
    free_blocks: int                   # KV blocks the pool can hand out now
    order: str                         # "decode_first" or "prefill_first" (EngineConfig.schedule_priority)
    chunk: Callable[[str, int, bool], int]   # (request_id, budget left, step_is_empty) -> tokens; 0: none
    blocks_to_grow: Callable[[str, int], int]    # (running request_id, n) -> new blocks for n more tokens
    blocks_to_start: Callable[[str, int], int]   # (request_id in line, n) -> blocks to run its first n tokens
    blocks_freed_by: Callable[[str], int]        # running request_id -> blocks freed if it gives way
    choose_victim: Callable[[tuple[RequestView, ...]], str]   # lesson 06's decision: who of these gives way

    def uncomputed(self, request_id: str) -> int:
        view = next(v for v in self.running + self.line if v.request_id == request_id)
        return view.num_tokens - view.num_computed_tokens


@dataclass
class StepPlan:
    """Tokens per request_id for running requests (runs) and starting ones (starts); victims in order."""
    runs: dict[str, int] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)
    victims: list[str] = field(default_factory=list)


def _give_tokens(state: StepState, requests: list[RequestView], budget: int,
                 step_is_empty: bool) -> dict[str, int]:
    tokens: dict[str, int] = {}
    for req in requests:
        n = state.chunk(req.request_id, budget, step_is_empty and not tokens)
        if n:
            tokens[req.request_id] = n
            budget -= n
    return tokens


def plan_step(state: StepState) -> StepPlan:
    """minicb's plan, which meets lesson 02's contract."""
    victims: list[str] = []
    while True:
        alive = [r for r in state.running if r.request_id not in victims]
        first = alive if state.order == "decode_first" else [
            r for r in alive if state.uncomputed(r.request_id) > 1]
        last = [r for r in alive if r not in first]
        runs = _give_tokens(state, first, state.token_budget, True)
        budget = state.token_budget - sum(runs.values())
        reserved = sum(state.blocks_to_grow(r, n)
                       for r, n in (runs | _give_tokens(state, last, budget, not runs)).items())
        room = state.free_blocks + sum(state.blocks_freed_by(v) for v in victims) - reserved
        if room >= 0:
            break
        victims.append(state.choose_victim(tuple(alive)))
    starts: dict[str, int] = {}
    for req in state.line[:state.free_seats] if not victims else ():
        n = state.chunk(req.request_id, budget, not runs and not starts)
        needed = state.blocks_to_start(req.request_id, n) if n else 0
        if not n or needed > room:
            break
        starts[req.request_id] = n
        budget -= n
        room -= needed
    runs |= _give_tokens(state, last, budget, not runs and not starts)
    return StepPlan(runs, starts, victims)
