"""What both schedulers share: the waiting queue, admission control (who is turned away, and why),
aborts, and the KV pool they own."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, MutableSequence
from typing import TYPE_CHECKING

from minicb.kv.block_manager import BlockManager, BlockUsage
from minicb.scheduler.request import Request, RequestStatus

if TYPE_CHECKING:
    from minicb.config import EngineConfig
    from minicb.scheduler.output import SchedulerOutput
    from minicb.scheduler.output_processor import OutputProcessor


class SchedulerBase(ABC):
    streams_tokens: bool   # whether new tokens go back every step, or only with the result

    def __init__(self, config: EngineConfig, kv: BlockManager, outputs: OutputProcessor,
                 clock: Callable[[], float]):
        self.config, self.kv, self.outputs, self.clock = config, kv, outputs, clock
        self.waiting: deque[Request] = deque()
        self.requests: dict[str, Request] = {}   # every request it holds, by id: queued, running or swapped
        self.num_arrivals = 0   # arrival order, which breaks ties of equal arrival times

    @abstractmethod
    def schedule(self) -> SchedulerOutput:
        """This step's decision; allocates the KV slots it needs."""

    @abstractmethod
    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int | None],
                           now: float) -> list[Request]:
        """After the step: record its results (a next token, or None, by request id); return the requests
        whose results go back now."""

    @abstractmethod
    def has_unfinished(self) -> bool: ...

    def reserve_tokens(self, request: Request) -> int:
        """KV slots a request must reserve to start, beyond its prompt."""
        return 0

    @abstractmethod
    def holding_kv(self) -> list[Request]:
        """The requests that hold KV blocks (on the device or swapped out)."""

    @abstractmethod
    def _drop(self, request: Request) -> None:
        """Take an unfinished request out of wherever it is, freeing what it holds."""

    def _place(self, queue: MutableSequence[Request], request: Request) -> None:
        """Put request where it waits in queue: at the end, unless a policy orders the queue."""
        queue.append(request)

    def _enqueue(self, request: Request) -> None:
        self.requests[request.request_id] = request
        self._place(self.waiting, request)

    def _stamp_first_step(self, out: SchedulerOutput, now: float) -> None:
        """A request's scheduled_time is the first step it computes in."""
        for chunk in out.chunks:
            metrics = self.requests[chunk.request_id].metrics
            if metrics.scheduled_time is None:
                metrics.scheduled_time = now

    def _release(self, done: Iterable[Request], now: float) -> None:
        """Finished requests leave the scheduler: their result goes back to the user now."""
        for req in done:
            req.metrics.finished_time = now   # when the user gets the result, which static batching delays
            self.requests.pop(req.request_id, None)

    def _queue_with(self, request: Request) -> list[Request]:
        """The waiting queue, in order, as it would be with request added."""
        queue = list(self.waiting)
        self._place(queue, request)
        return queue

    @abstractmethod
    def startable_next_step(self, queue: list[Request]) -> int:
        """How many requests from the head of `queue` the next step could start, as things are now."""

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
        """Queue a request, or turn it away (REJECTED) when the queue is full. One that can never be served
        never gets here: the engine refuses it at make_request, with why_never_servable's reason."""
        request.arrival_index, self.num_arrivals = self.num_arrivals, self.num_arrivals + 1
        reason = self.why_not_now(request)
        if reason:
            request.status, request.reason = RequestStatus.REJECTED, reason
            self._release([request], self.clock())
        else:
            self._enqueue(request)

    def why_never_servable(self, req: Request) -> str | None:
        """Why this engine could not serve req even with nothing else to do, and what to change; None if it
        can."""
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
        """A full queue turns requests away instead of making everyone slower. Only the requests that the
        next step cannot start count as queued: a burst that free seats take at once waits for nothing."""
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
        """Requests that waited past max_queue_delay_s without ever starting are REJECTED."""
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
        """Drop a request wherever it is, freeing its blocks (status FINISHED_ABORTED, `reason` set)."""
        self._end(request, RequestStatus.FINISHED_ABORTED, reason)

    def fail(self, request: Request, reason: str) -> None:
        """As abort, but the request failed (FINISHED_ERROR): its caller must not read it as an abort."""
        self._end(request, RequestStatus.FINISHED_ERROR, reason)

    def _end(self, request: Request, status: RequestStatus, reason: str) -> None:
        if request.status.finished:
            return
        self._drop(request)
        request.status, request.reason = status, reason
        self._release([request], self.clock())

    def kv_usage(self) -> BlockUsage:
        return self.kv.usage()

    def kv_block_map(self) -> list[tuple[str | None, int, int]]:
        return self.kv.block_map()

    def check_invariants(self) -> None:
        """The pool's ledger, and each request holding KV holds slots for exactly its computed tokens."""
        self.kv.check_invariants()
        for req in self.holding_kv():
            held = self.kv.num_tokens.get(req.request_id)
            assert held == req.num_computed_tokens, (f"{req.request_id!r} holds KV slots for {held} tokens "
                                                     f"but has computed {req.num_computed_tokens}")
