"""Schedulers: which sequences run each step, and how many tokens each.
Both are SchedulerBase, so callers never know which one decides. Only this package writes a request's
progress (tests/test_single_writer.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from minicb.kv.block_manager import BlockManager
from minicb.scheduler.base import SchedulerBase
from minicb.scheduler.continuous import ContinuousScheduler, Policies
from minicb.scheduler.static import StaticScheduler

if TYPE_CHECKING:
    from minicb.config import EngineConfig
    from minicb.costs import PreemptionCost
    from minicb.scheduler.output_processor import OutputProcessor


def build_scheduler(config: EngineConfig, kv: BlockManager, parts: Policies, outputs: OutputProcessor,
                    clock: Callable[[], float], preemption_cost: PreemptionCost | None) -> SchedulerBase:
    if config.batching == "continuous":
        return ContinuousScheduler(config, kv, parts, outputs, clock, preemption_cost)
    return StaticScheduler(config, kv, outputs, clock)
