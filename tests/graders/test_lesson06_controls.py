"""Lesson 06's graders catch plausible mistakes: each wrong decision below must fail the rule it breaks."""
from __future__ import annotations

import pytest
from test_lesson06_preemption import (check_choose_victim_in_the_engine, check_meets_the_latency_targets,
                                      choose_victim_contract, should_swap_contract)

from minicb.course.contracts import may_give_way
from minicb.scheduler.preemption import choose_victim, should_swap


def oldest_first(running):
    return min(running, key=lambda r: r.rank).request_id


def latest_arrival_whatever_its_priority(running):
    return max(running, key=lambda r: (r.arrival_time, r.arrival_index)).request_id


def last_in_the_list(running):
    return running[-1].request_id


def the_view_itself(running):
    return max(running, key=lambda r: r.rank)


def most_computed_first(running):
    """Tempting (it frees the most blocks), but it may pick the oldest request, which then never finishes."""
    least_urgent = max(r.priority for r in running)
    return max((r for r in running if r.priority == least_urgent), key=lambda r: r.num_computed_tokens).request_id


def latest_queued_among_the_least_urgent(running):
    """Serving order read as (priority, arrival_index): the queue's order, not the arrival time's."""
    least_urgent = max(r.priority for r in running)
    return max((r for r in running if r.priority == least_urgent), key=lambda r: r.arrival_index).request_id


@pytest.mark.parametrize("wrong,rule", [
    (oldest_first, "never the first in serving order"),
    (latest_queued_among_the_least_urgent, "never the first in serving order"),
    (latest_arrival_whatever_its_priority, "never more urgent than another running request"),
    (last_in_the_list, "depends on the views alone|never the first|never more urgent"),
    (the_view_itself, "returns the request_id"),
    (most_computed_first, "never the first in serving order"),
])
def test_a_wrong_choose_victim_fails_its_contract(wrong, rule):
    with pytest.raises(AssertionError, match=rule):
        choose_victim_contract(lambda: wrong)()


def test_the_engine_refuses_a_victim_that_breaks_the_contract():
    with pytest.raises(ValueError, match="the first in serving order"):
        check_choose_victim_in_the_engine(oldest_first)


def swaps_on_a_tie(victim, mode, cost):
    if mode != "auto":
        return mode == "swap"
    return cost.swap_s(victim.num_computed_tokens) <= cost.recompute_s(victim.num_computed_tokens)


def prices_all_its_tokens(victim, mode, cost):
    """The victim's whole length, not what it has computed (a preempted prefill has computed less)."""
    if mode != "auto":
        return mode == "swap"
    return cost.swap_s(victim.num_tokens) < cost.recompute_s(victim.num_tokens)


def forgets_the_square_term(victim, mode, cost):
    if mode != "auto":
        return mode == "swap"
    t = victim.num_computed_tokens
    return cost.swap_s(t) < cost.recompute_fixed + cost.recompute_per_token * t


def auto_in_every_mode(victim, mode, cost):
    return should_swap(victim, "auto", cost)


def prices_before_reading_the_mode(victim, mode, cost):
    """Works out the cheaper way first, and only then looks at the mode."""
    cheaper = cost.swap_s(victim.num_computed_tokens) < cost.recompute_s(victim.num_computed_tokens)
    return cheaper if mode == "auto" else mode == "swap"


@pytest.mark.parametrize("wrong,rule", [
    (prices_before_reading_the_mode, r"rule: under 'recompute' and 'swap' the engine has no cost model \(cost is "
                                     r"None\) and the mode decides alone \(.*AttributeError"),
    (swaps_on_a_tie, "strictly less"),
    (prices_all_its_tokens, "strictly less"),
    (forgets_the_square_term, "strictly less"),
    (auto_in_every_mode, "always swaps|never swaps|the mode decides alone"),
    (lambda victim, mode, cost: int(should_swap(victim, mode, cost)), "returns a bool"),
])
def test_a_wrong_should_swap_fails_its_contract(wrong, rule):
    with pytest.raises(AssertionError, match=rule):
        should_swap_contract(lambda: wrong)()


def test_the_references_pass():
    choose_victim_contract(lambda: choose_victim)()
    should_swap_contract(lambda: should_swap)()


def least_computed_first(running):
    """Within the contract, and it loses the least work, but it barely moves the mean."""
    return min(may_give_way(running), key=lambda r: (r.num_computed_tokens, r.rank)).request_id


def fewest_tokens_left(running):
    """Shortest-remaining-first turned around: those nearest their cap give way."""
    return min(may_give_way(running), key=lambda r: (r.max_tokens - r.num_output_tokens, r.rank)).request_id


def longest_request(running):
    """The longest request by prompt and cap gives way: a cap far from its end moves the mean little, and the
    same long requests keep giving way."""
    return max(may_give_way(running), key=lambda r: (r.num_prompt_tokens + r.max_tokens, r.rank)).request_id


@pytest.mark.parametrize("wrong", [choose_victim, least_computed_first, fewest_tokens_left, longest_request])
def test_a_policy_that_does_not_lower_the_mean_fails_the_design_task(wrong):
    with pytest.raises(AssertionError, match="mean end-to-end latency must be at most"):
        check_meets_the_latency_targets(wrong)


def most_tokens_left(running):
    """Shortest-remaining-time-first, by the cap: the one with the most tokens it may still write gives way. It
    lowers the mean, and keeps preempting the same long requests, which end last: the slowest 2% wait about
    1.14x as long as under latest-first."""
    return max(may_give_way(running), key=lambda r: (r.max_tokens - r.num_output_tokens, r.rank)).request_id


def weighs_the_loss_one_for_one(running):
    """The above, less a token for each one the victim computed: its tail comes within two points of the bound on
    the practice seeds, and it still preempts the long requests too often for the held-out tail."""
    return max(may_give_way(running), key=lambda r: (r.max_tokens - r.num_output_tokens - r.num_computed_tokens,
                                                     r.rank)).request_id


@pytest.mark.parametrize("wrong", [most_tokens_left, weighs_the_loss_one_for_one])
def test_a_policy_that_buys_the_mean_with_the_tail_fails_the_design_task(wrong):
    with pytest.raises(AssertionError, match="the mean was bought with the tail"):
        check_meets_the_latency_targets(wrong)


def test_a_design_that_breaks_the_contract_is_refused_in_the_engine():
    with pytest.raises(ValueError, match="the first in serving order"):
        check_meets_the_latency_targets(oldest_first)
