"""What a scheduler decides for one step (SchedulerOutput) and how the step's results come back to it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from minicb.request import Request, RequestStatus

if TYPE_CHECKING:
    from minicb.output import OutputProcessor


@dataclass
class ScheduledChunk:
    request: Request
    num_new_tokens: int    # a prompt or a piece of one (prefill), or 1 (decode)
    prefill: bool = False  # prompt tokens (or a preempted request's recompute), not a decode

    @property
    def completes_known_tokens(self) -> bool:
        """True when the chunk reaches the last known token, so the step samples a next one."""
        return self.request.num_computed_tokens + self.num_new_tokens == self.request.num_tokens


@dataclass
class PaddingChunk:
    """Throwaway tokens that are computed but never used: the dense baseline's waste. They read the
    request's context up to num_cached + num_tokens and write nothing to the cache."""
    request: Request
    num_cached: int
    num_tokens: int


@dataclass(frozen=True)
class BlockCopy:
    """KV blocks to copy between the device pool and the CPU swap pool, as (from, to) block pairs."""
    to_cpu: bool                    # True: a swap-out (device -> CPU); False: a swap-in (CPU -> device)
    pairs: list[tuple[int, int]]


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    idle_seats: list[Request] = field(default_factory=list)   # static batching: done, still holding a seat
    admitted: list[Request] = field(default_factory=list)     # started running this step
    preempted: list[Request] = field(default_factory=list)    # lost their KV blocks this step
    padding: list[PaddingChunk] = field(default_factory=list)  # the padded baseline's computed waste
    swapped_out: list[Request] = field(default_factory=list)  # preempted by swapping (also in preempted)
    swapped_in: list[Request] = field(default_factory=list)
    cached_tokens: int = 0   # tokens the requests admitted this step found in the prefix cache (never computed)
    # Every swap of the step, in the order the scheduler decided them. They must run in that order:
    # a request swapped in and out again in one step is copied out of the blocks its swap-in fills,
    # and a block freed by one swap may be the target of the next.
    block_copies: list[BlockCopy] = field(default_factory=list)
    # The block table of every request that computes this step (chunks and padding), for the batch.
    block_tables: dict[str, list[int]] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return sum(c.num_new_tokens for c in self.chunks)

    @property
    def padding_tokens(self) -> int:
        return sum(p.num_tokens for p in self.padding)

    @property
    def is_empty(self) -> bool:
        return not self.chunks


NOT_FINITE = ("the model produced NaN or inf logits for this request, or logits that overflow at its temperature; "
              "it failed alone, the others in its batch carried on")


def apply_step_results(out: SchedulerOutput, sampled: dict[Request, int | None], outputs: OutputProcessor,
                       now: float) -> None:
    """The step ran: every chunk's tokens are now in the cache, and each request that reached its
    last known token got a next one (None: its logits, or its distribution, were not finite, and it fails alone)."""
    for chunk in out.chunks:
        chunk.request.num_computed_tokens += chunk.num_new_tokens
    for req, token in sampled.items():
        if token is None:
            req.status, req.reason = RequestStatus.FINISHED_ERROR, NOT_FINITE
        else:
            outputs.append_token(req, token, now)
