"""What a scheduler decides for one step (SchedulerOutput, plain data) and how the step's results come back
to it.

SchedulerOutput holds snapshots, never live requests: each chunk carries the token ids it runs, where they
start and a copy of its block table, so the batch builder and the engine read the decision as it was made.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from minicb.scheduler.request import Request, RequestStatus

if TYPE_CHECKING:
    from minicb.scheduler.output_processor import OutputProcessor


@dataclass(frozen=True)
class ScheduledChunk:
    request_id: str
    token_ids: tuple[int, ...]   # a prompt or a piece of one (prefill), or the last sampled token (decode)
    num_computed: int            # tokens already in the cache before these (their first position)
    block_table: tuple[int, ...]  # the request's blocks as scheduled, covering num_computed + the new tokens
    needs_logits: bool           # the chunk reaches the request's last known token: a next one is sampled
    prefill: bool = False        # prompt tokens (or a preempted request's recompute), not a decode

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
    """Throwaway tokens that are computed but never used: the dense baseline's waste. They read the
    request's context up to num_computed + num_tokens and write nothing to the cache."""
    request_id: str
    num_computed: int
    num_tokens: int
    block_table: tuple[int, ...]


@dataclass(frozen=True)
class BlockCopy:
    """KV blocks to copy between the device pool and the CPU swap pool, as (from, to) block pairs."""
    to_cpu: bool                    # True: a swap-out (device -> CPU); False: a swap-in (CPU -> device)
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
    cached_tokens: int = 0   # tokens the requests admitted this step found in the prefix cache (not computed)
    # Every swap of the step, in the order the scheduler decided them. They must run in that order:
    # a request swapped in and out again in one step is copied out of the blocks its swap-in fills,
    # and a block freed by one swap may be the target of the next.
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
        """The requests that get a next token this step, in the order of the batch's sampled rows."""
        return [c.request_id for c in self.chunks if c.needs_logits]


NOT_FINITE = ("the model produced NaN or inf logits for this request, or logits that overflow at its "
              "temperature, or its sampling parameters failed on them; it failed alone, "
              "the others in its batch carried on")


def apply_step_results(out: SchedulerOutput, requests: dict[str, Request], sampled: dict[str, int | None],
                       outputs: OutputProcessor, now: float) -> None:
    """The step ran: every chunk's tokens are now in the cache, and each request that reached its last known
    token got a next one (None: its logits, or its distribution, were not finite, and it fails alone). The
    output processor says whether the token ends the request; the scheduler records it."""
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
