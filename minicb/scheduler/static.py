"""Lesson 01: static batching. A batch runs until its last member finishes; then the next one forms.
With pad_to_longest it is the dense `generate` baseline: every row is padded to the longest."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable

from minicb.kv.block_manager import BlockManager
from minicb.scheduler.base import SchedulerBase
from minicb.scheduler.output import PaddingChunk, ScheduledChunk, SchedulerOutput, apply_step_results
from minicb.scheduler.request import Request, RequestStatus

if TYPE_CHECKING:
    from minicb.config import EngineConfig
    from minicb.scheduler.output_processor import OutputProcessor


class StaticScheduler(SchedulerBase):
    streams_tokens = False   # results go back only when the whole batch is done

    def __init__(self, config: EngineConfig, kv: BlockManager, outputs: OutputProcessor,
                 clock: Callable[[], float]):
        super().__init__(config, kv, outputs, clock)
        self.pad_to_longest = config.batching == "padded"
        self.batch: list[Request] = []
        self._longest_prompt = 0   # of the current batch
        self._dense_width = 0      # the padded baseline's row length: longest prompt + longest output
        self._batch_steps = 0      # steps the current batch has run

    def reserve_tokens(self, request: Request, members: list[Request] | None = None) -> int:
        """The worst case, up front: prompt + max_tokens; padded, every row gets the batch's longest
        prompt + longest output."""
        members = members or [request]
        if self.pad_to_longest:
            worst = max(r.num_tokens for r in members) + max(r.params.max_tokens for r in members)
        else:
            worst = request.num_tokens + request.params.max_tokens
        limit = self.kv.max_model_len
        return worst if limit is None else min(worst, limit)

    def _drop(self, request: Request) -> None:
        if request in self.batch:
            self.batch.remove(request)
            self.kv.free(request.request_id)
        elif request in self.waiting:
            self.waiting.remove(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.batch)

    def holding_kv(self) -> list[Request]:
        return list(self.batch)

    @property
    def running(self) -> list[Request]:
        return [r for r in self.batch if not r.status.finished]

    def schedule(self) -> SchedulerOutput:
        out, now = SchedulerOutput(), self.clock()
        if not self.batch:
            self._form_batch(out)
        for req in self.batch:
            rid = req.request_id
            if req.status.finished:
                out.idle_seats.append(rid)
                if self.pad_to_longest:
                    # A dense row's context: the longest prompt plus every step so far.
                    context = min(self._longest_prompt + self._batch_steps, self._dense_width)
                    out.padding.append(PaddingChunk(rid, context - 1, 1, tuple(self.kv.tables[rid])))
                continue
            if rid in out.admitted:
                out.chunks.append(ScheduledChunk.of(req, req.num_tokens, self.kv.tables[rid], prefill=True))
                if self.pad_to_longest and req.num_tokens < self._longest_prompt:
                    out.padding.append(PaddingChunk(rid, req.num_tokens,
                                                    self._longest_prompt - req.num_tokens,
                                                    tuple(self.kv.tables[rid])))
            else:
                self.kv.append_slots(rid)
                out.chunks.append(ScheduledChunk.of(req, 1, self.kv.tables[rid], prefill=False))
        self._batch_steps += 1
        self._stamp_first_step(out, now)
        return out

    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int | None],
                           now: float) -> list[Request]:
        """Nothing comes back until every member is done; then the whole batch does."""
        apply_step_results(out, self.requests, sampled, self.outputs, now)
        if not all(r.status.finished for r in self.batch):
            return []
        done, self.batch = self.batch, []
        for req in done:
            self.kv.free(req.request_id)
        self._release(done, now)
        return done

    def startable_next_step(self, queue: list[Request]) -> int:
        return 0 if self.batch else len(self._next_batch(queue))

    def _next_batch(self, queue: Iterable[Request]) -> list[Request]:
        budget, members = self.config.max_num_batched_tokens, []
        for req in queue:   # oldest first, while seats and the token budget allow
            if len(members) == self.config.max_num_seqs or (req.num_tokens > budget and members):
                break
            members.append(req)
            budget -= req.num_tokens
        while members and not self._pool_holds(members):
            members.pop()
        return members

    def _form_batch(self, out: SchedulerOutput) -> None:
        members = self._next_batch(self.waiting)
        for req in members:
            self.waiting.popleft()
            self.kv.allocate(req.request_id, req.num_tokens, reserve_tokens=self.reserve_tokens(req, members))
            req.status = RequestStatus.RUNNING
        self.batch, out.admitted = members, [r.request_id for r in members]
        self._longest_prompt = max((r.num_tokens for r in members), default=0)
        self._dense_width = max((self.reserve_tokens(r, members) for r in members), default=0)
        self._batch_steps = 0

    def _pool_holds(self, members: list[Request]) -> bool:
        needed = sum(self.kv.blocks_to_reserve(r.num_tokens, self.reserve_tokens(r, members))
                     for r in members)
        return needed <= len(self.kv.free_blocks)
