"""Lesson 07's SLO problem is a real one: the default configuration misses it, and chunked prefill
alone fixes the inter-token latency but not the time to first token under the overload. And goodput,
the course's one definition, on requests built by hand."""
from __future__ import annotations

import pytest

from minicb.course.slo import grade_slo, slo_workload
from minicb.scheduler.request import CompletionOutput, RequestMetrics, RequestOutput
from minicb.stats.goodput import RequestSlo, SloTarget, goodput


def test_the_default_configuration_misses_both_targets():
    report = grade_slo({}, workload=slo_workload())
    target = SloTarget()
    assert not report.met and report.rejected == 0
    assert report.ttft_p99_s > target.ttft_p99_s and report.itl_p99_s > target.itl_p99_s


def test_chunked_prefill_alone_fixes_latency_between_tokens_not_the_queue():
    report = grade_slo(dict(enable_chunked_prefill=True, max_num_batched_tokens=128, max_num_seqs=64))
    target = SloTarget()
    assert report.itl_p99_s <= target.itl_p99_s
    assert report.ttft_p99_s > target.ttft_p99_s and not report.met


def test_a_configuration_that_can_serve_nobody_is_refused_naming_the_fix():
    from minicb.course.slo import grade_slo

    # Without chunked prefill, a prompt over max_num_batched_tokens can never be served: the engine refuses
    # the first one when it is added, saying what to change, instead of grading a run that serves nobody.
    with pytest.raises(ValueError, match="can never serve the request: the prompt has .* more than "
                                         "max_num_batched_tokens=1.*set enable_chunked_prefill=True"):
        grade_slo({"max_num_batched_tokens": 1})   # every prompt has 2 tokens or more


# --- goodput on constructed requests, counted by hand -----------------------------------------------------

def served(arrival: float, token_times: list[float], finish_reason: str = "stop") -> RequestOutput:
    """A finished request whose tokens came at token_times (the first one is its first token)."""
    metrics = RequestMetrics(arrival, first_token_time=token_times[0] if token_times else None,
                             token_times=token_times, finished_time=token_times[-1] if token_times else arrival)
    return RequestOutput("r", None, [1], [CompletionOutput("", [0] * len(token_times), finish_reason)], True, metrics)


# (TTFT; longest gap; TPOT; e2e) of each, by hand: SMOOTH (0.2; 0.02; 0.02; 0.24), STALLED (0.1; 0.3; 0.11; 0.43),
# LATE (1.5; 0.01; 0.01; 1.52), ONE_TOKEN (0.5; none; none; 0.5); REJECTED never counts. Span: 0 to 2.5 s.
SMOOTH = served(0.0, [0.2, 0.22, 0.24])
STALLED = served(0.5, [0.6, 0.61, 0.91, 0.93])
LATE = served(0.5, [2.0, 2.01, 2.02])
ONE_TOKEN = served(2.0, [2.5])
REJECTED = served(1.0, [], finish_reason="rejected")
RUN = [SMOOTH, STALLED, LATE, ONE_TOKEN, REJECTED]


@pytest.mark.parametrize("slo,good", [
    (RequestSlo(ttft_s=1.0, itl_s=0.05), 2),     # SMOOTH and ONE_TOKEN: STALLED's 0.3 s gap misses, LATE's TTFT
    (SloTarget(), 2),                            # the SLO's own targets, per request: the same
    (RequestSlo(ttft_s=1.0, tpot_s=0.15), 3),    # on the mean gap STALLED passes: a stall TPOT hides
    (RequestSlo(e2e_s=2.0), 4),                  # lesson 07's overload target: every served one ends within 2 s
    (RequestSlo(e2e_s=0.45), 2),                 # SMOOTH and STALLED
    (RequestSlo(ttft_s=0.15, e2e_s=2.0), 1),     # every target: only STALLED's first token came within 0.15 s
])
def test_goodput_counts_served_requests_that_meet_every_target(slo, good):
    assert goodput(RUN, slo) == (good, pytest.approx(good / 2.5))


def test_an_slo_names_its_targets_and_refuses_to_have_none():
    assert RequestSlo(ttft_s=1.0, itl_s=0.05).describe() == "TTFT <= 1 s and every inter-token gap <= 50 ms"
    assert SloTarget().per_request() == RequestSlo(ttft_s=1.0, itl_s=0.05)
    with pytest.raises(ValueError, match="at least one target"):
        RequestSlo()
    with pytest.raises(ValueError, match="tpot_s must be a positive"):
        RequestSlo(tpot_s=0.0)
