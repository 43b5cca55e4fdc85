"""Lesson 07: scheduling for latency targets. minicb.slo holds the problem: a bursty workload with a
few long documents, arriving faster than the default configuration serves, and an SLO (p99 TTFT,
p99 inter-token latency, and at most a tenth of the requests turned away).

Task 1  slo_config   pytest tests/exercises -k lesson07_task1

The simulator grades it: `minicb.slo.grade_slo(slo_config())`.
"""
from __future__ import annotations


def slo_config() -> dict:
    """EngineConfig overrides that meet minicb.slo.SloTarget() on minicb.slo.slo_workload(). The
    knobs that matter: max_num_seqs, max_num_batched_tokens, enable_chunked_prefill,
    long_prefill_token_threshold, schedule_priority, max_waiting, max_queue_delay_s."""
    raise NotImplementedError("Lesson 07, task 1: slo_config: a configuration that meets the SLO. "
                              "Check it with: pytest tests/exercises -k lesson07_task1")
