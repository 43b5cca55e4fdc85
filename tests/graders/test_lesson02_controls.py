"""Lesson 02's graders catch plausible mistakes: each wrong plan below must fail a check that names the
rule it breaks. Each is minicb's plan with one thing a first try gets wrong."""
from __future__ import annotations

from dataclasses import replace

import pytest
from _pytest.outcomes import Failed
from test_lesson02_continuous import check_the_contract, check_the_engine_runs_yours

from minicb.scheduler.plan import StepPlan, StepState, plan_step


def jumps_the_line(state: StepState) -> StepPlan:
    """After the first of the line that does not fit, starts a later one that does."""
    plan = plan_step(state)
    if plan.victims:
        return plan
    used = sum(state.blocks_to_start(r, n) for r, n in plan.starts.items())
    budget = state.token_budget - sum(plan.runs.values()) - sum(plan.starts.values())
    for req in state.line[len(plan.starts) + 1:state.free_seats]:
        n = state.chunk(req.request_id, budget, False)
        if n and used + state.blocks_to_start(req.request_id, n) <= state.free_blocks - 1:
            return replace(plan, starts={**plan.starts, req.request_id: n})
    return plan


def starts_while_someone_gives_way(state: StepState) -> StepPlan:
    """Preempts when it must, then still starts the head of the line."""
    plan = plan_step(state)
    if plan.victims and state.line and state.free_seats:
        head = state.line[0].request_id
        return replace(plan, starts={head: state.chunk(head, state.token_budget, False) or 1})
    return plan


def takes_the_decodes_blocks(state: StepState) -> StepPlan:
    """Under prefill_first, lets the starts use the blocks the running decodes will need."""
    plan = plan_step(state)
    prompts_only = replace(state, running=tuple(r for r in state.running if state.uncomputed(r.request_id) > 1))
    return plan if plan.victims else replace(plan, starts=plan_step(prompts_only).starts)


def decode_first_always(state: StepState) -> StepPlan:
    """Ignores state.order: the running requests take the budget first either way."""
    return plan_step(replace(state, order="decode_first"))


def never_preempts(state: StepState) -> StepPlan:
    """Gives the running requests what fits and preempts nobody."""
    plan = plan_step(state)
    return replace(plan, victims=[])


def asks_chunk_with_the_whole_budget(state: StepState) -> StepPlan:
    """Asks every request's chunk with the full budget, not with what the requests before it left."""
    return plan_step(replace(state, chunk=lambda rid, budget, step_is_empty: state.chunk(rid, state.token_budget,
                                                                                       step_is_empty)))


def counts_shared_blocks_as_freed(state: StepState) -> StepPlan:
    """Counts every block a victim holds as freed, shared ones too, so it stops preempting too early."""
    return plan_step(replace(state, blocks_freed_by=lambda rid: state.blocks_freed_by(rid) + 1))


def runs_in_serving_order(state: StepState) -> StepPlan:
    """Serves the running requests in serving order (priority, then arrival), not in the order they run."""
    return plan_step(replace(state, running=tuple(sorted(state.running, key=lambda r: r.rank))))


def one_token_once_it_has_output(state: StepState) -> StepPlan:
    """Takes a request with output tokens for a decode: one token, even while its prompt is recomputed."""
    def chunk(request_id: str, budget: int, step_is_empty: bool) -> int:
        view = next(v for v in state.running + state.line if v.request_id == request_id)
        return min(1, budget) if view.num_output_tokens else state.chunk(request_id, budget, step_is_empty)
    return plan_step(replace(state, chunk=chunk))


@pytest.mark.parametrize("wrong, order, rule", [
    (runs_in_serving_order, "decode_first", "rule '(runs|victims)'"),
    (one_token_once_it_has_output, "prefill_first", "rule 'runs'"),
    (jumps_the_line, "decode_first", "rule 'starts'"),
    (starts_while_someone_gives_way, "decode_first", "rule 'starts'"),
    (takes_the_decodes_blocks, "prefill_first", "rule 'starts'"),
    # The decodes take budget before the starts, or before the running prompts: either is named.
    (decode_first_always, "prefill_first", "rule '(starts|runs)'"),
    (never_preempts, "decode_first", "rule 'victims'"),
    # Too many tokens for the later requests: a running one or a newcomer gets more than the budget left, or the
    # blocks for them make someone give way for nothing.
    (asks_chunk_with_the_whole_budget, "decode_first", "rule '(victims|runs|starts)'"),
    (counts_shared_blocks_as_freed, "decode_first", "rule 'victims'"),
])
def test_a_wrong_plan_fails_the_rule_it_breaks(wrong, order, rule):
    with pytest.raises(AssertionError, match=rule):
        check_the_contract(wrong, order)


@pytest.mark.parametrize("wrong, name", [(never_preempts, "decode_first, preempting"),
                                         (takes_the_decodes_blocks, "prefill_first, chunked")])
def test_the_engine_refuses_a_wrong_plan_with_its_rule(wrong, name):
    with pytest.raises(Failed, match="the engine runs your plan .* rule '"):
        check_the_engine_runs_yours(wrong, name)
