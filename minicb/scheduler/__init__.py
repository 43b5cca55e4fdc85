"""Schedulers decide, before every forward step, which sequences run and how many tokens each.

Both schedulers (continuous.py, static.py) meet the Scheduler protocol, so the engine, the batch
builder, the runner and the simulator never know which one is deciding. A scheduler owns the KV
cache's block manager and is the only writer of a request's state: its status, its num_computed_tokens
and its metrics change only in this package (update_from_output, preempt, start, abort, rejection), and
tests/test_single_writer.py fails on any assignment to them anywhere else.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

from minicb.kv.block_manager import BlockManager, BlockUsage
from minicb.scheduler.continuous import ContinuousScheduler, Policies
from minicb.scheduler.output import SchedulerOutput
from minicb.scheduler.request import Request
from minicb.scheduler.static import StaticScheduler

if TYPE_CHECKING:
    from minicb.config import EngineConfig
    from minicb.costs import PreemptionCost
    from minicb.scheduler.output_processor import OutputProcessor


@runtime_checkable
class Scheduler(Protocol):
    streams_tokens: bool   # whether new tokens go back every step, or only with the result

    def add(self, request: Request) -> None:
        """Queue a request, or turn it away at once (status REJECTED, reason set)."""

    def why_never_servable(self, request: Request) -> str | None:
        """Why the engine could never serve this request, and what to change (None: it can)."""

    def abort(self, request: Request, reason: str = "aborted by the caller") -> None:
        """Drop a request wherever it is, freeing its blocks (status FINISHED_ABORTED, `reason` set)."""

    def fail(self, request: Request, reason: str) -> None:
        """As abort, but the request failed (status FINISHED_ERROR): its caller must not read it as an abort."""

    def reject_stale(self, now: float) -> list[Request]:
        """Turn away the requests that waited past max_queue_delay_s without starting."""

    def schedule(self) -> SchedulerOutput:
        """This step's decision; allocates the KV slots it needs."""

    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int | None],
                           now: float) -> list[Request]:
        """After the step: record its results (a next token, or None, by request id); return the requests
        whose results go back now."""

    def has_unfinished(self) -> bool: ...

    @property
    def num_waiting(self) -> int: ...

    @property
    def num_running(self) -> int: ...

    @property
    def num_swapped(self) -> int: ...

    def kv_usage(self) -> BlockUsage: ...

    def kv_block_map(self) -> list[tuple[str | None, int, int]]: ...

    def check_invariants(self) -> None: ...


def build_scheduler(config: EngineConfig, kv: BlockManager, parts: Policies, outputs: OutputProcessor,
                    clock: Callable[[], float], preemption_cost: PreemptionCost | None) -> Scheduler:
    if config.batching == "continuous":
        return ContinuousScheduler(config, kv, parts, outputs, clock, preemption_cost)
    return StaticScheduler(config, kv, outputs, clock)
