"""Orca's iteration-level scheduling: the batch is re-decided before every forward step.

A request that finishes leaves at once and its result goes back at once; its slot and its KV
blocks go to the next waiting request in the very next step. A step may mix new prefills with
ongoing decodes: attention handles each sequence separately (selective batching), so nothing
forces the batch's members to be in the same phase.
"""
from __future__ import annotations

from collections import deque

from minicb.block_manager import BlockManager
from minicb.request import Request, RequestStatus
from minicb.scheduler import ScheduledChunk, SchedulerOutput


class ContinuousScheduler:
    streams_tokens = True   # every new token goes back to its user at once

    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int):
        self.blocks = block_manager
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def reserve_tokens(self, request: Request) -> int:
        """Nothing beyond the prompt: blocks come one at a time as the sequence grows."""
        return 0

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def abort(self, request: Request) -> None:
        if request in self.running:
            self.running.remove(request)
            self.blocks.free(request.request_id)
        elif request in self.waiting:
            self.waiting.remove(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        # Running sequences decode first: each needs one token and, now and then, one new block.
        for req in list(self.running):
            while req in self.running and not self.blocks.can_append(req.request_id):
                self._preempt(self.running[-1], out)   # the latest arrival gives its blocks back
            if req in self.running:
                self.blocks.append_slots(req.request_id)
                out.chunks.append(ScheduledChunk(req, 1))
                budget -= 1
        # Then admit waiting requests, oldest first, while seats, tokens and blocks allow.
        while self.waiting and not out.preempted and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            prompt = req.num_tokens - req.num_computed_tokens
            # Over budget waits, unless the step would otherwise be empty: a preempted request
            # that grew past the budget must still be able to come back.
            if (prompt > budget and out.chunks) or not self.blocks.can_allocate(req.num_tokens):
                break
            self.waiting.popleft()
            self.blocks.allocate(req.request_id, req.num_tokens)
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            out.admitted.append(req)
            out.chunks.append(ScheduledChunk(req, prompt))
            budget -= prompt
        return out

    def update(self, out: SchedulerOutput) -> list[Request]:
        """Finished requests (the engine has set their status) leave now and free their blocks."""
        done = [r for r in self.running if r.status.finished]
        for req in done:
            self.running.remove(req)
            self.blocks.free(req.request_id)
        return done

    def _preempt(self, victim: Request, out: SchedulerOutput) -> None:
        """Recompute-style preemption: drop the victim's KV and queue it first, to re-prefill
        its prompt and the tokens it already generated."""
        self.running.remove(victim)
        self.blocks.free(victim.request_id)
        victim.num_computed_tokens = 0
        victim.status = RequestStatus.WAITING
        self.waiting.appendleft(victim)
        out.chunks = [c for c in out.chunks if c.request is not victim]
        out.preempted.append(victim)
