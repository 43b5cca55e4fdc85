"""LLMEngine and LLM: the vLLM-shaped front of minicb.

One engine step, as data:

    scheduler.schedule()            -> SchedulerOutput   which requests run, how many tokens each
    build_flat_batch(chunks)        -> FlatBatch         the flat tensors the model runs on
    runner.execute + sample         -> one token per request that reached its last known token
    scheduler.update                -> finished requests leave (continuous: at once)
    trace.record                    -> one StepRecord
"""
from __future__ import annotations

import warnings
import zlib
from typing import Iterator, Union

import torch
from tqdm.auto import tqdm

from minicb.batch import sequence_chunks
from minicb.block_manager import BlockManager
from minicb.checks import is_int
from minicb.config import EngineConfig
from minicb.detokenize import new_text
from minicb.model.config import read_model_config
from minicb.model.loader import resolve_model_path
from minicb.parts import EngineParts
from minicb.request import Request, RequestMetrics, RequestOutput, RequestStatus
from minicb.runner import ModelRunner, resolve_device, resolve_dtype
from minicb.sampling import SamplingParams, find_stop, make_generator, sample
from minicb.scheduler import SchedulerOutput
from minicb.scheduler.continuous import ContinuousScheduler
from minicb.scheduler.policy import PreemptionCost, measure_preemption_cost
from minicb.scheduler.static import StaticScheduler
from minicb.simulator import SimulatedRunner, StepCost
from minicb.trace import DECODE, IDLE, PAD, PREFILL, StepRecord, Trace


Prompt = Union[str, list[int], dict]


class PoolTooSmallWarning(UserWarning):
    """The KV pool cannot hold one max_model_len sequence (vLLM refuses to start; minicb warns, since
    the lessons shrink the pool on purpose)."""


def prompt_of_dict(prompt: dict) -> str | list[int]:
    """vLLM's prompt dicts: {"prompt": text} or {"prompt_token_ids": ids}."""
    keys = set(prompt) & {"prompt", "prompt_token_ids"}
    if len(keys) != 1:
        raise ValueError(f"a prompt dict needs exactly one of 'prompt' (text) or 'prompt_token_ids', got keys "
                         f"{sorted(prompt)}")
    return prompt[keys.pop()]


def check_unicode(text: str) -> None:
    """A lone surrogate (what undecodable bytes become under errors='surrogateescape') is not text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"the prompt is not valid Unicode text: {text[err.start]!r} at index {err.start} is a "
                         "lone surrogate (undecodable bytes); decode the input with errors='replace', or remove it"
                         ) from None


def check_priority(priority: int) -> None:
    if not is_int(priority):
        raise ValueError(f"priority={priority!r} is invalid: use an integer (lower is served first)")


def simulated_preemption_cost(config: EngineConfig) -> PreemptionCost:
    """The simulator's own prices: re-prefilling t tokens is one step of t tokens reading a context
    of t (linear in t, as StepCost prices it), a swap is a copy each way."""
    step = config.step_cost or StepCost()
    return PreemptionCost(step.fixed, step.per_token + step.per_context_token, 0.0, 0.0, 2 * step.per_swapped_token)


def kv_bytes_per_block(model_path: str, block_size: int, dtype: torch.dtype) -> int:
    c = read_model_config(model_path)
    return c.num_layers * 2 * block_size * c.kv_dim * dtype.itemsize


class LLMEngine:
    def __init__(self, config: EngineConfig | None = None, parts: EngineParts | None = None, **overrides):
        """parts: the seam where the course plugs in a learner's scheduler decisions, batch builder or
        allocator (minicb/parts.py); None runs minicb's own."""
        self.config = c = config or EngineConfig(**overrides)
        self.parts = parts = parts or EngineParts()
        device = resolve_device(c.device)
        dtype = resolve_dtype(c.dtype, device)
        block_bytes = kv_bytes_per_block(resolve_model_path(c.model), c.block_size, dtype)
        num_blocks = c.num_blocks or max(1, int(c.kv_cache_memory_mb * 2**20 // block_bytes))
        num_swap_blocks = 0 if c.preemption_mode == "recompute" else int(c.swap_space_mb * 2**20 // block_bytes)
        if c.simulate:
            self.runner = SimulatedRunner(c.model, c.step_cost, num_blocks, c.block_size, num_swap_blocks)
        else:
            self.runner = ModelRunner(c.model, device=device, dtype=dtype, num_blocks=num_blocks,
                                      block_size=c.block_size, attn_backend=c.attn_backend,
                                      num_swap_blocks=num_swap_blocks, decode_attention=parts.paged_decode_attention)
        self.tokenizer = self.runner.tokenizer
        # The simulator leaves outputs as token ids: detokenising 10,000 requests would dominate its time.
        self.detokenize = self.tokenizer is not None and not c.simulate
        model_limit = self.runner.config.max_model_len
        if c.max_model_len is not None and c.max_model_len > model_limit:
            raise ValueError(f"EngineConfig.max_model_len={c.max_model_len} exceeds the model's {model_limit}")
        self.max_model_len = c.max_model_len or model_limit
        # A sequence can never hold more tokens than the whole pool: there it stops, with "length".
        self.max_seq_tokens = min(self.max_model_len, num_blocks * c.block_size)
        if self.max_seq_tokens < self.max_model_len:
            warnings.warn(f"the KV pool holds {self.max_seq_tokens} tokens ({num_blocks} blocks of {c.block_size}), "
                          f"less than one sequence of max_model_len={self.max_model_len}: longer requests stop "
                          "early with finish_reason 'length'. Raise num_blocks or kv_cache_memory_mb, or set "
                          f"max_model_len <= {self.max_seq_tokens}", PoolTooSmallWarning, stacklevel=3)
        self.block_manager = BlockManager(num_blocks, c.block_size, c.kv_reservation, self.max_model_len,
                                          num_swap_blocks, allocator=parts.allocator)
        cost = c.preemption_cost
        if c.preemption_mode == "auto" and cost is None:
            cost = measure_preemption_cost(self.runner) if not c.simulate else simulated_preemption_cost(c)
        if c.batching == "continuous":
            self.scheduler = ContinuousScheduler(self.block_manager, c.max_num_seqs, c.max_num_batched_tokens,
                                                 c.enable_chunked_prefill, c.long_prefill_token_threshold,
                                                 prefill_first=c.schedule_priority == "prefill_first",
                                                 policy=c.scheduling_policy, preemption_mode=c.preemption_mode,
                                                 preemption_cost=cost, leave=parts.requests_that_leave,
                                                 plan=parts.plan_admissions, choose_victim=parts.choose_victim,
                                                 swap_is_cheaper=parts.should_swap)
        else:
            self.scheduler = StaticScheduler(self.block_manager, c.max_num_seqs, c.max_num_batched_tokens,
                                             pad_to_longest=c.batching == "padded")
        self.trace = Trace(num_seats=c.max_num_seqs, max_steps=c.trace_max_steps)
        self.requests: dict[str, Request] = {}
        self._pending_outputs: list[RequestOutput] = []   # rejected or aborted, returned by the next step
        self._unrecorded_preemptions: list[str] = []      # kept for the next StepRecord if a step runs nothing
        self._unrecorded_swaps: list[str] = []
        self._next_id = 0
        self._num_arrivals = 0   # arrival order, which breaks ties of equal arrival times
        self.clock = self.runner.clock

    # --- requests in -------------------------------------------------------------------------

    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids for a prompt, with a clear error for anything the model cannot serve."""
        if isinstance(prompt, dict):
            prompt = prompt_of_dict(prompt)
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError(f"{self.runner.model_path} has no tokenizer files; pass prompts as token-id lists")
            check_unicode(prompt)
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        elif isinstance(prompt, list):
            ids = prompt
        else:
            raise ValueError(f"a prompt of type {type(prompt).__name__} cannot be served; give a string, a list of "
                             "token ids (a tensor or array: .tolist()), or a dict with 'prompt' or 'prompt_token_ids'")
        if not ids:
            raise ValueError("the prompt is empty; give at least one token "
                             "(for Bard, a speaker line such as 'ROMEO.\\n')")
        vocab = self.runner.config.vocab_size
        if any(not is_int(t) or not 0 <= t < vocab for t in ids):
            raise ValueError(f"prompt token ids must be Python integers in [0, {vocab})")
        if len(ids) >= self.max_model_len:
            raise ValueError(f"the prompt has {len(ids)} tokens but the engine serves at most {self.max_model_len} "
                             f"(max_model_len), prompt and output together; shorten the prompt")
        return list(ids)

    def make_request(self, prompt: Prompt, params: SamplingParams | None = None, request_id: str | None = None,
                     arrival_time: float | None = None, priority: int = 0) -> Request:
        """Validate everything about a request and build it, without queueing it: a caller with many
        requests builds them all first, so one bad request queues none."""
        if params is None:
            params = SamplingParams()
        elif not isinstance(params, SamplingParams):
            raise ValueError(f"sampling params must be a SamplingParams, not {type(params).__name__}; "
                             "for a dict d, pass SamplingParams(**d)")
        check_priority(priority)
        if priority != 0 and self.config.scheduling_policy != "priority":
            raise ValueError(f"priority={priority} has no effect under scheduling_policy="
                             f"{self.config.scheduling_policy!r}; set scheduling_policy='priority', or leave it 0")
        ids = self.encode(prompt)
        if request_id is None:
            request_id, self._next_id = str(self._next_id), self._next_id + 1
        seed = params.seed if params.seed is not None else zlib.crc32(f"{self.config.seed}:{request_id}".encode())
        text = prompt if isinstance(prompt, str) else prompt.get("prompt") if isinstance(prompt, dict) else None
        return Request(request_id, text, ids, params, make_generator(seed, self.runner.device),
                       RequestMetrics(arrival_time if arrival_time is not None else self.clock()), priority=priority)

    def add_request(self, prompt: Prompt, params: SamplingParams | None = None, request_id: str | None = None,
                    arrival_time: float | None = None, priority: int = 0) -> str:
        return self.queue(self.make_request(prompt, params, request_id, arrival_time, priority))

    def queue(self, req: Request) -> str:
        """Hand a request from make_request to the scheduler, or reject it at once with the reason."""
        if req.request_id in self.requests:
            raise ValueError(f"request id {req.request_id!r} is already in use; give a new one or None")
        req.arrival_index, self._num_arrivals = self._num_arrivals, self._num_arrivals + 1
        self.requests[req.request_id] = req
        if self.trace.enabled:
            self.trace.arrivals[req.request_id] = req.metrics.arrival_time
        reason = self._why_never_servable(req) or self._why_not_now()
        if reason:
            self._finish_unserved(req, RequestStatus.REJECTED, reason)
        else:
            self.scheduler.add(req)
        return req.request_id

    def _why_not_now(self) -> str | None:
        """Admission control: a full queue turns requests away instead of making everyone slower."""
        limit = self.config.max_waiting
        if limit is not None and len(self.scheduler.waiting) >= limit:
            return f"the queue is full (max_waiting={limit}); retry later, or raise max_waiting"
        return None

    def _reject_stale(self) -> None:
        """Admission control: requests that waited past max_queue_delay_s without starting are REJECTED."""
        delay, now = self.config.max_queue_delay_s, self.clock()
        if delay is None:
            return
        for req in [r for r in self.scheduler.waiting if r.metrics.scheduled_time is None]:
            if now - req.metrics.arrival_time > delay:
                self.scheduler.abort(req)
                self._finish_unserved(req, RequestStatus.REJECTED,
                                      f"not started within max_queue_delay_s={delay}; the server is overloaded")

    def _finish_unserved(self, req: Request, status: RequestStatus, reason: str) -> None:
        """End a request outside a step (rejected, aborted); its output goes back with the next step."""
        req.status, req.reason = status, reason
        req.metrics.finished_time = self.clock()
        self.trace.release(req.request_id)
        self._pending_outputs.append(RequestOutput.of(req))

    def _why_never_servable(self, req: Request) -> str | None:
        bm = self.block_manager
        needed = bm.blocks_to_reserve(req.num_tokens + 1, self.scheduler.reserve_tokens(req))
        if needed > bm.num_blocks:
            return (f"the request needs {needed} KV blocks to start but the whole pool has {bm.num_blocks} "
                    f"({bm.num_blocks * bm.block_size} token slots); raise num_blocks or kv_cache_memory_mb, "
                    "or shorten the prompt")
        if req.num_tokens > self.config.max_num_batched_tokens and not self.config.enable_chunked_prefill:
            return (f"the prompt has {req.num_tokens} tokens, more than max_num_batched_tokens="
                    f"{self.config.max_num_batched_tokens}; raise it or set enable_chunked_prefill=True")
        return None

    def abort(self, request_id: str) -> None:
        req = self.requests.get(request_id)
        if req is None:
            raise KeyError(f"no request with id {request_id!r} is in the engine (a finished request leaves it "
                           "once its result is returned)")
        if req.status.finished:
            return
        self.scheduler.abort(req)
        self._finish_unserved(req, RequestStatus.FINISHED_ABORTED, "aborted by the caller")

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self._pending_outputs)

    # --- one step ----------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        self._reject_stale()
        outputs, self._pending_outputs = self._pending_outputs, []
        start = self.clock()
        out = self.scheduler.schedule()
        self._copy_blocks(out)
        for req in out.preempted:
            req.metrics.num_preemptions += 1
            req.metrics.last_preempted_at = start
            self.trace.release(req.request_id)
            self._unrecorded_preemptions.append(req.request_id)
        self._unrecorded_swaps += [r.request_id for r in out.swapped_out]
        if out.is_empty:
            # A priority preemption emptied the step (the next one admits), or an abort left a static
            # batch with only finished members, which must still be released and returned.
            returned = self.scheduler.update(out)
            for req in returned:
                req.metrics.finished_time = start
                self.trace.release(req.request_id)
            return self._hand_back(outputs + [RequestOutput.of(r) for r in returned])
        batch = self.parts.build_flat_batch(sequence_chunks(out, self.block_manager.tables), self.config.block_size,
                                            self.runner.device)
        logits = self.runner.execute(batch)
        due = [c.request for c in out.chunks if c.completes_known_tokens]
        finite = torch.isfinite(logits).all(dim=-1).tolist()
        for req, ok in zip(due, finite):
            if not ok:   # this request fails alone; everyone else in the batch carries on
                req.status, req.reason = RequestStatus.FINISHED_ERROR, "the model produced NaN or inf logits"
        sampled = [r for r, ok in zip(due, finite) if ok]
        tokens = sample(logits[torch.tensor(finite, dtype=torch.bool, device=logits.device)],
                        [r.params for r in sampled], [r.generator for r in sampled])
        end = self.clock()
        for chunk in out.chunks:
            chunk.request.num_computed_tokens += chunk.num_new_tokens
            if chunk.request.metrics.scheduled_time is None:
                chunk.request.metrics.scheduled_time = start
        for req in out.admitted + out.swapped_in:
            if req.metrics.last_preempted_at is not None:
                req.metrics.preempted_time += start - req.metrics.last_preempted_at
                req.metrics.last_preempted_at = None
        for req, token in zip(sampled, tokens):
            self._append_token(req, token, end)
        returned = self.scheduler.update(out)
        for req in returned:
            req.metrics.finished_time = end   # when the user gets the result, which static batching delays
        self._record(out, start, end, returned, int(batch.attn.seq_lens.sum()))
        shown = due if self.scheduler.streams_tokens else returned
        return self._hand_back(outputs + [RequestOutput.of(r) for r in shown])

    def _hand_back(self, outputs: list[RequestOutput]) -> list[RequestOutput]:
        """A finished request's result goes back exactly once; then the engine forgets it, so a
        long-lived engine holds only the requests still in flight."""
        for output in outputs:
            if output.finished:
                del self.requests[output.request_id]
        return outputs

    def _why_cut_short(self) -> str:
        """Why a request stopped at max_seq_tokens: the model's context, or a pool smaller than it."""
        if self.max_seq_tokens == self.max_model_len:
            return f"prompt + output reached max_model_len={self.max_model_len}"
        return (f"prompt + output reached {self.max_seq_tokens} tokens, all the KV pool holds (num_blocks x "
                "block_size); raise num_blocks or kv_cache_memory_mb")

    def _copy_blocks(self, out: SchedulerOutput) -> None:
        """Run the step's swaps in the order the scheduler decided them, before the forward reuses
        any freed block (see SchedulerOutput.block_copies)."""
        for copy in out.block_copies:
            (self.runner.swap_out if copy.to_cpu else self.runner.swap_in)(copy.pairs)

    def _append_token(self, req: Request, token: int, t: float) -> None:
        """Record a new token, extend the text, and decide whether the request is done."""
        req.output_token_ids.append(token)
        if req.metrics.first_token_time is None:
            req.metrics.first_token_time = t
        req.metrics.token_times.append(t)
        p, eos = req.params, self.runner.config.eos_token_ids
        if self.detokenize and self._extend_text_and_check_stop_strings(req):
            req.status = RequestStatus.FINISHED_STOPPED
            return
        if (token in eos and not p.ignore_eos) or token in p.stop_token_ids:
            req.status = RequestStatus.FINISHED_STOPPED
        elif len(req.output_token_ids) >= p.max_tokens:
            req.status = RequestStatus.FINISHED_LENGTH
        elif req.num_tokens >= self.max_seq_tokens:
            req.status, req.reason = RequestStatus.FINISHED_LENGTH, self._why_cut_short()
        if req.status.finished and self.detokenize:
            # Bytes of an unfinished character were held back; the full decode shows them as U+FFFD.
            req.text = self.tokenizer.decode(req.output_token_ids, skip_special_tokens=True)

    def _extend_text_and_check_stop_strings(self, req: Request) -> bool:
        """Append the new text; True (with the text cut before it) when a stop string appeared."""
        old_len = len(req.text)
        delta, *offsets = new_text(self.tokenizer, req.output_token_ids, *req.detok_offsets)
        req.text, req.detok_offsets = req.text + delta, tuple(offsets)
        cut = find_stop(req.text, req.params, scan_from=old_len)
        if cut is not None:
            req.text = req.text[:cut]
        return cut is not None

    def _record(self, out: SchedulerOutput, start: float, end: float, returned: list[Request],
                context_tokens: int) -> None:
        trace = self.trace
        if not trace.enabled:   # trace_max_steps=0: no record, no seats; the events it would hold are let go
            trace.count_unkept_step()
            self._unrecorded_preemptions, self._unrecorded_swaps = [], []
            return
        seats: dict[int, tuple[str, str]] = {}
        for chunk in out.chunks:
            phase = PREFILL if chunk.prefill else DECODE
            seats[trace.seat_for(chunk.request.request_id)] = (chunk.request.request_id, phase)
        for req in out.idle_slots:
            seats[trace.seat_for(req.request_id)] = (req.request_id, PAD if out.padding else IDLE)
        for req in returned:
            trace.release(req.request_id)
        usage = self.block_manager.usage()
        prefill = sum(c.num_new_tokens for c in out.chunks if c.prefill)
        trace.record(StepRecord(
            step=trace.num_steps, start_time=start, duration=end - start, num_seats=trace.num_seats, seats=seats,
            num_tokens=out.num_tokens, context_tokens=context_tokens, prefill_tokens=prefill,
            decode_tokens=out.num_tokens - prefill, padding_tokens=out.padding_tokens,
            blocks_used=usage.owned_blocks, blocks_free=usage.free_blocks, reserved_slots=usage.reserved_slots,
            token_slots=usage.token_slots, tokens={c.request.request_id: c.num_new_tokens for c in out.chunks},
            admitted=[r.request_id for r in out.admitted],
            finished=[r.request_id for r in returned], preempted=self._unrecorded_preemptions,
            swapped_out=self._unrecorded_swaps, swapped_in=[r.request_id for r in out.swapped_in],
            waiting=len(self.scheduler.waiting),
            kv_blocks=self.block_manager.block_map() if self.config.trace_kv_blocks else None))
        self._unrecorded_preemptions, self._unrecorded_swaps = [], []


class LLM:
    """The offline entry point: `LLM().generate(prompts, params)`, as in vLLM."""

    def __init__(self, model: str | None = None, parts: EngineParts | None = None, **engine_config):
        self.engine = LLMEngine(EngineConfig(model=model, **engine_config), parts)

    def _submit(self, prompts, sampling_params, priority: list[int] | None = None) -> list[str]:
        """Validate every request, then queue them all: a list with one bad request queues none."""
        if isinstance(prompts, (str, dict)) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if not isinstance(prompts, list):
            raise ValueError(f"prompts must be a string, a dict, or a list of them, not {type(prompts).__name__}; "
                             "token ids go in a list (a tensor or array: .tolist())")
        if not prompts:
            raise ValueError("generate() got an empty list of prompts; pass at least one")
        if not isinstance(sampling_params, list):   # one SamplingParams (or None) for every prompt
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(sampling_params)} SamplingParams; "
                             "give one, or one per prompt")
        priority = priority if priority is not None else [0] * len(prompts)
        if len(priority) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(priority)} priorities; give one per prompt")
        engine = self.engine
        requests = [engine.make_request(prompt, params, priority=rank)
                    for prompt, params, rank in zip(prompts, sampling_params, priority)]
        return [engine.queue(req) for req in requests]

    def _abort_unfinished(self, ids: list[str]) -> None:
        """A caller that stops listening (a closed stream, an exception) takes its requests with it,
        so the next call does not run their steps first."""
        for request_id in ids:
            if request_id in self.engine.requests:
                self.engine.abort(request_id)

    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool = True, priority: list[int] | None = None) -> list[RequestOutput]:
        ids = self._submit(prompts, sampling_params, priority)
        wanted = set(ids)
        results: dict[str, RequestOutput] = {}
        try:
            with tqdm(total=len(ids), desc="generate", disable=not use_tqdm, unit="req") as bar:
                while len(results) < len(ids):
                    for output in self.engine.step():
                        if output.finished and output.request_id in wanted:
                            results[output.request_id] = output
                            bar.update()
        finally:
            self._abort_unfinished([i for i in ids if i not in results])
        return [results[i] for i in ids]

    def stream(self, prompts, sampling_params=None) -> Iterator[tuple[int, str, RequestOutput]]:
        """Yield (prompt index, new text, output) as soon as a request has new text to show. The
        pieces of one request add up to its final text. Closing the iterator early (break, an
        exception in the loop) aborts the requests it has not finished."""
        ids = self._submit(prompts, sampling_params)
        index = {rid: i for i, rid in enumerate(ids)}
        shown = dict.fromkeys(ids, 0)
        pending = set(ids)
        try:
            while pending:
                for output in self.engine.step():
                    if output.request_id not in pending:
                        continue
                    text = output.outputs[0].text
                    if output.finished:
                        pending.discard(output.request_id)
                    if len(text) > shown[output.request_id] or output.finished:
                        yield index[output.request_id], text[shown[output.request_id]:], output
                        shown[output.request_id] = len(text)
        finally:
            self._abort_unfinished(list(pending))
