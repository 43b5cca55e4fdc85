"""Static batching: collect a batch, run it until its last member finishes, then take the next.

This is the baseline continuous batching beats. A member that finishes early keeps its slot, idle,
until the longest member is done, and its result goes back only then; a request that arrives
meanwhile waits for the whole batch. Every KV block of the batch stays held until the end too.
"""
from __future__ import annotations

from collections import deque

from minicb.block_manager import BlockManager
from minicb.request import Request, RequestStatus
from minicb.scheduler import ScheduledChunk, SchedulerOutput


class StaticScheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int):
        self.blocks = block_manager
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.batch: list[Request] = []

    def reserve_tokens(self, request: Request) -> int:
        """Static batching reserves for the worst case up front: prompt plus max_tokens."""
        worst, limit = request.num_tokens + request.params.max_tokens, self.blocks.max_model_len
        return worst if limit is None else min(worst, limit)

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def abort(self, request: Request) -> None:
        """An aborted member leaves the batch and frees its blocks now; a waiting one leaves the queue."""
        if request in self.batch:
            self.batch.remove(request)
            self.blocks.free(request.request_id)
        elif request in self.waiting:
            self.waiting.remove(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.batch)

    @property
    def running(self) -> list[Request]:
        return [r for r in self.batch if not r.status.finished]

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        if not self.batch:
            self._form_batch(out)
        for req in self.batch:
            if req.status.finished:
                out.idle_slots.append(req)
            elif req in out.admitted:
                out.chunks.append(ScheduledChunk(req, req.num_tokens))
            else:
                self.blocks.append_slots(req.request_id)
                out.chunks.append(ScheduledChunk(req, 1))
        return out

    def update(self, out: SchedulerOutput) -> list[Request]:
        """Nothing comes back until every member is done; then the whole batch does."""
        if not all(r.status.finished for r in self.batch):
            return []
        done, self.batch = self.batch, []
        for req in done:
            self.blocks.free(req.request_id)
        return done

    def _form_batch(self, out: SchedulerOutput) -> None:
        budget = self.max_num_batched_tokens
        while self.waiting and len(self.batch) < self.max_num_seqs:
            req = self.waiting[0]
            worst = self.reserve_tokens(req)
            if (req.num_tokens > budget and self.batch) or not self.blocks.can_allocate(req.num_tokens, worst):
                break
            self.waiting.popleft()
            self.blocks.allocate(req.request_id, req.num_tokens, reserve_tokens=worst)
            req.status = RequestStatus.RUNNING
            self.batch.append(req)
            out.admitted.append(req)
            budget -= req.num_tokens
