"""Schedulers decide, before every forward step, which sequences run and how many tokens each.

Both schedulers (continuous.py, static.py) are SchedulerBase (base.py), so the engine, the batch builder,
the runner and the simulator never know which one is deciding. A scheduler owns the KV cache's block
manager and writes a request's progress; only this package does (tests/test_single_writer.py).
"""
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
