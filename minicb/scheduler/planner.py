"""minicb's own step plan: lesson 02's task, whose contract is in minicb/scheduler/plan.py. check_plan
(minicb/scheduler/plan_check.py) holds every plan to that contract, comparing it with this one."""
from __future__ import annotations

from minicb.scheduler.plan import StepPlan, StepState
from minicb.scheduler.request import RequestView


def _give_tokens(state: StepState, requests: list[RequestView], budget: int, nothing_yet: bool) -> dict[str, int]:
    tokens: dict[str, int] = {}
    for req in requests:
        n = state.chunk(req.request_id, budget, nothing_yet and not tokens)
        if n:
            tokens[req.request_id] = n
            budget -= n
    return tokens


def plan_step(state: StepState) -> StepPlan:
    """minicb's plan: the contract in the module docstring, met."""
    victims: list[str] = []
    while True:
        alive = [r for r in state.running if r.request_id not in victims]
        first = alive if state.order == "decode_first" else [r for r in alive if state.uncomputed(r.request_id) > 1]
        last = [r for r in alive if r not in first]
        runs = _give_tokens(state, first, state.token_budget, True)
        budget = state.token_budget - sum(runs.values())
        reserved = sum(state.blocks_to_grow(r, n) for r, n in (runs | _give_tokens(state, last, budget, not runs)).items())
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
