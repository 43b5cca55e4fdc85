"""The seam's checks (minicb/course/contracts.py): each refuses a wrong answer of a learner's part with its rule,
and minicb's own parts go in unwrapped. The graders (tests/graders) fail plausible wrong parts through the same
checks; this names each refusal once, on the smallest case."""
from __future__ import annotations

import pytest

from minicb.course.contracts import check_plan, checked
from minicb.kv.eviction import CachedBlock
from minicb.parts import EngineParts
from minicb.scheduler.plan import StepPlan, StepState
from minicb.scheduler.request import RequestView


def view(request_id: str, priority: int = 0, arrival: int = 0) -> RequestView:
    return RequestView(request_id, priority, float(arrival), arrival, 4, 1, 5, 8)   # a decode


OLD, NEW, URGENT = view("old"), view("new", arrival=1), view("urgent", priority=-1, arrival=2)
STATE = StepState(running=(OLD, NEW), line=(), free_seats=2, token_budget=8, free_blocks=4, order="decode_first",
                  chunk=lambda rid, budget, empty: min(1, budget), blocks_to_grow=lambda rid, n: 0,
                  blocks_to_start=lambda rid, n: 1, blocks_freed_by=lambda rid: 1,
                  choose_victim=lambda running: running[-1].request_id)


@pytest.mark.parametrize("plan,rule", [
    (None, "it must return a StepPlan"),
    (StepPlan(runs={"old": 0}), "leave out a request that gets none"),
    (StepPlan(victims=("new",)), "it is a list of request_ids"),
    (StepPlan(runs={"old": 1, "new": 1}, victims=["new"]), "both run and give way"),
    (StepPlan(runs={"old": 1}), "rule 'runs'"),
])
def test_a_plan_is_refused_by_the_rule_it_breaks(plan, rule):
    with pytest.raises(ValueError, match=rule):
        check_plan(STATE, plan)


@pytest.mark.parametrize("part,answer,args,rule", [
    ("chunk_size", 3, (2, 8, True, None), "chunk_size gave 3 tokens to a request with 2 uncomputed"),
    ("chunk_size", True, (2, 8, True, None), "a chunk is an int"),
    ("choose_victim", "gone", ((OLD, NEW),), "the request_id of one of the running requests"),
    ("choose_victim", "urgent", ((OLD, URGENT),), "a victim never has a lower priority value"),
    ("choose_victim", "old", ((OLD, NEW),), "the first in serving order, while others run"),
    ("should_swap", 1, (OLD, "swap", None), "it must return True \\(swap\\) or False"),
    ("longest_cached_prefix", 2, ([b"a", b"b"], {b"a": 0}), "the leading hashes that are all in `cached`"),
    ("choose_eviction", 9, ((CachedBlock(3, 0, 0, 1),),), "choose_eviction returned 9"),
])
def test_each_part_is_refused_at_the_seam_by_its_rule(part, answer, args, rule):
    wrapped = getattr(checked(**{part: lambda *_: answer}), part)
    with pytest.raises(ValueError, match=rule):
        wrapped(*args)


def test_minicbs_own_parts_go_in_unwrapped_and_a_right_answer_passes():
    own = EngineParts()
    assert all(getattr(checked(), name) is getattr(own, name) for name in ("plan_step", "chunk_size", "choose_victim"))
    assert checked(choose_victim=lambda running: "new").choose_victim((OLD, NEW)) == "new"
