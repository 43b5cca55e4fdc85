"""The plan's graders (lesson 02, and lessons 04, 06 and 07, which grow it) catch plausible mistakes: each wrong
plan below must fail a check that names the rule it breaks. Each is minicb's plan with one thing a first try gets
wrong, but for lesson_02_plan, a right plan written with lesson 02's rules alone."""
from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
from _pytest.outcomes import Failed
from test_lesson02_continuous import check_nobody_waits_much_longer, check_the_contract, check_the_engine_runs_yours

from minicb.scheduler.plan import StepPlan, StepState, plan_step


def lesson_02_plan(state: StepState, passing: str = "never") -> StepPlan:
    """A learner's plan after lesson 02: running decodes first, then whole prompts, first come, first served. passing:
    whom it lets start past a request that cannot: "never"; "always" (whoever fits); "safe" (only while the budget
    left after next step's decodes would still hold the request passed over)."""
    runs, starts, budget = {}, {}, state.token_budget
    for req in state.running:
        if budget >= 1:
            runs[req.request_id] = 1
            budget -= 1
    passed = 0   # the prompt of the first request that could not start
    for req in state.line:
        n = state.uncomputed(req.request_id)
        fits = n <= budget or not (runs or starts)
        decodes_next = len(state.running) + len(starts) + 1
        if len(starts) == state.free_seats or not fits and passing == "never" \
                or passing == "safe" and passed and state.token_budget - decodes_next < passed:
            break
        if fits:
            starts[req.request_id] = n
            budget -= n
        passed = passed or (0 if fits else n)
    return StepPlan(runs, starts)


def passes_over_one_that_could_start(state: StepState) -> StepPlan:
    """Starts a later request in place of the last one first come, first served starts."""
    plan = plan_step(state)
    if not plan.starts or plan.victims:
        return plan
    *kept, (last, _) = plan.starts.items()
    for req in state.line[len(plan.starts):]:
        n = state.uncomputed(req.request_id)
        if n <= plan.starts[last]:
            return replace(plan, starts={**dict(kept), req.request_id: n})
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


def ignores_the_pool(state: StepState) -> StepPlan:
    """Starts whoever the seats and the budget take, as if the pool were endless."""
    return plan_step(replace(state, free_blocks=10**9))


def keeps_no_blocks_for_the_decodes(state: StepState) -> StepPlan:
    """Lets the newcomers take the blocks the running requests' next tokens need."""
    return plan_step(replace(state, blocks_to_grow=lambda request_id, n: 0))


def restarts_with_the_prompt_alone(state: StepState) -> StepPlan:
    """Starts a request recomputed after a preemption with its prompt, forgetting the output it must recompute."""
    def chunk(request_id: str, budget: int, step_is_empty: bool) -> int:
        view = next(v for v in state.running + state.line if v.request_id == request_id)
        todo = state.uncomputed(request_id) - (view.num_output_tokens if view in state.line else 0)
        return todo if todo <= budget or step_is_empty else 0
    return plan_step(replace(state, chunk=chunk))


def runs_in_serving_order(state: StepState) -> StepPlan:
    """Serves the running requests in serving order (priority, then arrival), not in the order they run."""
    return plan_step(replace(state, running=tuple(sorted(state.running, key=lambda r: r.rank))))


def one_token_once_it_has_output(state: StepState) -> StepPlan:
    """Takes a request with output tokens for a decode: one token, even while its prompt is recomputed."""
    def chunk(request_id: str, budget: int, step_is_empty: bool) -> int:
        view = next(v for v in state.running + state.line if v.request_id == request_id)
        return min(1, budget) if view.num_output_tokens else state.chunk(request_id, budget, step_is_empty)
    return plan_step(replace(state, chunk=chunk))


@pytest.mark.parametrize("wrong, lesson, order, rule", [
    (runs_in_serving_order, 2, "decode_first", "rule 'runs'"),
    (passes_over_one_that_could_start, 2, "decode_first", "rule 'starts'"),
    # Too many tokens for the later requests: a running one or a newcomer gets more than the budget left.
    (asks_chunk_with_the_whole_budget, 2, "decode_first", "rule '(runs|starts)'"),
    (ignores_the_pool, 4, "decode_first", "rule 'starts'"),
    (keeps_no_blocks_for_the_decodes, 4, "decode_first", "rule 'starts'"),
    (never_preempts, 6, "decode_first", "rule 'victims'"),
    (starts_while_someone_gives_way, 6, "decode_first", "rule 'starts'"),
    (restarts_with_the_prompt_alone, 6, "decode_first", "rule 'starts'"),
    (counts_shared_blocks_as_freed, 7, "decode_first", "rule 'victims'"),
    (one_token_once_it_has_output, 7, "prefill_first", "rule 'runs'"),
    (takes_the_decodes_blocks, 7, "prefill_first", "rule 'starts'"),
    # The decodes take budget before the starts, or before the running prompts: either is named.
    (decode_first_always, 7, "prefill_first", "rule '(starts|runs)'"),
])
def test_a_wrong_plan_fails_the_rule_it_breaks(wrong, lesson, order, rule):
    with pytest.raises(AssertionError, match=rule):
        check_the_contract(wrong, lesson, order)


@pytest.mark.parametrize("lesson", [2, 4, 6, 7])
def test_a_lesson_02_plan_passes_lesson_02_alone(lesson):
    if lesson == 2:
        check_the_contract(lesson_02_plan, 2)
    else:
        with pytest.raises(AssertionError, match=r"This step needs what lesson 0[4-7] adds"):
            check_the_contract(lesson_02_plan, lesson, "prefill_first" if lesson == 7 else "decode_first")


@pytest.mark.parametrize("passing", ["never", "always", "safe"])
def test_passing_over_is_the_learners_choice(passing):
    check_the_contract(partial(lesson_02_plan, passing=passing), 2)


def test_passing_over_whoever_fits_fails_on_the_delay():
    with pytest.raises(AssertionError, match="rule 'delay': passing a request over may delay its first token"):
        check_nobody_waits_much_longer(partial(lesson_02_plan, passing="always"))


def test_passing_over_with_care_keeps_the_delay():
    check_nobody_waits_much_longer(partial(lesson_02_plan, passing="safe"))


def test_the_engine_runs_minicbs_plan_where_yours_has_not_grown_saying_so(capsys):
    check_the_engine_runs_yours(lesson_02_plan, "decode_first, preempting", 2)
    out = capsys.readouterr().out
    assert "does not yet do what lesson 04 adds" in out and "does not yet do what lesson 06 adds" in out, out


@pytest.mark.parametrize("wrong, name, lesson", [(ignores_the_pool, "decode_first, preempting", 4),
                                                 (never_preempts, "decode_first, preempting", 6),
                                                 (takes_the_decodes_blocks, "prefill_first, chunked", 7)])
def test_the_engine_refuses_a_wrong_plan_with_its_rule(wrong, name, lesson):
    with pytest.raises(Failed, match="the engine runs your plan .* rule '"):
        check_the_engine_runs_yours(wrong, name, lesson)


def test_a_lesson_02_plan_runs_lesson_02_top_to_bottom(tmp_path, monkeypatch):
    """Lesson 02 needs nothing its own task does not teach: a checkout whose plan_step knows lesson 02's rules alone
    runs the lesson with that plan in every step, and no note says minicb's plan stood in."""
    import inspect
    import shutil

    import nbformat
    from nbclient import NotebookClient

    from minicb.course import REPO_ROOT

    for name in ("exercises", "solutions", "notebooks"):
        shutil.copytree(REPO_ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.ipynb"))
    (tmp_path / "minicb").symlink_to(REPO_ROOT / "minicb")
    (tmp_path / "exercises" / "lesson02_continuous.py").write_text(
        "from minicb.scheduler.plan import StepPlan, StepState\n\n\n" + inspect.getsource(lesson_02_plan)
        .replace("def lesson_02_plan", "def plan_step"))
    monkeypatch.setenv("MINICB_IMPL", "exercises")
    nb = nbformat.read(REPO_ROOT / "notebooks" / "02_continuous_batching.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=False,
                   resources={"metadata": {"path": str(tmp_path / "notebooks")}}).execute()
    said = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "plan_step (yours)" in said, said
    assert "does not yet do what lesson" not in said and "not implemented yet: Lesson 02" not in said, said
