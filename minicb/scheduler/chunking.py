"""Lesson 07: how many of a request's uncomputed tokens run this step.

A decode needs one token. A prompt (or a preempted request's recompute) needs many: without
chunked prefill it runs whole or waits, so one long prompt can take a whole step and stall every
decode behind it. With enable_chunked_prefill it runs in pieces that fit what is left of the step's
max_num_batched_tokens, each at most long_prefill_token_threshold tokens (0: no cap), so decodes
keep flowing while long documents prefill.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minicb.config import EngineConfig


def chunk_size(uncomputed: int, budget: int, step_is_empty: bool, config: EngineConfig) -> int:
    """The tokens of a request that run this step (0: none fit), of its `uncomputed` ones."""
    if config.enable_chunked_prefill:
        cap = config.long_prefill_token_threshold or uncomputed
        return max(0, min(uncomputed, budget, cap))
    # Whole or not at all; a request bigger than the budget (a preempted one that grew past it) may
    # fill an otherwise empty step, so that it cannot starve.
    return uncomputed if uncomputed <= budget or step_is_empty else 0
