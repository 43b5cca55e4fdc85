"""SchedulerBase: what both schedulers share: the waiting queue, admission control, aborts and the KV pool.
Lesson 07b sets the admission limits (max_waiting, max_queue_delay_s)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, MutableSequence
from typing import TYPE_CHECKING

from minicb.kv.block_manager import BlockManager
from minicb.scheduler.request import Request, RequestStatus

if TYPE_CHECKING:
    from minicb.config import EngineConfig
    from minicb.scheduler.output import SchedulerOutput
    from minicb.scheduler.output_processor import OutputProcessor


class SchedulerBase(ABC):
    streams_tokens: bool   # True: new tokens go back every step; False: only with the result

    def __init__(self, config: EngineConfig, kv: BlockManager, outputs: OutputProcessor,
                 clock: Callable[[], float]):
        self.config, self.kv, self.outputs, self.clock = config, kv, outputs, clock
        self.waiting: deque[Request] = deque()
        self.requests: dict[str, Request] = {}   # by id: queued, running or swapped
        self.num_arrivals = 0   # breaks ties of equal arrival times

    @abstractmethod
    def schedule(self) -> SchedulerOutput:
        """This step's decision; allocates the KV slots it needs."""

    @abstractmethod
    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int | None],
                           now: float) -> list[Request]:
        """sampled: each next token by request id (None: it failed). Returns the requests whose results go
        back now."""

    @abstractmethod
    def has_unfinished(self) -> bool: ...

    def reserve_tokens(self, request: Request) -> int:
        """KV slots a request must reserve to start, beyond its prompt."""
        return 0

    @abstractmethod
    def holding_kv(self) -> list[Request]:
        """Requests holding KV blocks, on the device or swapped out."""

    @abstractmethod
    def _drop(self, request: Request) -> None:
        """Remove an unfinished request from wherever it is and free what it holds."""

    def _place(self, queue: MutableSequence[Request], request: Request) -> None:
        """At the end of queue, unless a policy orders it."""
        queue.append(request)

    def _enqueue(self, request: Request) -> None:
        self.requests[request.request_id] = request
        self._place(self.waiting, request)

    def _stamp_first_step(self, out: SchedulerOutput, now: float) -> None:
        for chunk in out.chunks:
            metrics = self.requests[chunk.request_id].metrics
            if metrics.scheduled_time is None:
                metrics.scheduled_time = now

    def _release(self, done: Iterable[Request], now: float) -> None:
        for req in done:
            req.metrics.finished_time = now   # when the user gets the result (static batching delays it)
            self.requests.pop(req.request_id, None)

    def _queue_with(self, request: Request) -> list[Request]:
        queue = list(self.waiting)
        self._place(queue, request)
        return queue

    @abstractmethod
    def startable_next_step(self, queue: list[Request]) -> int:
        """How many requests from the head of queue the next step could start now."""

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_swapped(self) -> int:
        return 0   # static batching never swaps

    def add(self, request: Request) -> None:
        """Queue request, or REJECT it when the queue is full. The engine refuses a never-servable request
        earlier, at make_request."""
        request.arrival_index, self.num_arrivals = self.num_arrivals, self.num_arrivals + 1
        reason = self.why_not_now(request)
        if reason:
            request.status, request.reason = RequestStatus.REJECTED, reason
            self._release([request], self.clock())
        else:
            self._enqueue(request)

    def why_never_servable(self, req: Request) -> str | None:
        """None if an idle engine can serve req; else why not, and what to change."""
        kv, c = self.kv, self.config
        needed = kv.blocks_to_reserve(req.num_tokens + 1, self.reserve_tokens(req))
        if needed > kv.num_blocks:
            return (f"it needs {needed} KV blocks to start but the whole pool has {kv.num_blocks} "
                    f"({kv.num_blocks * kv.block_size} token slots); raise {c.pool_knob}, "
                    "or shorten the prompt")
        if req.num_tokens > c.max_num_batched_tokens and not c.enable_chunked_prefill:
            return (f"the prompt has {req.num_tokens} tokens, more than max_num_batched_tokens="
                    f"{c.max_num_batched_tokens}, and without chunked prefill a prompt runs in one step; "
                    "raise max_num_batched_tokens or set enable_chunked_prefill=True")
        return None

    def why_not_now(self, request: Request) -> str | None:
        """None, or why a full queue turns request away. Only the requests that the next step cannot start
        count as queued."""
        limit = self.config.max_waiting
        if limit is None:
            return None
        queue = self._queue_with(request)
        backlog = len(queue) - self.startable_next_step(queue)
        if backlog > limit:
            return (f"the queue is full (max_waiting={limit}: {backlog - 1} requests already wait beyond "
                    "what the next step can start); retry later, or raise max_waiting")
        return None

    def reject_stale(self, now: float) -> list[Request]:
        """REJECT and return the waiting requests that never started within max_queue_delay_s."""
        delay = self.config.max_queue_delay_s
        if delay is None:
            return []
        stale = [r for r in self.waiting
                 if r.metrics.scheduled_time is None and now - r.metrics.arrival_time > delay]
        for req in stale:
            self.waiting.remove(req)
            req.status = RequestStatus.REJECTED
            req.reason = f"not started within max_queue_delay_s={delay}; the server is overloaded"
        self._release(stale, now)
        return stale

    def abort(self, request: Request, reason: str = "aborted by the caller") -> None:
        """Drop request wherever it is and free its blocks; status FINISHED_ABORTED."""
        self._end(request, RequestStatus.FINISHED_ABORTED, reason)

    def fail(self, request: Request, reason: str) -> None:
        """As abort, but FINISHED_ERROR: the caller must not read it as an abort."""
        self._end(request, RequestStatus.FINISHED_ERROR, reason)

    def _end(self, request: Request, status: RequestStatus, reason: str) -> None:
        if request.status.finished:
            return
        self._drop(request)
        request.status, request.reason = status, reason
        self._release([request], self.clock())

    def check_invariants(self) -> None:
        """Assert the pool's ledger, and that each KV holder has slots for exactly its computed tokens."""
        self.kv.check_invariants()
        for req in self.holding_kv():
            held = self.kv.num_tokens.get(req.request_id)
            assert held == req.num_computed_tokens, (f"{req.request_id!r} holds KV slots for {held} tokens "
                                                     f"but has computed {req.num_computed_tokens}")
