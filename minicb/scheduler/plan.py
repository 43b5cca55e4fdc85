"""Lesson 02: the step's plan, Orca's iteration-level scheduling as one decision: what a plan reads and
what it returns.

Before every step the scheduler hands plan_step a StepState, a snapshot of what it may read, and applies
the StepPlan it returns: who gives way, which running requests get how many tokens, and who starts. The
plan only decides; ContinuousScheduler applies it through its own methods (preempt, run, start), after
check_plan (minicb/scheduler/plan_check.py, with minicb's own plan) has compared it with the contract below and
named the first rule a wrong plan breaks.

The contract (every rule is one check_plan names):
- limits: at most token_budget tokens (one request running alone may run more, if its chunk gives it
  more), at most free_seats starts, and no more blocks than the pool has with what the victims give back;
- victims: as few as the pool needs. Nobody gives way while the running requests' next tokens fit the
  pool, and each victim is choose_victim's pick among the running requests still in;
- runs: every running request that is not a victim runs, with what its chunk gives it for the budget
  left to it (a request its chunk gives nothing waits for the next step). The budget serves
  decode_first's running requests in their order before anyone starts, and prefill_first's running
  prompts, then its newcomers, before its running decodes;
- starts: first come, first served. The requests that start are the first of the line, each with what
  its chunk gives it, as many as the seats, the budget and the pool take; nobody starts after one that
  cannot, or in a step where someone gave way, and under prefill_first a newcomer never takes the
  blocks a running decode will need.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from minicb.scheduler.request import RequestView


@dataclass(frozen=True)
class StepState:
    """What plan_step may read. The functions answer what-if questions and change nothing."""
    running: tuple[RequestView, ...]   # running requests, in the order they run
    line: tuple[RequestView, ...]      # who may start, in the order they must: swapped ones coming back
    #                                    (most urgent first), then waiting ones; the first free_seats + 1
    #                                    (the one past the seats is for admission control's question
    #                                    whether the next would start: the seats bound the starts)
    free_seats: int                    # max_num_seqs minus the running requests
    token_budget: int                  # max_num_batched_tokens: tokens this step may run
    free_blocks: int                   # KV blocks the pool can hand out now
    order: str                         # "decode_first" or "prefill_first" (EngineConfig.schedule_priority)
    chunk: Callable[[str, int, bool], int]   # (request_id, budget left, nothing planned yet) -> its tokens
    #                                          now, lesson 07's decision; 0: none fit. "Nothing planned yet":
    #                                          no request of this step has tokens so far
    blocks_to_grow: Callable[[str, int], int]    # (running request_id, n) -> new blocks for n more tokens
    blocks_to_start: Callable[[str, int], int]   # (request_id in line, n) -> blocks to run its first n tokens
    blocks_freed_by: Callable[[str], int]        # running request_id -> blocks the pool gets back if it gives way
    choose_victim: Callable[[tuple[RequestView, ...]], str]   # lesson 06's decision: who of these gives way

    def uncomputed(self, request_id: str) -> int:
        """Tokens the request has not computed: 1 for a decode, more for a prompt still to prefill."""
        view = next(v for v in self.running + self.line if v.request_id == request_id)
        return view.num_tokens - view.num_computed_tokens


@dataclass
class StepPlan:
    """What the step does: tokens per request_id for running requests (runs) and for those of the line
    that start (starts), and the running requests that give way, in the order they were chosen."""
    runs: dict[str, int] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)
    victims: list[str] = field(default_factory=list)
