"""check_plan: holds any step plan to lesson 02's contract (minicb/scheduler/plan.py) and names the first rule
it breaks, with the case in words. ContinuousScheduler asks it for every plan, and lesson 02's check for yours."""
from __future__ import annotations

from minicb.scheduler.plan import StepPlan, StepState
from minicb.scheduler.planner import plan_step
from minicb.scheduler.request import RequestView


class PlanError(ValueError):
    """A plan that breaks the contract; the message names the rule."""


RULES = {
    "victims": "as few victims as the pool needs: nobody gives way while the running requests' next tokens fit the "
               "pool, and each victim is state.choose_victim's pick among the running requests still in",
    "runs": "every running request that is not a victim runs, with what state.chunk gives it for the budget left to "
            "it; the budget serves decode_first's running requests in order before anyone starts, and "
            "prefill_first's running prompts, then its newcomers, before its running decodes",
    "starts": "first come, first served: the first of state.line start, each with its chunk, as many as the seats, "
              "the budget and the pool take; nobody starts after one that cannot, or in a step where someone gave way",
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
