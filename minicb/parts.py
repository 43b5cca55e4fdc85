"""EngineParts: the seam where the course plugs a learner's code into the engine. Each field is one
lesson's part; defaults are minicb's own. `minicb.course` fills them from exercises/ or solutions/.

    lesson 02  plan_step(state) -> StepPlan              who gives way, who runs how many tokens, who starts
    lesson 03  build_flat_batch(chunks, block_size, device) -> FlatBatch
    lesson 04  allocator: the class the KV pool's blocks are handed out by (PagedAllocator)
    lesson 05  paged_decode_attention(q, k_cache, v_cache, seq_lens, block_tables, max_seq_len, scale)
               -> (B, H, hd): the triton backend's decode kernel (None: minicb_kernels')
    lesson 06  choose_victim(running) -> the request_id of the running request that gives its KV blocks back
               should_swap(victim, mode, cost) -> swap it (True) or recompute it (False)
    lesson 07  chunk_size(uncomputed, budget, step_is_empty, config) -> how many of a request's tokens run now
    lesson 10  block_hashes(token_ids, block_size, parent) -> the chain hash of each full block
               longest_cached_prefix(hashes, cached) -> how many leading blocks the prefix cache holds
               choose_eviction(candidates) -> the cached block evicted next (None: the least recently used)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from minicb.kv.eviction import CachedBlock
from minicb.kv.paged_allocator import PagedAllocator
from minicb.kv.prefix_cache import block_hashes, longest_cached_prefix
from minicb.runner.batch import FlatBatch
from minicb.runner.batch_builder import build_flat_batch
from minicb.scheduler.chunking import chunk_size
from minicb.scheduler.plan import StepPlan, plan_step
from minicb.scheduler.preemption import choose_victim, should_swap


@dataclass
class EngineParts:
    plan_step: Callable[..., StepPlan] = plan_step
    build_flat_batch: Callable[..., FlatBatch] = build_flat_batch
    allocator: type = PagedAllocator
    paged_decode_attention: Callable[..., torch.Tensor] | None = None
    choose_victim: Callable[..., str] = choose_victim
    should_swap: Callable[..., bool] = should_swap
    chunk_size: Callable[..., int] = chunk_size
    block_hashes: Callable[..., list[bytes]] = block_hashes
    longest_cached_prefix: Callable[..., int] = longest_cached_prefix
    choose_eviction: Callable[[tuple[CachedBlock, ...]], int] | None = None
