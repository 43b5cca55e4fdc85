"""Lesson 02: the step's plan, Orca's iteration-level scheduling as one decision.

Before every step the scheduler hands plan_step a StepState, a snapshot of what it may read, and applies
the StepPlan it returns: who gives way, which running requests get how many tokens, and who starts. The
plan only decides; ContinuousScheduler applies it through its own methods (preempt, run, start), after
check_plan has compared it with the contract below and named the first rule a wrong plan breaks.

The contract (every rule is one check_plan names):
- victims: a running request gives way only while the running requests' next tokens need more blocks
  than the pool has (counting what the victims so far give back), and each is the one
  state.choose_victim names among the running requests that have not given way;
- runs: every running request that has not given way runs, with the tokens state.chunk gives it at its
  turn, asked with the budget the requests before it left (0 tokens: it is left out, and waits for the
  next step).
  decode_first gives the budget to the running requests in their order; prefill_first gives it to the
  running prompts first, then to the requests that start, and the running decodes take what is left;
- starts: first come, first served. The requests that start are the first of state.line, in its
  order, each with its chunk and its blocks, as many as get a seat, tokens and blocks, and none in a
  step where someone gave way (the pool is short). Under prefill_first the running decodes' next
  blocks are not the starts' to take.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from minicb.request import RequestView


@dataclass(frozen=True)
class StepState:
    """What plan_step may read. The functions answer what-if questions and change nothing."""
    running: tuple[RequestView, ...]   # running requests, in the order they run
    line: tuple[RequestView, ...]      # who may start, in the order they must: swapped ones coming back
    #                                    (most urgent first), then waiting ones; the first free_seats + 1
    #                                    (the one past the seats is for admission control's question
    #                                    whether the next would start: the seats bound the starts)
    free_seats: int                    # max_num_seqs minus the running requests
    token_budget: int                  # max_num_batched_tokens: tokens this step may run
    free_blocks: int                   # KV blocks the pool can hand out now
    order: str                         # "decode_first" or "prefill_first" (EngineConfig.schedule_priority)
    chunk: Callable[[str, int, bool], int]   # (request_id, budget left, nothing planned yet) -> its tokens
    #                                          now, lesson 07's decision; 0: none fit. "Nothing planned yet":
    #                                          no request of this step has tokens so far
    blocks_to_grow: Callable[[str, int], int]    # (running request_id, n) -> new blocks for n more tokens
    blocks_to_start: Callable[[str, int], int]   # (request_id in line, n) -> blocks to run its first n tokens
    blocks_freed_by: Callable[[str], int]        # running request_id -> blocks the pool gets back if it gives way
    choose_victim: Callable[[tuple[RequestView, ...]], str]   # lesson 06's decision: who of these gives way

    def uncomputed(self, request_id: str) -> int:
        """Tokens the request has not computed: 1 for a decode, more for a prompt still to prefill."""
        view = next(v for v in self.running + self.line if v.request_id == request_id)
        return view.num_tokens - view.num_computed_tokens


@dataclass
class StepPlan:
    """What the step does: tokens per request_id for running requests (runs) and for those of the line
    that start (starts), and the running requests that give way, in the order they were chosen."""
    runs: dict[str, int] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)
    victims: list[str] = field(default_factory=list)


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


class PlanError(ValueError):
    """A plan that breaks the contract; the message names the rule."""


RULES = {
    "victims": "a running request gives way only while the running requests' next tokens do not fit the pool, "
               "and each is the one state.choose_victim names among those that have not given way",
    "runs": "every running request that has not given way runs, with the tokens state.chunk gives it at its turn "
            "(the budget the requests before it left; decode_first: running requests first, prefill_first: running "
            "prompts, then starts, then decodes)",
    "starts": "first come, first served: the first of state.line start, in order, each with its chunk and blocks, "
              "as many as get a seat, tokens and blocks; nobody starts in a step where someone gave way",
}


def described(state: StepState) -> str:
    """The state in words, for a message about a plan."""
    def request(view: RequestView, running: bool) -> str:
        todo = state.uncomputed(view.request_id)
        kind = "decode" if todo == 1 else f"{todo} prompt tokens to compute"
        if running:
            return (f"{view.request_id} ({kind}; all of them need {state.blocks_to_grow(view.request_id, todo)} new "
                    f"blocks; gives {state.blocks_freed_by(view.request_id)} back if it gives way)")
        return f"{view.request_id} ({kind}; all of them need {state.blocks_to_start(view.request_id, todo)} blocks)"
    return (f"running: {', '.join(request(v, True) for v in state.running) or 'none'}; line: "
            f"{', '.join(request(v, False) for v in state.line) or 'empty'}; {state.free_seats} free seats, "
            f"a budget of {state.token_budget} tokens, {state.free_blocks} free blocks, {state.order}")


def check_plan(state: StepState, plan: object, expected: StepPlan | None = None) -> None:
    """Raise PlanError naming the first rule `plan` breaks, with the case in words; `expected` is minicb's
    plan for the same state (computed when not given)."""
    if not isinstance(plan, StepPlan):
        raise PlanError(f"plan_step returned {plan!r}: it must return a StepPlan(runs, starts, victims)")
    for name in ("runs", "starts"):
        value = getattr(plan, name)
        if not isinstance(value, dict) or any(type(n) is not int or n < 1 for n in value.values()):
            raise PlanError(f"StepPlan.{name} is {value!r}: it maps request_id to a number of tokens (an int >= 1; "
                            "leave out a request that gets none)")
    if not isinstance(plan.victims, list):
        raise PlanError(f"StepPlan.victims is {plan.victims!r}: it is a list of request_ids")
    running, line = {r.request_id for r in state.running}, {r.request_id for r in state.line}
    if unknown := [i for i in [*plan.runs, *plan.victims] if i not in running] + [i for i in plan.starts if i not in line]:
        raise PlanError(f"the plan names {unknown}, which are not running (runs, victims) or in the line (starts): "
                        f"{described(state)}")
    if both := set(plan.runs) & set(plan.victims):
        raise PlanError(f"{sorted(both)} both run and give way: a victim gets no tokens this step")
    expected = expected or plan_step(state)
    # In the order the step gives out its budget, so that the first difference is named, not what follows from it.
    prompts = {r.request_id for r in state.running if state.order == "decode_first" or state.uncomputed(r.request_id) > 1}
    for rule, part in (("victims", list), ("runs", prompts), ("starts", dict), ("runs", dict)):
        got, want = getattr(plan, rule), getattr(expected, rule)
        if isinstance(part, set):
            got, want = ({r: n for r, n in d.items() if r in part} for d in (got, want))
        if got != want:
            raise PlanError(f"rule '{rule}': {RULES[rule]}. In this case ({described(state)}), the plan has {rule}={got}, "
                            f"the contract gives {want}")
