"""LLMEngine: the vLLM-shaped core. One step: scheduler.schedule() -> SchedulerOutput (plain data) ->
build_flat_batch -> runner.execute -> scheduler.update_from_output -> trace.record_step. The engine talks
only to the scheduler and the runner, and writes no request's state."""
from __future__ import annotations

import sys
import threading
import warnings
import zlib
from dataclasses import replace
from pathlib import Path

from minicb.config import EngineConfig
from minicb.kv.block_manager import BlockManager
from minicb.model.config import read_model_config
from minicb.model.loader import resolve_model_path
from minicb.parts import EngineParts
from minicb.prompts import Prompt, check_params_and_priority, encode_prompt, prompt_text
from minicb.runner.batch import sequence_chunks
from minicb.runner.model_runner import ModelRunner, Runner, preemption_cost_for, resolve_device, resolve_dtype
from minicb.runner.simulator import SimulatedRunner
from minicb.sampling import SamplingParams, make_generator
from minicb.scheduler import build_scheduler
from minicb.scheduler.output import SchedulerOutput
from minicb.scheduler.output_processor import OutputProcessor
from minicb.scheduler.request import Request, RequestMetrics, RequestOutput, RequestStatus
from minicb.stats.trace import Trace, block_map


PACKAGE_DIR = str(Path(__file__).resolve().parent)


class PoolTooSmallWarning(UserWarning):
    """The KV pool cannot hold one max_model_len sequence (vLLM refuses to start; the lessons need it)."""


def fit_max_model_len(config: EngineConfig, model_limit: int, pool_tokens: int) -> tuple[int, str]:
    """max_model_len, and the fix to name for a prompt over it. Unset, it is the model's limit, capped (as
    vLLM does) to what a pool sized from kv_cache_memory_mb holds; an explicit num_blocks is not capped."""
    if config.max_model_len is not None:
        if config.max_model_len > model_limit:
            raise ValueError(f"EngineConfig.max_model_len={config.max_model_len} exceeds the model's "
                             f"{model_limit}")
        return config.max_model_len, "shorten the prompt"
    if config.num_blocks is None and 2 <= pool_tokens < model_limit:
        return pool_tokens, ("shorten the prompt, or raise kv_cache_memory_mb="
                             f"{config.kv_cache_memory_mb:g}: the model allows {model_limit} tokens, but "
                             f"max_model_len is capped to the {pool_tokens} its KV pool holds")
    return model_limit, "shorten the prompt"


def stacklevel_outside_minicb() -> int:
    """The stacklevel at which a warning names the user's own line, the first outside minicb."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


class LLMEngine:
    def __init__(self, config: EngineConfig | None = None, parts: EngineParts | None = None, **overrides):
        """parts: the course's seam (minicb/parts.py); None runs minicb's own."""
        self.config = c = config or EngineConfig(**overrides)
        self.parts = parts = parts or EngineParts()
        device = resolve_device(c.device)
        dtype = resolve_dtype(c.dtype, device)
        model_path = resolve_model_path(c.model)   # once: a hub id may cost a look-up on the network
        model_config = read_model_config(model_path)
        block_bytes = model_config.kv_bytes_per_block(c.block_size, dtype)
        num_blocks = c.num_blocks or max(1, int(c.kv_cache_memory_mb * 2**20 // block_bytes))
        num_swap_blocks = 0 if c.preemption_mode == "recompute" else int(
            c.swap_space_mb * 2**20 // block_bytes)
        pool_tokens = num_blocks * c.block_size
        self.max_model_len, self._too_long_fix = fit_max_model_len(c, model_config.max_model_len, pool_tokens)
        if c.max_num_batched_tokens is None:
            self.config = c = replace(c, max_num_batched_tokens=c.token_budget(self.max_model_len))
        self.runner: Runner
        if c.simulate:
            self.runner = SimulatedRunner(model_path, c.step_cost, num_blocks, c.block_size, num_swap_blocks)
        else:
            self.runner = ModelRunner(model_path, device=device, dtype=dtype, num_blocks=num_blocks,
                                      block_size=c.block_size, attn_backend=c.attn_backend,
                                      num_swap_blocks=num_swap_blocks, max_num_seqs=c.max_num_seqs,
                                      fit_threads=c.fit_threads, pack_weights=c.pack_weights,
                                      decode_attention=parts.paged_decode_attention, compile=c.compile)
        self.tokenizer = self.runner.tokenizer
        # A sequence can never hold more tokens than the whole pool: there it stops, with "length".
        self.max_seq_tokens = max_seq_tokens = min(self.max_model_len, pool_tokens)
        if max_seq_tokens < self.max_model_len:
            warnings.warn(f"the KV pool holds {max_seq_tokens} tokens ({num_blocks} blocks of "
                          f"{c.block_size}), less than one sequence of max_model_len={self.max_model_len}: "
                          "longer requests stop early with finish_reason 'length'. "
                          f"Raise {c.pool_knob}, or set max_model_len <= "
                          f"{max_seq_tokens}", PoolTooSmallWarning, stacklevel=stacklevel_outside_minicb())
        kv = BlockManager(num_blocks, c.block_size, c.kv_reservation, self.max_model_len, num_swap_blocks,
                          allocator=parts.allocator, choose_eviction=parts.choose_eviction)
        # The simulator leaves outputs as token ids: detokenising 10,000 requests would dominate its time.
        outputs = OutputProcessor(self.tokenizer, self.runner.config.eos_token_ids, self.max_model_len,
                                  max_seq_tokens, detokenize=not c.simulate)
        self.scheduler = build_scheduler(c, kv, parts, outputs, self.runner.clock,
                                         preemption_cost_for(c, self.runner))
        self.trace = Trace(num_seats=c.max_num_seqs, max_steps=c.trace_max_steps)
        self.requests: dict[str, Request] = {}
        self._pending_outputs: list[RequestOutput] = []   # rejected or aborted, returned by the next step
        # Held by step() except during the forward: abort_if_waiting, from another thread, never changes
        # the queues while the step reads them, and never waits out a forward.
        self.bookkeeping = threading.Lock()
        self._next_id = 0
        self.num_preemptions = 0   # engine lifetime, for a server's counter (each request counts its own too)
        self.clock = self.runner.clock

    def encode(self, prompt: Prompt) -> list[int]:
        return encode_prompt(prompt, self.tokenizer, self.runner.config.vocab_size, self.max_model_len,
                             self.runner.model_path, self._too_long_fix)

    def make_request(self, prompt: Prompt, params: SamplingParams | None = None,
                     request_id: str | None = None, arrival_time: float | None = None,
                     priority: int = 0) -> Request:
        """Validate and build a request without queueing it: one bad request in a batch queues none."""
        params = check_params_and_priority(params, priority, self.config.scheduling_policy)
        ids = self.encode(prompt)
        if request_id is None:
            request_id, self._next_id = str(self._next_id), self._next_id + 1
        seed = params.seed if params.seed is not None else zlib.crc32(
            f"{self.config.seed}:{request_id}".encode())
        req = Request(request_id, prompt_text(prompt), ids, params, make_generator(seed, self.runner.device),
                      RequestMetrics(arrival_time if arrival_time is not None else self.clock()),
                      priority=priority)
        never = self.scheduler.why_never_servable(req)
        if never:   # bad input, not a busy engine: asking again cannot help (a server answers 400, not 503)
            raise ValueError(f"this engine can never serve the request: {never}")
        return req

    def add_request(self, prompt: Prompt, params: SamplingParams | None = None, request_id: str | None = None,
                    arrival_time: float | None = None, priority: int = 0) -> str:
        return self.queue(self.make_request(prompt, params, request_id, arrival_time, priority))

    def queue(self, req: Request) -> str:
        if req.request_id in self.requests:
            raise ValueError(f"request id {req.request_id!r} is already in use; give a new one or None")
        self.requests[req.request_id] = req
        if self.trace.enabled:
            self.trace.arrivals[req.request_id] = req.metrics.arrival_time
        self.scheduler.add(req)
        if req.status.finished:
            self._hand_back_later(req)
        return req.request_id

    def abort(self, request_id: str, reason: str = "aborted by the caller") -> None:
        req = self.requests.get(request_id)
        if req is None:
            raise KeyError(f"no request with id {request_id!r} is in the engine (a finished request leaves "
                           "it once its result is returned)")
        if not req.status.finished:
            self.scheduler.abort(req, reason)
            self._hand_back_later(req)

    def fail(self, request_id: str, reason: str) -> None:
        """End an unfinished request with finish_reason "error" (a step failed around it)."""
        req = self.requests[request_id]
        if not req.status.finished:
            self.scheduler.fail(req, reason)
            self._hand_back_later(req)

    def _hand_back_later(self, req: Request) -> None:
        self.trace.release(req.request_id)
        self._pending_outputs.append(RequestOutput.of(req))

    def idle_until(self, t: float) -> None:
        """Wait for t, the next arrival (the simulator's clock jumps there)."""
        self.runner.advance_to(t)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self._pending_outputs)

    def step(self) -> list[RequestOutput]:
        with self.bookkeeping:
            return self._step()

    def abort_if_waiting(self, request_id: str, reason: str) -> bool:
        """abort() from another thread, even during a forward, of a queued request only; False otherwise."""
        if not self.bookkeeping.acquire(blocking=False):   # the step is scheduling or recording: moments
            return False
        try:
            req = self.requests.get(request_id)
            if req is None or req.status not in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
                return False
            self.abort(request_id, reason)
            return True
        finally:
            self.bookkeeping.release()

    def _step(self) -> list[RequestOutput]:
        for req in self.scheduler.reject_stale(self.clock()):
            self._hand_back_later(req)
        outputs, self._pending_outputs = self._pending_outputs, []
        start = self.clock()
        out = self.scheduler.schedule()
        self._copy_blocks(out)
        self.num_preemptions += len(out.preempted)
        self.trace.note_preemptions(out)
        if out.is_empty:
            # A priority preemption emptied the step, or an abort left a static batch of finished members.
            return self._finish_step(out, {}, start, start, outputs, context_tokens=None)
        batch = self.parts.build_flat_batch(sequence_chunks(out), self.config.block_size, self.runner.device)
        due = out.sampling
        sampling = [(self.requests[rid].params, self.requests[rid].generator) for rid in due]
        self.bookkeeping.release()   # the forward reads no queue: a queued request may leave meanwhile
        try:
            tokens = self.runner.execute(batch, sampling)
        finally:
            self.bookkeeping.acquire()
        sampled = dict(zip(due, tokens))
        return self._finish_step(out, sampled, start, self.clock(), outputs, int(batch.attn.seq_lens.sum()))

    def _finish_step(self, out: SchedulerOutput, sampled: dict[str, int | None], start: float, end: float,
                     outputs: list[RequestOutput], context_tokens: int | None) -> list[RequestOutput]:
        returned = self.scheduler.update_from_output(out, sampled, end)
        if context_tokens is None:
            for req in returned:
                self.trace.release(req.request_id)
        else:
            self.trace.record_step(out, start, end, returned, context_tokens, self.scheduler.kv.usage(),
                                   self.scheduler.num_waiting,
                                   block_map(self.scheduler.kv) if self.config.trace_kv_blocks else None)
        if self.config.check_kv_invariants:
            self.scheduler.check_invariants()
        shown = [self.requests[rid] for rid in sampled] if self.scheduler.streams_tokens else returned
        outputs += [RequestOutput.of(r) for r in shown]
        for output in outputs:   # a result goes back once; then the engine forgets the request
            if output.finished:
                del self.requests[output.request_id]
        return outputs

    def _copy_blocks(self, out: SchedulerOutput) -> None:
        """The step's swaps, in the scheduler's order, before the forward reuses a freed block."""
        for copy in out.block_copies:
            (self.runner.swap_out if copy.to_cpu else self.runner.swap_in)(copy.pairs)
