"""Lesson 07: chunked prefill. How many of a request's uncomputed tokens run this step."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minicb.config import EngineConfig


def chunk_size(uncomputed: int, budget: int, step_is_empty: bool, config: EngineConfig) -> int:
    """How many of the `uncomputed` tokens run this step (0: none fit)."""
    if config.enable_chunked_prefill:
        cap = config.long_prefill_token_threshold or uncomputed
        return max(0, min(uncomputed, budget, cap))
    # Whole or not at all. One over the budget (a preempted request that grew) may fill an empty step,
    # so it cannot starve.
    return uncomputed if uncomputed <= budget or step_is_empty else 0
