"""The contracts of the parts a learner writes, checked at the seam. course.parts() wraps each part that is not
minicb's own with its check, so a wrong answer is refused before the scheduler or the block manager applies it,
with the rule it breaks and the case in words. The engine calls its parts as they are."""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

from minicb.kv.eviction import CachedBlock
from minicb.parts import EngineParts
from minicb.scheduler.plan import StepPlan, StepState, plan_step
from minicb.scheduler.request import RequestView


class PlanError(ValueError):
    """A plan that breaks lesson 02's contract; the message names the rule."""


# The plan grows with the course. Lesson 02: seats, the line and the token budget, decode first, whole prompts.
# Each later lesson adds what it teaches; a step "needs" the first lesson whose rules give minicb's plan for it.
GROWN_BY = {4: "keep to the pool: a newcomer starts only while the free blocks hold it, after the running "
               "requests' new blocks",
            6: "make room: when the running requests' next tokens do not fit the pool, some give way",
            7: "cut prompts into chunks, and serve the budget in state.order"}
PASSING = ("Whether a later request may start past one that cannot is your choice (lesson 02); one that can start is "
           "never passed over")
PLAN_RULES = {   # the whole contract, from lesson 07 on (exercises/lesson07_slo.py states it)
    "victims": "as few victims as the pool needs: nobody gives way while the running requests' next tokens fit the "
               "pool, and each victim is state.choose_victim's pick among the running requests still in",
    "runs": "every running request that is not a victim runs, with what state.chunk gives it for the budget left to "
            "it; the budget serves decode_first's running requests in order before anyone starts, and "
            "prefill_first's running prompts, then its newcomers, before its running decodes",
    "starts": "first come, first served: the first of state.line start, each with its chunk, as many as the seats, "
              f"the budget and the pool take. {PASSING}; nobody starts in a step where someone gave way",
}


def rule(name: str, lesson: int) -> str:
    """A rule of the contract in the words taught up to `lesson`."""
    if lesson >= 7 or name == "victims":
        return PLAN_RULES[name]
    if name == "runs":
        return (f"every running request{' that is not a victim' if lesson >= 6 else ''} runs its next token, in the "
                "order they run, before anyone starts")
    limits = "the free seats, the token budget and the pool (after the running requests' new blocks)" if lesson >= 4 \
        else "the free seats and the token budget"
    return (f"first come, first served: the first of state.line start, each with its whole prompt, as many as {limits} "
            f"take (a prompt longer than the whole budget runs alone). {PASSING}"
            f"{'; nobody starts in a step where someone gave way' if lesson >= 6 else ''}")


def lesson_02_view(state: StepState) -> StepState:
    """The state as lesson 02 sees it: whole prompts (or nothing, if the budget left cannot hold one), decode first."""
    def whole(request_id: str, budget: int, step_is_empty: bool) -> int:
        n = state.uncomputed(request_id)
        return n if n <= budget or step_is_empty else 0
    return replace(state, chunk=whole, order="decode_first")


def lesson_needed(state: StepState, expected: StepPlan) -> int:
    """The first lesson whose rules give `expected`, minicb's plan for `state`: 2, 4, 6 or 7."""
    simple = lesson_02_view(state)
    if plan_step(simple) != expected:
        return 7
    if expected.victims:
        return 6
    return 4 if plan_step(replace(simple, free_blocks=10**9)) != expected else 2


def described(state: StepState, lesson: int = 7) -> str:
    """The state in words, for a message about a plan, in the words taught up to `lesson`."""
    def request(view: RequestView, running: bool) -> str:
        todo = state.uncomputed(view.request_id)
        kind = "decode" if running and todo == 1 else f"{todo} prompt token{'s' * (todo > 1)} to compute"
        if lesson < 4:
            return f"{view.request_id} ({kind})"
        blocks = state.blocks_to_grow(view.request_id, todo) if running else state.blocks_to_start(view.request_id,
                                                                                                   todo)
        freed = f"; gives {state.blocks_freed_by(view.request_id)} back if it gives way" if running and lesson >= 6 \
            else ""
        return f"{view.request_id} ({kind}; all of them need {blocks} {'new ' if running else ''}blocks{freed})"
    pool = f", {state.free_blocks} free blocks" if lesson >= 4 else ""
    order = f", {state.order}" if lesson >= 7 else ""
    return (f"running: {', '.join(request(v, True) for v in state.running) or 'none'}; line: "
            f"{', '.join(request(v, False) for v in state.line) or 'empty'}; {state.free_seats} free seats, "
            f"a budget of {state.token_budget} tokens{pool}{order}")


def check_plan(state: StepState, plan: object, expected: StepPlan | None = None) -> None:
    """Raise PlanError naming the first rule `plan` breaks, with the case in words, in the words of the lesson the
    step needs; `expected` is minicb's plan for the same state (computed when not given)."""
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
    unknown = [i for i in [*plan.runs, *plan.victims] if i not in running] + [i for i in plan.starts if i not in line]
    if unknown:
        raise PlanError(f"the plan names {unknown}, which are not running (runs, victims) or in the line (starts): "
                        f"{described(state)}")
    if both := set(plan.runs) & set(plan.victims):
        raise PlanError(f"{sorted(both)} both run and give way: a victim gets no tokens this step")
    passed_state, expected = first_come_first_served(state, plan, expected or plan_step(state))
    lesson = lesson_needed(passed_state, expected) if plan != expected else 7
    grown = f"This step needs what lesson {lesson:02d} adds: {GROWN_BY[lesson]}. " if lesson > 2 else ""
    # In the order the step gives out its budget, so that the first difference is named, not what follows from it.
    first = {r.request_id for r in state.running
             if state.order == "decode_first" or state.uncomputed(r.request_id) > 1}
    for name, part in (("victims", list), ("runs", first), ("starts", dict), ("runs", dict)):
        got, want = getattr(plan, name), getattr(expected, name)
        if isinstance(part, set):
            got, want = ({r: n for r, n in d.items() if r in part} for d in (got, want))
        if got != want:
            raise PlanError(f"rule '{name}': {rule(name, lesson)}. {grown}In this case "
                            f"({described(state, lesson)}), the plan has {name}={got}, the contract gives {want}")


def first_come_first_served(state: StepState, plan: StepPlan, expected: StepPlan) -> tuple[StepState, StepPlan]:
    """The state whose line holds only the requests `plan` starts, and minicb's plan for it, when the plan may choose
    them: it starts everyone minicb's plan starts, and passes over only requests that could not start after the ones
    it started before them. Else the state, and the plan (minicb's, or one that starts a request passed over) whose
    starts show the rule broken."""
    if set(plan.starts) == set(expected.starts) or not set(expected.starts) <= set(plan.starts):
        return state, expected   # nobody passed over, or someone who could start was left out
    started = tuple(r for r in state.line if r.request_id in plan.starts)
    for i, view in enumerate(state.line[:state.line.index(started[-1])] if started else ()):
        if view.request_id not in plan.starts:
            before = replace(state, line=tuple(r for r in state.line[:i] if r.request_id in plan.starts) + (view,))
            if view.request_id in (could := plan_step(before)).starts:
                return before, could
    chosen = replace(state, line=started)
    return chosen, plan_step(chosen)


def plan_to_run(state: StepState, plan: object, reached: int) -> tuple[StepPlan, int]:
    """The plan the engine applies, and 0, when `plan` meets the contract or breaks a rule of a lesson up to
    `reached` (then PlanError); minicb's plan and the lesson that teaches the rule, when the step needs a later one."""
    expected = plan_step(state)
    if plan == expected:
        return expected, 0
    try:
        check_plan(state, plan, expected)
    except PlanError:
        if isinstance(plan, StepPlan) and (needed := lesson_needed(state, expected)) > reached:
            return expected, needed
        raise
    return plan, 0


def may_give_way(running: Sequence[RequestView]) -> list[RequestView]:
    """The running requests choose_victim's contract allows as victims: the least urgent, but never the first
    in serving order while others run."""
    first = min(running, key=lambda r: r.rank)
    least_urgent = max(r.priority for r in running)
    return [r for r in running if r.priority == least_urgent and (r is not first or len(running) == 1)]


def check_victim(candidates: Sequence[RequestView], chosen: object) -> None:
    """Raise ValueError naming the rule of choose_victim's contract that `chosen` breaks."""
    by_id = {r.request_id: r for r in candidates}
    if not isinstance(chosen, str) or chosen not in by_id:
        raise ValueError(f"choose_victim returned {chosen!r}: it must return the request_id of one of the running "
                         f"requests it was given ({', '.join(map(repr, by_id))})")
    if by_id[chosen] in may_give_way(candidates):
        return
    least_urgent = max(r.priority for r in candidates)
    if by_id[chosen].priority < least_urgent:
        raise ValueError(f"choose_victim picked {chosen!r} (priority {by_id[chosen].priority}) while a less urgent "
                         f"request (priority {least_urgent}) runs: a victim never has a lower priority value than "
                         "another running request")
    raise ValueError(f"choose_victim picked {chosen!r}, the first in serving order, while others run: the oldest of "
                     "the most urgent requests must always make progress, or a run may never end")


def _checked(check: Callable[..., None]) -> Callable[[Callable], Callable]:
    """A wrapper maker: the part, whose answer check(answer, *its arguments) vets before it is returned."""
    def wrap(part: Callable) -> Callable:
        @functools.wraps(part)
        def checked_part(*args: Any) -> Any:
            answer = part(*args)
            check(answer, *args)
            return answer
        return checked_part
    return wrap


def _chunk(num_tokens: object, uncomputed: int, *_: Any) -> None:
    if type(num_tokens) is not int or not 0 <= num_tokens <= uncomputed:
        raise ValueError(f"chunk_size gave {num_tokens!r} tokens to a request with {uncomputed} uncomputed: a chunk "
                         "is an int from 0 to the uncomputed tokens")


def _victim(chosen: object, candidates: Sequence[RequestView]) -> None:
    check_victim(candidates, chosen)


def _swap(swap: object, victim: RequestView, *_: Any) -> None:
    if not isinstance(swap, bool):
        raise ValueError(f"should_swap returned {swap!r} for {victim.request_id!r}: it must return True (swap) or "
                         "False (recompute)")


def _prefix(num_blocks: object, hashes: Sequence[bytes], cached: Mapping[bytes, int]) -> None:
    if (type(num_blocks) is not int or not 0 <= num_blocks <= len(hashes)
            or any(h not in cached for h in hashes[:num_blocks])):
        raise ValueError(f"longest_cached_prefix gave {num_blocks!r} for {len(hashes)} hashes: it counts the "
                         "leading hashes that are all in `cached`, 0 .. len(hashes)")


def _eviction(block: object, candidates: Sequence[CachedBlock]) -> None:
    if type(block) is not int or block not in [c.block for c in candidates]:
        raise ValueError(f"choose_eviction returned {block!r}: it must return the `block` of one of its "
                         f"{len(candidates)} candidates (the cached blocks no table holds)")


def _plan_check(reached: int) -> Callable[[Callable], Callable]:
    """plan_step's wrapper maker: minicb's plan runs a step that needs a lesson after `reached`, saying so once per
    engine and lesson; a plan that breaks a rule of a lesson up to `reached` is refused."""
    def wrap(part: Callable) -> Callable:
        said: set[int] = set()

        @functools.wraps(part)
        def checked_part(state: StepState) -> StepPlan:
            plan, needed = plan_to_run(state, part(state), reached)
            if needed and needed not in said:
                said.add(needed)
                print(f"Your plan_step does not yet do what lesson {needed:02d} adds ({GROWN_BY[needed]}): minicb's "
                      f"plan runs the steps that need it. Grow yours, then check it with: "
                      f"pytest tests/exercises -k lesson{needed:02d}_task3")
            return plan
        return checked_part
    return wrap


CHECKS = {"chunk_size": _checked(_chunk), "choose_victim": _checked(_victim),
          "should_swap": _checked(_swap), "longest_cached_prefix": _checked(_prefix),
          "choose_eviction": _checked(_eviction)}


def checked(parts: EngineParts | None = None, reached: int = 7, **plugged: Any) -> EngineParts:
    """parts (or EngineParts(**plugged)) with each part that is not minicb's own wrapped in its contract's check.
    reached: the last lesson whose part of plan_step's contract is enforced (see _plan_check)."""
    parts = replace(parts or EngineParts(), **plugged)
    own = EngineParts()
    checks = {**CHECKS, "plan_step": _plan_check(reached)}
    wrapped = {f.name: checks[f.name](getattr(parts, f.name)) for f in fields(parts)
               if f.name in checks and getattr(parts, f.name) not in (None, getattr(own, f.name))}
    return replace(parts, **wrapped)
