"""Request, its status and metrics, and what goes back to the user (RequestOutput).
RequestView is the read-only snapshot that Lesson 06's policies see."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from minicb.sampling import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"                 # lost its KV blocks; queued to recompute them
    SWAPPED = "swapped"                     # its KV blocks wait in the CPU swap pool
    FINISHED_STOPPED = "finished_stopped"   # EOS, a stop token or a stop string
    FINISHED_LENGTH = "finished_length"     # max_tokens or max_model_len reached
    FINISHED_ABORTED = "finished_aborted"
    FINISHED_ERROR = "finished_error"       # failed alone (e.g. NaN logits); `reason` holds the error
    REJECTED = "rejected"                   # never ran; `reason` says why

    @property
    def finished(self) -> bool:
        return self not in (RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.PREEMPTED,
                            RequestStatus.SWAPPED)


FINISH_REASONS = {RequestStatus.FINISHED_STOPPED: "stop", RequestStatus.FINISHED_LENGTH: "length",
                  RequestStatus.FINISHED_ABORTED: "abort", RequestStatus.FINISHED_ERROR: "error",
                  RequestStatus.REJECTED: "rejected"}


@dataclass
class RequestMetrics:
    """Times in seconds on the engine's clock (wall time, or simulated time in the simulator)."""
    arrival_time: float
    scheduled_time: float | None = None      # first step it ran in
    first_token_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    finished_time: float | None = None       # when the result went back to the user
    num_preemptions: int = 0
    preempted_time: float = 0.0              # total time evicted, preemption to re-admission
    last_preempted_at: float | None = None

    @property
    def queue_time(self) -> float | None:
        return None if self.scheduled_time is None else self.scheduled_time - self.arrival_time

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def itl(self) -> list[float]:
        """Inter-token latencies: gaps between consecutive output tokens."""
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        gaps = self.itl
        return sum(gaps) / len(gaps) if gaps else None

    @property
    def e2e_latency(self) -> float | None:
        return None if self.finished_time is None else self.finished_time - self.arrival_time


@dataclass(eq=False)   # `req in queue` must compare identity, not field values
class Request:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    generator: torch.Generator
    metrics: RequestMetrics
    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    text: str = ""
    priority: int = 0              # lower is served first under scheduling_policy="priority"
    arrival_index: int = 0         # breaks ties of equal arrival times
    reason: str | None = None      # why it was rejected, or the error it failed with
    num_computed_tokens: int = 0   # tokens whose K/V are in the cache
    detok_offsets: tuple[int, int] = (0, 0)   # (prefix, read) offsets of incremental detokenisation
    # Prefix caching: chain hashes of the full blocks hashed so far (each once, even across preemptions),
    # and the prompt tokens found in the cache at first admission (None until then).
    block_hashes: list[bytes] = field(default_factory=list)
    num_cached_tokens: int | None = None

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def finish_reason(self) -> str | None:
        return FINISH_REASONS.get(self.status)

    @property
    def arrival_time(self) -> float:
        return self.metrics.arrival_time


def rank(req: Request | RequestView) -> tuple[int, float, int]:
    """Serving order: lower priority value first, then earlier arrival, then arrival_index.
    The scheduler admits in this order and preempts in reverse."""
    return req.priority, req.arrival_time, req.arrival_index


@dataclass(frozen=True)
class RequestView:
    """A read-only snapshot of a request for a policy. The scheduler alone changes requests."""
    request_id: str
    priority: int
    arrival_time: float
    arrival_index: int
    num_prompt_tokens: int
    num_output_tokens: int
    num_computed_tokens: int   # tokens whose K/V are in the cache
    max_tokens: int

    @classmethod
    def of(cls, req: Request, num_computed_tokens: int | None = None) -> "RequestView":
        """num_computed_tokens overrides req's own, e.g. with a waiting request's prefix-cache hit."""
        computed = req.num_computed_tokens if num_computed_tokens is None else num_computed_tokens
        return cls(req.request_id, req.priority, req.metrics.arrival_time, req.arrival_index,
                   len(req.prompt_token_ids), len(req.output_token_ids), computed, req.params.max_tokens)

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    rank = property(rank)


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int]
    finish_reason: str | None   # "stop", "length", "abort", "error", "rejected"; None while running


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    reason: str | None = None   # why it was rejected, or the error it failed with
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache, not prefilled (vLLM's name)

    @classmethod
    def of(cls, req: Request) -> "RequestOutput":
        text = req.text
        if not req.status.finished:
            text = text[:len(text) - possible_stop_start(text, req.params.stop)]
        return cls(req.request_id, req.prompt, req.prompt_token_ids,
                   [CompletionOutput(text, list(req.output_token_ids), req.finish_reason)],
                   req.status.finished, req.metrics, req.reason, req.num_cached_tokens or 0)


def possible_stop_start(text: str, stops: list[str]) -> int:
    """Length of the longest end of text that a stop string could still complete. A running request
    holds it back, so a stream never shows text that a stop string will cut."""
    return max((k for s in stops for k in range(min(len(s) - 1, len(text)), 0, -1) if text.endswith(s[:k])),
               default=0)

