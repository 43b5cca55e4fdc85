"""Lesson 02's graders catch plausible mistakes: each wrong step below must fail a check that names the
rule it breaks. They are written as a learner's first tries are, on the scheduler's own methods."""
from __future__ import annotations

import pytest
from _pytest.outcomes import Failed
from test_lesson02_continuous import (check_a_request_needs_a_seat, check_a_request_needs_its_blocks_and_leaves_keep_free,
                                      check_a_request_whose_tokens_do_not_fit_gets_nothing,
                                      check_each_running_request_gets_its_tokens_in_the_given_order,
                                      check_nobody_jumps_the_line, check_preempts_until_the_pool_holds_the_tokens,
                                      check_returns_none_when_everyone_started)

from minicb.scheduler.continuous import admit_waiting, schedule_running


def never_preempts(sched, step, requests):
    for req in requests:
        n = sched.chunk_size(req, step)
        if req in sched.running and n and sched.kv.can_append(req.request_id, n):
            sched.run(req, n, step)


def forgets_who_was_preempted(sched, step, requests):
    for req in requests:
        n = sched.chunk_size(req, step)
        if n == 0:
            continue
        while not sched.kv.can_append(req.request_id, n):
            if sched.make_room(step) is req:
                break
        else:
            sched.run(req, n, step)


def one_token_each(sched, step, requests):
    """Decodes need one token, so every request gets one: the budget is never asked."""
    for req in requests:
        if req not in sched.running:
            continue
        while not sched.kv.can_append(req.request_id, 1):
            if sched.make_room(step) is req:
                break
        else:
            sched.run(req, 1, step)


def runs_in_running_order(sched, step, requests):
    schedule_running(sched, step, list(sched.running))


@pytest.mark.parametrize("wrong,check,rule", [
    (never_preempts, check_preempts_until_the_pool_holds_the_tokens, "rule 3"),
    (forgets_who_was_preempted, check_preempts_until_the_pool_holds_the_tokens, "rule 1|rules 1 and 3"),
    (one_token_each, check_a_request_whose_tokens_do_not_fit_gets_nothing, "rule 2"),
    (runs_in_running_order, check_each_running_request_gets_its_tokens_in_the_given_order, "in the order given"),
])
def test_a_wrong_schedule_running_fails_the_rule_it_breaks(wrong, check, rule):
    with pytest.raises((AssertionError, Failed), match=rule):
        check(wrong)


def jumps_the_line(sched, step):
    """Starts whoever fits, in queue order: a later request may go before an earlier one that waits."""
    blocked = None
    for req in list(sched.waiting):
        n = sched.chunk_size(req, step)
        if n and sched.free_seats and sched.kv.can_allocate(n, keep_free=step.keep_free):
            sched.start(req, n, step)
        elif blocked is None:
            blocked = req
    return blocked


def ignores_keep_free(sched, step):
    while sched.waiting:
        req = sched.waiting[0]
        n = sched.chunk_size(req, step)
        if n == 0 or sched.free_seats == 0 or not sched.kv.can_allocate(n):
            return req
        sched.start(req, n, step)
    return None


def forgets_the_seats(sched, step):
    while sched.waiting:
        req = sched.waiting[0]
        n = sched.chunk_size(req, step)
        if n == 0 or not sched.kv.can_allocate(n, keep_free=step.keep_free):
            return req
        sched.start(req, n, step)
    return None


def returns_nothing_when_blocked(sched, step):
    admit_waiting(sched, step)
    return None


@pytest.mark.parametrize("wrong,check,rule", [
    (jumps_the_line, check_nobody_jumps_the_line, "first come, first served"),
    (ignores_keep_free, check_a_request_needs_its_blocks_and_leaves_keep_free, "keep_free"),
    (forgets_the_seats, check_a_request_needs_a_seat, "seats"),
    (returns_nothing_when_blocked, check_nobody_jumps_the_line, "return the request that could not start"),
    (lambda sched, step: sched.waiting[0] if sched.waiting else None, check_returns_none_when_everyone_started,
     "rule 3"),
])
def test_a_wrong_admit_waiting_fails_the_rule_it_breaks(wrong, check, rule):
    with pytest.raises((AssertionError, Failed), match=rule):
        check(wrong)
