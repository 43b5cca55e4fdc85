"""Orca's iteration-level scheduling: the batch is re-decided before every forward step.

A request that finishes leaves at once and its result goes back at once; its slot and its KV
blocks go to the next waiting request in the very next step. A step may mix new prefills with
ongoing decodes: attention handles each sequence separately (selective batching), so nothing
forces the batch's members to be in the same phase.

Under pressure (lessons 06 and 07): when a running sequence needs a block and none is free, the
least urgent running sequence is preempted (policy.py: recompute or swap); no new request is
admitted in such a step. Chunked prefill splits long prompts across steps so decodes keep
flowing, and schedule() decides whether decodes or prompts get the token budget first.
"""
from __future__ import annotations

import bisect
import itertools
from collections import deque
from dataclasses import dataclass
from typing import Callable

from minicb.block_manager import BlockManager
from minicb.request import Request, RequestStatus
from minicb.scheduler import BlockCopy, ScheduledChunk, SchedulerOutput
from minicb.scheduler.policy import PreemptionCost, rank, should_swap, victim


@dataclass(frozen=True)
class QueuedRequest:
    """What admission needs to know of a waiting request."""
    request_id: str
    num_tokens: int   # tokens to compute to start it: its prompt (and its output so far, after a preemption)
    num_blocks: int   # KV blocks it must be given to start


def requests_that_leave(running: list[Request]) -> list[Request]:
    """Orca's rule: a request leaves the batch in the step it finishes, not when the batch does."""
    return [r for r in running if r.status.finished]


def plan_admissions(queue: list[QueuedRequest], free_seats: int, token_budget: int, free_blocks: int,
                    step_is_empty: bool) -> list[str]:
    """The ids of the requests that start this step: the longest prefix of the queue (first come, first
    served: nobody jumps the line) in which each one gets a seat, its tokens fit what is left of the
    step's token budget and its blocks fit the free blocks. A request larger than the whole budget may
    still start alone in an otherwise empty step, so that it cannot starve."""
    admitted: list[str] = []
    for req in queue:
        fits_budget = req.num_tokens <= token_budget or (step_is_empty and not admitted)
        if free_seats == 0 or not fits_budget or req.num_blocks > free_blocks:
            break
        admitted.append(req.request_id)
        free_seats, free_blocks = free_seats - 1, free_blocks - req.num_blocks
        token_budget -= req.num_tokens
    return admitted


class ContinuousScheduler:
    streams_tokens = True   # every new token goes back to its user at once

    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 enable_chunked_prefill: bool = False, long_prefill_token_threshold: int = 0,
                 prefill_first: bool = False, policy: str = "fcfs", preemption_mode: str = "recompute",
                 preemption_cost: PreemptionCost | None = None,
                 leave: Callable[[list[Request]], list[Request]] = requests_that_leave,
                 plan: Callable[..., list[str]] = plan_admissions,
                 choose_victim: Callable[[list[Request]], Request] = victim,
                 swap_is_cheaper: Callable[[PreemptionCost, int], bool] = should_swap):
        self.blocks = block_manager
        # Lesson 02's two decisions and lesson 06's two: the course may plug in a learner's.
        self.leave, self.plan = leave, plan
        self.victim, self.swap_is_cheaper = choose_victim, swap_is_cheaper
        self.policy = policy
        self.preemption_mode, self.preemption_cost = preemption_mode, preemption_cost
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.chunked, self.prefill_cap = enable_chunked_prefill, long_prefill_token_threshold
        self.prefill_first = prefill_first
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()   # come back, oldest first, before any new admission
        self._budget = 0   # tokens left in the step being scheduled

    def reserve_tokens(self, request: Request) -> int:
        """Nothing beyond the prompt: blocks come one at a time as the sequence grows."""
        return 0

    def add(self, request: Request) -> None:
        if self.policy == "priority":   # the queue stays sorted: lower priority value first, then arrival
            bisect.insort(self.waiting, request, key=rank)
        else:
            self.waiting.append(request)

    def abort(self, request: Request) -> None:
        for queue in (self.running, self.swapped):
            if request in queue:
                queue.remove(request)
                self.blocks.free(request.request_id)
        if request in self.waiting:
            self.waiting.remove(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def schedule(self) -> SchedulerOutput:
        """decode_first (default): running sequences take the token budget first, new requests get
        what is left: smooth inter-token latency. prefill_first: prompts (running chunked ones, then
        new ones) go first and decodes take what is left: new users see a first token sooner."""
        out = SchedulerOutput()
        self._budget = self.max_num_batched_tokens
        if self.prefill_first:
            decoders = [r for r in self.running if self._uncomputed(r) == 1]   # before admission adds more
            self._schedule_running(out, [r for r in self.running if self._uncomputed(r) > 1])
            keep_free = sum(self.blocks.new_blocks_needed(r.request_id) for r in decoders if r in self.running)
            self._swap_in(out, keep_free)
            self._admit(out, keep_free)
            self._schedule_running(out, decoders)
        else:
            self._schedule_running(out, list(self.running))
            self._swap_in(out, keep_free=0)
            self._admit(out, keep_free=0)
        return out

    def _swap_in(self, out: SchedulerOutput, keep_free: int) -> None:
        """Swapped sequences come back first, while seats and blocks allow, and run this step. A
        sequence comes back only with room for the chunk it will run, so that chunk cannot send it
        straight back out (two copies for nothing)."""
        while self.swapped and not out.preempted and len(self.running) < self.max_num_seqs:
            req = self.swapped[0]
            chunk = max(1, self._chunk_size(req, step_is_empty=not out.chunks))
            if self._waiting_goes_first(req) or not self.blocks.can_swap_in(req.request_id, keep_free, chunk):
                break
            self.swapped.popleft()
            out.block_copies.append(BlockCopy(False, self.blocks.swap_in(req.request_id)))
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            out.swapped_in.append(req)
            self._schedule_running(out, [req])

    def update(self, out: SchedulerOutput) -> list[Request]:
        """Finished requests (the engine has set their status) leave now and free their blocks."""
        done = self.leave(self.running)
        for req in done:
            self.running.remove(req)
            self.blocks.free(req.request_id)
        return done

    @staticmethod
    def _uncomputed(req: Request) -> int:
        """1 for a decode (the last sampled token); more while the prompt is still being prefilled."""
        return req.num_tokens - req.num_computed_tokens

    def _chunk_size(self, req: Request, step_is_empty: bool) -> int:
        """How many of the request's uncomputed tokens fit this step (0: none)."""
        todo = self._uncomputed(req)
        if self.chunked:
            cap = self.prefill_cap or todo
            return max(0, min(todo, self._budget, cap))
        # Unchunked, a prompt runs whole or not at all; a preempted request that grew past the
        # budget may still fill an otherwise empty step, so it cannot starve.
        return todo if todo <= self._budget or step_is_empty else 0

    def _schedule_running(self, out: SchedulerOutput, candidates: list[Request]) -> None:
        for req in candidates:
            n = self._chunk_size(req, step_is_empty=not out.chunks) if req in self.running else 0
            while n and req in self.running and not self.blocks.can_append(req.request_id, n):
                self._preempt(self.victim(self.running), out)
            if n and req in self.running:
                self.blocks.append_slots(req.request_id, n)
                out.chunks.append(ScheduledChunk(req, n, prefill=self._uncomputed(req) > 1))
                self._budget -= n

    def _admit(self, out: SchedulerOutput, keep_free: int) -> None:
        """Admit waiting requests, oldest first, while seats, tokens and blocks allow; keep_free
        blocks stay for the running decodes that prefill_first schedules after admission. The plain
        case is lesson 02's plan_admissions; chunked prefill and priorities (lesson 07) take the loop."""
        if not self.chunked and self.policy == "fcfs":
            self._admit_as_planned(out, keep_free)
            return
        while self.waiting and not out.preempted and (not self.swapped or self._waiting_goes_first(self.swapped[0])):
            req = self.waiting[0]
            n = self._chunk_size(req, step_is_empty=not out.chunks)
            if n == 0:
                break
            no_seat = len(self.running) >= self.max_num_seqs
            if no_seat or self.blocks.blocks_to_reserve(n, 0) > len(self.blocks.free_blocks) - keep_free:
                # Under the priority policy a more urgent request evicts a less urgent one; it is
                # admitted next step (never in a step that preempted).
                if self.policy == "priority" and self.running and self.victim(self.running).priority > req.priority:
                    self._preempt(self.victim(self.running), out)
                break
            self._start(self.waiting.popleft(), n, out)

    def _admit_as_planned(self, out: SchedulerOutput, keep_free: int) -> None:
        if out.preempted or self.swapped:   # no admission in a step that preempted; swapped requests go first
            return
        free_seats = self.max_num_seqs - len(self.running)
        queue = [QueuedRequest(r.request_id, self._uncomputed(r), self.blocks.blocks_to_reserve(self._uncomputed(r), 0))
                 for r in itertools.islice(self.waiting, free_seats + 1)]   # nobody past the seats can start
        admitted = self.plan(queue, free_seats, self._budget, len(self.blocks.free_blocks) - keep_free, not out.chunks)
        if len(admitted) > free_seats or list(admitted) != [q.request_id for q in queue[:len(admitted)]]:
            raise ValueError(f"plan_admissions returned {admitted} for the queue {[q.request_id for q in queue]} "
                             f"and {free_seats} free seats: it must admit the head of the queue, one per seat")
        for _ in admitted:
            req = self.waiting.popleft()
            self._start(req, self._uncomputed(req), out)

    def _start(self, req: Request, num_tokens: int, out: SchedulerOutput) -> None:
        self.blocks.allocate(req.request_id, num_tokens)
        req.status = RequestStatus.RUNNING
        self.running.append(req)
        out.admitted.append(req)
        out.chunks.append(ScheduledChunk(req, num_tokens, prefill=True))
        self._budget -= num_tokens

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        """Take the victim's KV blocks back, by swapping or recomputing (see policy.py); tokens it
        was given this step go back to the budget."""
        self.running.remove(req)
        self._budget += sum(c.num_new_tokens for c in out.chunks if c.request is req)
        out.chunks = [c for c in out.chunks if c.request is not req]
        out.preempted.append(req)
        self.blocks.truncate(req.request_id, req.num_computed_tokens)
        if self._should_swap(req):
            out.block_copies.append(BlockCopy(True, self.blocks.swap_out(req.request_id)))
            req.status = RequestStatus.SWAPPED
            bisect.insort(self.swapped, req, key=rank)
            out.swapped_out.append(req)
            return
        # Recompute: drop the KV and queue the request first, to prefill prompt + output again.
        self.blocks.free(req.request_id)
        req.num_computed_tokens = 0
        req.status = RequestStatus.PREEMPTED
        if self.policy == "priority":
            bisect.insort(self.waiting, req, key=rank)
        else:
            self.waiting.appendleft(req)

    def _waiting_goes_first(self, swapped: Request) -> bool:
        """Swapped requests return before new ones, except that under the priority policy a more
        urgent waiting request goes first (else the two could evict each other forever)."""
        return self.policy == "priority" and bool(self.waiting) and rank(self.waiting[0]) < rank(swapped)

    def _should_swap(self, req: Request) -> bool:
        """Swap when the mode says so and the swap pool has room (else fall back to recompute)."""
        if self.preemption_mode == "recompute" or not self.blocks.can_swap_out(req.request_id):
            return False
        return self.preemption_mode == "swap" or self.swap_is_cheaper(self.preemption_cost, req.num_computed_tokens)
