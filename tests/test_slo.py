"""Lesson 07's SLO problem is a real one: the default configuration misses it, and chunked prefill
alone fixes the inter-token latency but not the time to first token under the overload."""
from __future__ import annotations

from minicb.slo import SloTarget, grade_slo, slo_workload


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


def test_a_configuration_that_serves_nobody_misses_the_slo():
    from minicb.slo import grade_slo

    # Without chunked prefill, a prompt over max_num_batched_tokens can never be served: every one is refused.
    report = grade_slo({"max_num_batched_tokens": 1})   # every prompt has 2 tokens or more
    assert report.served == 0 and report.rejected > 0 and not report.met and report.goodput_rps == 0
