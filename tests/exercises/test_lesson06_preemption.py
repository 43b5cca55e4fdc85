"""Lesson 06's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions).

Each decision is checked on its contract, on random cases (hypothesis shrinks a failure to the smallest
case, which the message describes), and in the engine, which must finish every request with the tokens
minicb's own parts give. tests/graders/test_lesson06_controls.py checks that wrong decisions fail here."""
from __future__ import annotations

import held_out
import pytest
from grading import answer, contract_test, decisions, described, require, run_both
from hypothesis import example
from hypothesis import strategies as st

from minicb import course
from minicb.costs import PreemptionCost
from minicb.course.victims import TAIL_BOUND, TAIL_SHARE, TARGET, compare_victim_policies
from minicb.parts import EngineParts
from minicb.scheduler.request import RequestView

mine = course.lesson("lesson06_preemption")
PRESSURE = [(4, 12, 0), (5, 9, 1), (7, 14, 0), (3, 6, 1), (6, 11, 0), (4, 8, 1)]
CONFIGS = [dict(), dict(scheduling_policy="priority"), dict(preemption_mode="swap", swap_space_mb=1)]


@st.composite
def running_views(draw, max_size: int = 6) -> tuple[RequestView, ...]:
    """Running requests: few priorities and arrival times, so that ties are common."""
    n = draw(st.integers(1, max_size))
    views = []
    for i in range(n):
        prompt, output = draw(st.integers(1, 40)), draw(st.integers(0, 20))
        views.append(RequestView(request_id="abcdefgh"[i], priority=draw(st.integers(0, 2)),
                                 arrival_time=float(draw(st.integers(0, 3))), arrival_index=i,
                                 num_prompt_tokens=prompt, num_output_tokens=output,
                                 num_computed_tokens=draw(st.integers(0, prompt + output)), max_tokens=output + 8))
    return tuple(draw(st.permutations(views)))


def check_choose_victim(choose, running: tuple[RequestView, ...]) -> None:
    """choose_victim's contract on one case, each rule by name."""
    case = described(running)
    victim = answer("choose_victim returns the request_id of a running request", choose, running)
    ids = [v.request_id for v in running]
    assert isinstance(victim, str) and victim in ids, (
        f"rule: it returns the request_id of one of `running` (a str among {ids}); it returned {victim!r}. Case: {case}")
    chosen = next(v for v in running if v.request_id == victim)
    least_urgent = max(v.priority for v in running)
    assert chosen.priority == least_urgent, (
        f"rule: the victim is never more urgent than another running request; {victim} has priority "
        f"{chosen.priority} while one with priority {least_urgent} runs. Case: {case}")
    first = min(running, key=lambda v: v.rank)
    assert len(running) == 1 or victim != first.request_id, (
        f"rule: while others run, the victim is never the first in serving order; {victim} is (priority, arrival, "
        f"arrival_index = {first.rank}). Case: {case}")
    again = answer("choose_victim returns the request_id of a running request", choose, tuple(reversed(running)))
    assert again == victim, (
        f"rule: it depends on the views alone: given them in reverse order it chose {again!r}, not {victim!r}. "
        f"Case: {case}")


# "b" arrived first by the clock but was queued second (arrival_time is the caller's): serving order reads the time.
LATE_INDEX = (RequestView("a", 0, 1.0, 0, 4, 1, 3, 9), RequestView("b", 0, 0.0, 1, 4, 1, 5, 9))


def choose_victim_contract(choose):
    return example(running=LATE_INDEX)(contract_test(choose, check_choose_victim, 120, running=running_views()))


test_lesson06_task1_the_victims_contract_on_random_cases = choose_victim_contract(lambda: mine.choose_victim)


class Recording:
    """A decision that notes each answer, to compare with what the engine did."""

    def __init__(self, decide):
        self.decide, self.answers = decide, []

    def __call__(self, *args):
        result = self.decide(*args)
        self.answers.append(result)
        return result


def check_choose_victim_in_the_engine(choose) -> None:
    """Under pressure, in each configuration: every request finishes with minicb's tokens, and the engine
    preempts exactly the victims chosen."""
    for config in CONFIGS:
        workload = [(n, m, p if config.get("scheduling_policy") else 0) for n, m, p in PRESSURE]
        recording = Recording(choose)
        yours, reference = run_both(EngineParts(choose_victim=recording), workload, max_num_seqs=6, num_blocks=10,
                                    block_size=4, max_model_len=40, **config)
        assert any(decisions(reference, "preempted")), "the workload must put the pool under pressure"
        preempted = [rid for step in decisions(yours, "preempted") for rid in step]
        assert preempted == recording.answers, (
            f"{config or 'fcfs, recompute'}: the engine preempted {preempted}, your choose_victim chose "
            f"{recording.answers}")


def test_lesson06_task1_the_engine_runs_your_victims_under_pressure():
    check_choose_victim_in_the_engine(mine.choose_victim)


COST = PreemptionCost(recompute_fixed=1e-3, recompute_per_token=1e-4, recompute_per_token_sq=0.0,
                      swap_fixed=5e-3, swap_per_token=2e-5)   # equal at 50 tokens: 0.001 + 0.005 = 0.005 + 0.001


@st.composite
def victims(draw) -> RequestView:
    prompt, output = draw(st.integers(1, 600)), draw(st.integers(0, 300))
    return RequestView("v", 0, 0.0, 0, prompt, output, draw(st.integers(0, prompt + output)), output + 1)


@st.composite
def costs(draw) -> PreemptionCost:
    """Prices from small integers (in ms), so that exact ties between the two happen."""
    ms = st.integers(0, 8).map(lambda x: x * 1e-3)
    return PreemptionCost(draw(ms), draw(ms) / 64, draw(st.sampled_from([0.0, 1e-6, 4e-6])), draw(ms), draw(ms) / 64)


def check_should_swap(decide, victim: RequestView, mode: str, cost: PreemptionCost | None) -> None:
    if mode == "auto" and cost is None:
        return   # the engine always has a cost model under "auto"
    t = victim.num_computed_tokens
    rule = ("rule: under 'recompute' and 'swap' the engine has no cost model (cost is None) and the mode decides "
            "alone" if cost is None else "should_swap reads the victim, the mode and the cost model")
    swap = answer(f"{rule} (preemption_mode={mode!r}, cost={cost})", decide, victim, mode, cost)
    case = (f"preemption_mode={mode!r}, a victim with {t} computed tokens of {victim.num_tokens}; " +
            ("no cost model (cost is None)" if cost is None else
             f"swap costs {cost.swap_s(t) * 1e3:.4g} ms, recompute {cost.recompute_s(t) * 1e3:.4g} ms ({cost})"))
    assert isinstance(swap, bool), f"rule: it returns a bool (True: swap), not {swap!r}. Case: {case}"
    if mode != "auto":
        assert swap is (mode == "swap"), f"rule: {mode!r} {'always' if mode == 'swap' else 'never'} swaps. Case: {case}"
        return
    cheaper = cost.swap_s(t) < cost.recompute_s(t)
    assert swap is cheaper, (
        f"rule: 'auto' swaps exactly when swapping the victim's computed tokens costs strictly less than "
        f"recomputing them; it {'swapped' if swap else 'recomputed'}. Case: {case}")


def should_swap_contract(decide):
    contract = contract_test(decide, check_should_swap, 200, victim=victims(),
                             mode=st.sampled_from(["recompute", "swap", "auto"]), cost=st.none() | costs())
    # Tried first: each mode the engine runs without a cost model, and a victim that has computed nothing.
    for mode in ("swap", "recompute"):
        contract = example(victim=RequestView("v", 0, 0.0, 0, 30, 2, 31, 9), mode=mode, cost=None)(contract)
    return example(victim=RequestView("v", 0, 0.0, 0, 30, 0, 0, 9), mode="auto", cost=COST)(contract)


test_lesson06_task1_the_swap_choices_contract_on_random_cases = should_swap_contract(lambda: mine.should_swap)


@pytest.mark.parametrize("tokens,swap", [(1, False), (49, False), (50, False), (51, True), (4000, True)])
def test_lesson06_task1_auto_swaps_when_strictly_cheaper(tokens, swap):
    victim = RequestView("v", 0, 0.0, 0, tokens, 1, tokens, 8)
    check_should_swap(mine.should_swap, victim, "auto", COST)


@pytest.mark.parametrize("cost,swapping", [(PreemptionCost(1.0, 0, 0, 0, 0), True),    # recompute dear: swap
                                           (PreemptionCost(0, 0, 0, 1.0, 0), False)])  # swap dear: recompute
def test_lesson06_task1_the_engine_follows_your_swap_choice(cost, swapping):
    fcfs = [(n, m, 0) for n, m, _ in PRESSURE]
    yours, _ = run_both(EngineParts(should_swap=mine.should_swap), fcfs, max_num_seqs=6, num_blocks=10,
                        block_size=4, max_model_len=40, preemption_mode="auto", preemption_cost=cost,
                        swap_space_mb=1)
    preempted, swapped = decisions(yours, "preempted"), decisions(yours, "swapped_out")
    assert any(preempted) and swapped == (preempted if swapping else [[] for _ in preempted]), (
        f"'auto' should {'swap' if swapping else 'recompute'} every victim with these costs")


def test_lesson06_task1_the_engine_follows_your_swap_choice_without_a_cost_model():
    """Under "swap" the engine has no cost model to give (under "recompute" it keeps no swap pool, and never asks)."""
    fcfs = [(n, m, 0) for n, m, _ in PRESSURE]
    yours, _ = run_both(EngineParts(should_swap=mine.should_swap), fcfs, max_num_seqs=6, num_blocks=10,
                        block_size=4, max_model_len=40, preemption_mode="swap", swap_space_mb=1)
    preempted, swapped = decisions(yours, "preempted"), decisions(yours, "swapped_out")
    assert any(preempted) and swapped == preempted, "preemption_mode='swap' swaps every victim"


def check_meets_the_latency_targets(policy) -> str:
    """The policy's mean end-to-end latency and its slowest requests' on the held-out workloads, as shares of
    latest-first's."""
    result = compare_victim_policies(policy, held_out.VICTIM_POLICY)
    per_workload = "".join(f"\n  {held_out.place(i, held_out.VICTIM_POLICY)}: yours {y}, minicb's {m}"
                           for i, (y, m) in enumerate(result.pairs))   # a line each: readable in pytest's report
    require(result.mean_share <= TARGET,
            f"rule: the mean end-to-end latency must be at most {TARGET:.0%} of minicb's latest-first; yours is "
            f"{result.mean_share:.1%} of it on the {len(result.pairs)} held-out workloads:{per_workload}")
    require(result.tail_share <= TAIL_BOUND,
            f"rule: the slowest {TAIL_SHARE:.0%} of the requests must wait on average at most {TAIL_BOUND:.0%} as "
            f"long as under latest-first, averaged over the workloads; yours wait {result.tail_share:.1%} as long, "
            f"with the mean at {result.mean_share:.1%}: the mean was bought with the tail. The held-out "
            f"workloads:{per_workload}")
    return str(result)


def test_lesson06_task2_your_policy_lowers_the_mean_latency_and_keeps_the_tail(record_property):
    margin = check_meets_the_latency_targets(mine.choose_victim_for_latency)
    record_property("margin", f"{margin} on the held-out workloads")
