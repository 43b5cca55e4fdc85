"""EngineParts: the one seam where the course plugs a learner's code into the real engine.

Each field is a part a lesson asks you to write; the defaults are minicb's own, complete
implementations. `minicb.course` fills the fields from exercises/ (yours) or solutions/ (the
reference), and the engine runs whatever it is given, so a lesson's cells run your code.

    lesson 02  requests_that_leave(running) -> the requests that leave this step
               plan_admissions(queue, free_seats, token_budget, free_blocks, step_is_empty) -> ids to start
    lesson 03  build_flat_batch(chunks, block_size, device) -> FlatBatch
    lesson 04  allocator: a PagedAllocator class whose allocate / append_slots / free you wrote
    lesson 05  paged_decode_attention(q, k_cache, v_cache, seq_lens, block_tables, max_seq_len, scale)
               -> (B, H, hd): the triton backend's decode kernel (None: minicb_kernels')
    lesson 06  choose_victim(running) -> the request that gives way under memory pressure
               should_swap(cost, num_tokens) -> whether "auto" preemption swaps or recomputes
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from minicb.batch import FlatBatch, build_flat_batch
from minicb.block_manager import PagedAllocator
from minicb.request import Request
from minicb.scheduler.continuous import plan_admissions, requests_that_leave
from minicb.scheduler.policy import PreemptionCost, should_swap, victim


@dataclass
class EngineParts:
    requests_that_leave: Callable[[list[Request]], list[Request]] = requests_that_leave
    plan_admissions: Callable[..., list[str]] = plan_admissions
    build_flat_batch: Callable[..., FlatBatch] = build_flat_batch
    allocator: type = PagedAllocator
    paged_decode_attention: Callable[..., torch.Tensor] | None = None
    choose_victim: Callable[[list[Request]], Request] = victim
    should_swap: Callable[[PreemptionCost, int], bool] = should_swap
