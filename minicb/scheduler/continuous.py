"""Lesson 02: Orca's iteration-level scheduling. The batch is decided again before every step: a finished
request leaves at once, and its seat and blocks go to the next. The decisions are the parts (EngineParts);
the scheduler applies them and is the only writer of a request's progress."""
from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Iterable, MutableSequence
from dataclasses import dataclass
from itertools import chain, islice
from typing import TYPE_CHECKING, Callable, Protocol

from minicb.kv.block_manager import BlockManager
from minicb.scheduler.base import SchedulerBase
from minicb.scheduler.output import BlockCopy, ScheduledChunk, SchedulerOutput, apply_step_results
from minicb.scheduler.plan import StepPlan, StepState
from minicb.scheduler.request import Request, RequestStatus, RequestView, rank

if TYPE_CHECKING:
    from minicb.config import EngineConfig
    from minicb.costs import PreemptionCost
    from minicb.scheduler.output_processor import OutputProcessor


class Policies(Protocol):
    """The decisions the scheduler calls: minicb's or a learner's (EngineParts)."""
    plan_step: Callable[[StepState], StepPlan]
    choose_victim: Callable[[tuple[RequestView, ...]], str]
    should_swap: Callable[[RequestView, str, PreemptionCost | None], bool]
    chunk_size: Callable[[int, int, bool, EngineConfig], int]
    block_hashes: Callable[..., list[bytes]]
    longest_cached_prefix: Callable[..., int]


@dataclass
class Step:
    out: SchedulerOutput   # what the step runs so far
    token_budget: int      # tokens still free in the step
    now: float = 0.0       # preemptions and re-admissions are timed from it

    @property
    def is_empty(self) -> bool:
        return not self.out.chunks


class ContinuousScheduler(SchedulerBase):
    streams_tokens = True   # every new token goes back to its user at once

    def __init__(self, config: EngineConfig, kv: BlockManager, parts: Policies, outputs: OutputProcessor,
                 clock: Callable[[], float], preemption_cost: PreemptionCost | None = None):
        super().__init__(config, kv, outputs, clock)
        self.parts = parts
        self.preemption_cost = preemption_cost   # what "auto" preemption compares
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()   # come back, most urgent first, before any new admission

    def schedule(self) -> SchedulerOutput:
        """The plan decides the step; the scheduler applies it. Under prefill_first, decodes run last."""
        step = Step(SchedulerOutput(), self.config.max_num_batched_tokens, now=self.clock())
        line = self._line(self.waiting)
        hits = self._prefix_hits(line)
        state = self._state(line, hits)
        plan = self.parts.plan_step(state)
        for request_id in plan.starts:   # no allocation of this step evicts a start's hit
            self.kv.set_prefix_hit(request_id, hits.get(request_id, []))
        for victim in plan.victims:
            self.preempt(self.requests[victim], step)
        prompts_first = self.config.schedule_priority == "prefill_first"
        runs = [r for r in self.running if r.request_id in plan.runs]
        later = [r for r in runs if prompts_first and self.uncomputed(r) == 1]
        for req in runs:
            if req not in later:
                self.run(req, plan.runs[req.request_id], step)
        for req in [r for r in line if r.request_id in plan.starts]:
            self._start(req, plan.starts[req.request_id], step, len(hits.get(req.request_id, ())))
        for req in later:
            self.run(req, plan.runs[req.request_id], step)
        self._evict_for_priority(plan, state, step)
        self._stamp_first_step(step.out, step.now)
        return step.out

    def state_for_next_step(self) -> StepState:
        """What plan_step would be asked now (the lessons show it)."""
        line = self._line(self.waiting)
        return self._state(line, self._prefix_hits(line))

    def _line(self, waiting: Iterable[Request]) -> list[Request]:
        """Who may start, in order, for the free seats and one more. Swapped requests come first, except that
        under the priority policy a more urgent waiting one goes first (else two could evict each other)."""
        if self.config.scheduling_policy == "priority":
            queue = heapq.merge(self.swapped, waiting, key=rank)
        else:
            queue = chain(self.swapped, waiting)
        return list(islice(queue, max(0, self.free_seats) + 1))

    def _state(self, line: list[Request], hits: dict[str, list[int]]) -> StepState:
        """The plan's snapshot, in which a waiting request's prefix hit counts as computed."""
        computed = {r: len(blocks) * self.kv.block_size for r, blocks in hits.items()}
        views = {r.request_id: RequestView.of(r, computed.get(r.request_id))
                 for r in chain(self.running, line)}
        return StepState(
            running=tuple(views[r.request_id] for r in self.running),
            line=tuple(views[r.request_id] for r in line),
            free_seats=self.free_seats, token_budget=self.config.max_num_batched_tokens,
            free_blocks=self.kv.available_blocks(), order=self.config.schedule_priority,
            chunk=lambda request_id, budget, step_is_empty: self.chunk(views[request_id], budget,
                                                                       step_is_empty),
            blocks_to_grow=self.kv.new_blocks_needed,
            blocks_to_start=lambda request_id, n: self.kv.blocks_to_start(request_id, n,
                                                                          hits.get(request_id, ())),
            blocks_freed_by=self.kv.blocks_freed_by, choose_victim=self.parts.choose_victim)

    def _evict_for_priority(self, plan: StepPlan, state: StepState, step: Step) -> None:
        """Priority policy: a blocked head of the line, more urgent than a running request, evicts one."""
        blocked = next((r for r in state.line if r.request_id not in plan.starts), None)
        if (blocked is not None and not plan.victims and self.config.scheduling_policy == "priority"
                and self.running and max(self.running, key=rank).priority > blocked.priority
                and self.chunk(blocked, step.token_budget, step.is_empty)):
            self.make_room(step)

    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int | None],
                           now: float) -> list[Request]:
        """Orca's rule: a request leaves the batch in the step it finishes, not when the batch does."""
        apply_step_results(out, self.requests, sampled, self.outputs, now)
        if self.config.enable_prefix_caching:
            for chunk in out.chunks:
                req = self.requests[chunk.request_id]
                if req.status is not RequestStatus.FINISHED_ERROR:   # its K/V may hold NaNs
                    self._cache_computed_blocks(req)
        done = [r for r in self.running if r.status.finished]
        for req in done:
            self.running.remove(req)
            self.kv.free(req.request_id)
        self._release(done, now)
        return done

    @property
    def num_swapped(self) -> int:
        return len(self.swapped)

    @property
    def free_seats(self) -> int:
        return self.config.max_num_seqs - len(self.running)

    @staticmethod
    def uncomputed(req: Request | RequestView) -> int:
        """1 for a decode; more while a prompt is prefilled (or recomputed after a preemption)."""
        return req.num_tokens - req.num_computed_tokens

    def chunk(self, view: RequestView, budget: int, step_is_empty: bool) -> int:
        return self.parts.chunk_size(self.uncomputed(view), budget, step_is_empty, self.config)

    def make_room(self, step: Step) -> Request:
        victim = self.requests[self.parts.choose_victim(tuple(RequestView.of(r) for r in self.running))]
        self.preempt(victim, step)
        return victim

    def preempt(self, victim: Request, step: Step) -> None:
        """victim gives back its tokens of this step, then its KV: swapped out, or freed to be recomputed."""
        self.running.remove(victim)
        step.out.preempted.append(victim.request_id)
        for chunk in [c for c in step.out.chunks if c.request_id == victim.request_id]:
            step.out.chunks.remove(chunk)
            step.token_budget += chunk.num_new_tokens
        self.kv.truncate(victim.request_id, victim.num_computed_tokens)   # the slots it took this step
        victim.metrics.num_preemptions += 1
        victim.metrics.last_preempted_at = step.now
        if self.kv.can_swap_out(victim.request_id) and self.should_swap(victim):
            step.out.block_copies.append(BlockCopy(to_cpu=True, pairs=self.kv.swap_out(victim.request_id)))
            step.out.swapped_out.append(victim.request_id)
            victim.status = RequestStatus.SWAPPED
            bisect.insort(self.swapped, victim, key=rank)
            return
        self.kv.free(victim.request_id)
        victim.num_computed_tokens = 0   # prompt and output so far are prefilled again
        victim.status = RequestStatus.PREEMPTED
        if self.config.scheduling_policy == "priority":
            bisect.insort(self.waiting, victim, key=rank)
        else:
            self.waiting.appendleft(victim)   # it arrived before everyone waiting

    def should_swap(self, victim: Request) -> bool:
        return self.parts.should_swap(RequestView.of(victim), self.config.preemption_mode,
                                      self.preemption_cost)

    def _resume(self, req: Request, step: Step) -> None:
        if req.metrics.last_preempted_at is not None:
            req.metrics.preempted_time += step.now - req.metrics.last_preempted_at
            req.metrics.last_preempted_at = None
        req.status = RequestStatus.RUNNING
        self.running.append(req)

    def run(self, req: Request, num_tokens: int, step: Step) -> None:
        self.kv.append_slots(req.request_id, num_tokens)
        self._add_chunk(req, num_tokens, step, prefill=self.uncomputed(req) > 1)

    def start(self, req: Request, num_tokens: int, step: Step, cached_tokens: int = 0) -> None:
        """req starts with num_tokens after the cached_tokens of its prefix hit (kv.set_prefix_hit)."""
        req.num_computed_tokens = cached_tokens
        self.kv.allocate(req.request_id, num_tokens)   # after its prefix hit's blocks, if it has one
        self.waiting.remove(req)
        self._resume(req, step)
        step.out.admitted.append(req.request_id)
        step.out.cached_tokens += req.num_computed_tokens
        if req.num_cached_tokens is None:
            req.num_cached_tokens = req.num_computed_tokens
        self._add_chunk(req, num_tokens, step, prefill=True)

    def _start(self, req: Request, num_tokens: int, step: Step, cached_blocks: int) -> None:
        if req.status is not RequestStatus.SWAPPED:
            self.start(req, num_tokens, step, cached_blocks * self.kv.block_size)
            return
        self.swapped.remove(req)
        step.out.block_copies.append(BlockCopy(False, self.kv.swap_in(req.request_id)))
        self._resume(req, step)
        step.out.swapped_in.append(req.request_id)
        self.run(req, num_tokens, step)

    def _block_hashes(self, req: Request, num_blocks: int) -> list[bytes]:
        """The chain hashes of req's first num_blocks blocks; each block is hashed once."""
        known, size = req.block_hashes, self.kv.block_size
        if len(known) < num_blocks:
            new = req.all_token_ids[len(known) * size:num_blocks * size]
            known += self.parts.block_hashes(new, size, known[-1] if known else None)
        return known[:num_blocks]

    def _prefix_hits(self, line: list[Request]) -> dict[str, list[int]]:
        """The cached blocks each waiting request that might start would begin with. The last token is never
        in a hit: it must run to give logits, so nothing is written into a shared block."""
        if not self.config.enable_prefix_caching:
            return {}
        hits = {}
        for req in line[:self.free_seats]:
            if req.status is not RequestStatus.SWAPPED:
                hashes = self._block_hashes(req, (req.num_tokens - 1) // self.kv.block_size)
                hits[req.request_id] = [self.kv.cached[h] for h in hashes[:self.parts.longest_cached_prefix(
                    hashes, self.kv.cached)]]
        return hits

    def _cache_computed_blocks(self, req: Request) -> None:
        num_full = req.num_computed_tokens // self.kv.block_size
        if num_full > self.kv.cached_upto[req.request_id]:
            self.kv.cache_full_blocks(req.request_id, self._block_hashes(req, num_full), req.all_token_ids)

    def _add_chunk(self, req: Request, num_tokens: int, step: Step, prefill: bool) -> None:
        step.out.chunks.append(ScheduledChunk.of(req, num_tokens, self.kv.tables[req.request_id], prefill))
        step.token_budget -= num_tokens

    def _place(self, queue: MutableSequence[Request], request: Request) -> None:
        if self.config.scheduling_policy == "priority":
            bisect.insort(queue, request, key=rank)
        else:
            queue.append(request)

    def startable_next_step(self, queue: list[Request]) -> int:
        """Admission control asks the plan itself how many of `queue` the next step would start."""
        line = self._line(queue)
        plan = self.parts.plan_step(self._state(line, self._prefix_hits(line)))
        return sum(r.request_id in plan.starts for r in line if r.status is not RequestStatus.SWAPPED)

    def _drop(self, request: Request) -> None:
        for queue in (self.running, self.swapped):
            if request in queue:
                queue.remove(request)
                self.kv.free(request.request_id)
        if request in self.waiting:
            self.waiting.remove(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def holding_kv(self) -> list[Request]:
        return self.running + list(self.swapped)
