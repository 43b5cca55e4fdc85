"""One step's decision as plain data (SchedulerOutput), and apply_step_results, which records its results.
Chunks are snapshots, never live requests: readers see the decision as it was made."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from minicb.scheduler.request import Request, RequestStatus

if TYPE_CHECKING:
    from minicb.scheduler.output_processor import OutputProcessor


@dataclass(frozen=True)
class ScheduledChunk:
    request_id: str
    token_ids: tuple[int, ...]   # prompt tokens (prefill), or the last sampled token (decode)
    num_computed: int            # tokens cached before these: the first one's position
    block_table: tuple[int, ...]  # as scheduled; covers num_computed + the new tokens
    needs_logits: bool           # reaches the last known token, so a next one is sampled
    prefill: bool = False        # prompt tokens or a preempted request's recompute

    @property
    def num_new_tokens(self) -> int:
        return len(self.token_ids)

    @classmethod
    def of(cls, req: Request, num_new_tokens: int, block_table: list[int], prefill: bool) -> "ScheduledChunk":
        start = req.num_computed_tokens
        return cls(req.request_id, tuple(req.all_token_ids[start:start + num_new_tokens]), start,
                   tuple(block_table), start + num_new_tokens == req.num_tokens, prefill)


@dataclass(frozen=True)
class PaddingChunk:
    """Tokens computed and thrown away: the dense baseline's waste. They read the context up to
    num_computed + num_tokens and write nothing to the cache."""
    request_id: str
    num_computed: int
    num_tokens: int
    block_table: tuple[int, ...]


@dataclass(frozen=True)
class BlockCopy:
    """KV blocks to copy between the device pool and the CPU swap pool, as (from, to) pairs."""
    to_cpu: bool                    # True: swap-out (device -> CPU); False: swap-in
    pairs: list[tuple[int, int]]


@dataclass
class SchedulerOutput:
    """One step's decision, by request id."""
    chunks: list[ScheduledChunk] = field(default_factory=list)
    idle_seats: list[str] = field(default_factory=list)   # static batching: done, still holding a seat
    admitted: list[str] = field(default_factory=list)     # started running this step
    preempted: list[str] = field(default_factory=list)    # lost their KV blocks this step
    padding: list[PaddingChunk] = field(default_factory=list)  # the padded baseline's computed waste
    swapped_out: list[str] = field(default_factory=list)  # preempted by swapping (also in preempted)
    swapped_in: list[str] = field(default_factory=list)
    cached_tokens: int = 0   # prefix-cache hits of the requests admitted this step
    # Every swap of the step, run in decision order: a request may swap in and out in one step,
    # and a block one swap frees may be the next one's target.
    block_copies: list[BlockCopy] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(c.num_new_tokens for c in self.chunks)

    @property
    def padding_tokens(self) -> int:
        return sum(p.num_tokens for p in self.padding)

    @property
    def is_empty(self) -> bool:
        return not self.chunks

    @property
    def sampling(self) -> list[str]:
        """Requests that get a next token this step, in the order of the batch's sampled rows."""
        return [c.request_id for c in self.chunks if c.needs_logits]


NOT_FINITE = ("the model produced NaN or inf logits for this request, or logits that overflow at its "
              "temperature, or its sampling parameters failed on them; it failed alone, "
              "the others in its batch carried on")


def apply_step_results(out: SchedulerOutput, requests: dict[str, Request], sampled: dict[str, int | None],
                       outputs: OutputProcessor, now: float) -> None:
    """Record a step: each chunk's tokens are now cached; sampled gives each next token by request id
    (None: its logits were not finite, and that request fails alone)."""
    for chunk in out.chunks:
        requests[chunk.request_id].num_computed_tokens += chunk.num_new_tokens
    for request_id, token in sampled.items():
        req = requests[request_id]
        if token is None:
            req.status, req.reason = RequestStatus.FINISHED_ERROR, NOT_FINITE
            continue
        if req.metrics.first_token_time is None:
            req.metrics.first_token_time = now
        req.metrics.token_times.append(now)
        finish = outputs.append_token(req, token)
        if finish is not None:
            req.status, reason = finish
            if reason is not None:
                req.reason = reason
