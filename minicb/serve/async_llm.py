"""AsyncLLM: the engine behind an asyncio server, as vLLM's AsyncLLM is.

One background task owns the engine. It steps while any request is unfinished and sleeps on an event
when none is, so an idle server costs nothing. Each step runs on one engine thread, off the event loop,
so HTTP keeps answering while the model computes.

Only that task adds requests and aborts running ones: generate() and abort() queue their adds and
aborts, and the task applies them between steps, so nothing races a step's decisions, and no handler
waits out a step in progress. The one exception: a caller that leaves takes its queued request out at
once, even mid-step (LLMEngine.abort_if_waiting, under the engine's lock, which a step releases for its
forward). Validation and tokenisation (make_request) change nothing in the engine, so they run at once
on a thread of their own, the event loop answering meanwhile, and a bad request fails there.
"""
from __future__ import annotations

import asyncio
import bisect
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from jinja2 import TemplateError

from minicb.config import EngineConfig
from minicb.engine import LLMEngine
from minicb.parts import EngineParts
from minicb.prompts import Prompt, prompt_text
from minicb.sampling import SamplingParams
from minicb.scheduler.request import Request, RequestOutput

log = logging.getLogger("minicb.serve")
LEFT_EARLY = "the client stopped reading before it finished (disconnected, cancelled, or failed)"


class EngineError(RuntimeError):
    """A step failed: every request in flight fails with it (the message says which error)."""


class EngineClosed(RuntimeError):
    """The engine is shutting down, or died, and takes no new requests."""


@dataclass
class ServingStats:
    """What a /metrics scrape reads: the pool after the latest step, and totals since start."""
    num_running: int = 0
    num_waiting: int = 0
    num_swapped: int = 0
    kv_cache_usage: float = 0.0        # fraction of the KV pool's blocks in use
    num_preemptions: int = 0
    prompt_tokens: int = 0             # counted once a request's prompt is prefilled (its first token)
    generation_tokens: int = 0
    prefix_cache_queries: int = 0      # prompt tokens looked up in the prefix cache (vLLM's counter), once per request
    prefix_cache_hits: int = 0         # of those, the tokens found there: hits / queries is the hit rate
    finished: Counter = field(default_factory=Counter)   # finish reason -> requests, aborted and rejected too


class _OutputStream:
    """A request's mailbox. A RequestOutput holds everything generated so far, so a reader that falls
    behind loses nothing by seeing only the newest one, and a slow client cannot pile up outputs."""

    def __init__(self):
        self._item: RequestOutput | BaseException | None = None
        self._ready = asyncio.Event()

    def put(self, item: RequestOutput | BaseException) -> None:
        if not isinstance(self._item, BaseException):   # an error is never overwritten
            self._item = item
        self._ready.set()

    async def get(self) -> RequestOutput | BaseException:
        await self._ready.wait()
        self._ready.clear()
        item, self._item = self._item, None
        return item


class AsyncLLM:
    def __init__(self, model: str | None = None, parts: EngineParts | None = None, **engine_config):
        self.engine = LLMEngine(EngineConfig(model=model, **engine_config), parts)
        self.stats = ServingStats()
        self.finished_listeners: list[Callable[[RequestOutput], None]] = []   # e.g. the latency histograms
        self._streams: dict[str, _OutputStream] = {}
        self._tokenizing: set[str] = set()   # request ids taken by prompts still in the tokenizer
        # ("add", request, ""), ("abort", request id, reason) or ("abort_all", "", reason), in arrival order
        self._ops: list[tuple[str, Request | str, str]] = []
        self._tokens_seen: dict[str, int] = {}   # request id -> output tokens counted in the stats
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()   # set while the engine has nothing to do
        self._idle.set()
        # One thread for every step: torch's per-thread state (grad mode, the CUDA stream) stays the same.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minicb-engine")
        # One for tokenizing, in arrival order: a long prompt never blocks the event loop or a step.
        self._tokenizer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minicb-tokenizer")
        self._token_chars: int | None = None   # see _longest_token_chars; 0: no bound for this tokenizer
        self._loop_task: asyncio.Task | None = None
        self._closed: str | None = None   # why new requests are refused, once shutting down or dead

    # --- requests ---------------------------------------------------------------------------------

    async def generate(self, prompt: Prompt | list[dict], params: SamplingParams | None = None,
                       request_id: str | None = None) -> AsyncIterator[RequestOutput]:
        """Yield the request's output after each step that changed it, the last one finished. A list of
        messages ({"role", "content"}) is a chat, rendered by the model's chat template. A request
        the engine turned away ends at once with finish_reason "rejected" (and `reason`). Bad input raises
        ValueError; a failed step raises EngineError. Leaving early (break, an exception, cancellation)
        aborts the request: a queued one leaves at once, a running one's KV blocks are free by the next
        step. Close the iterator (contextlib.aclosing), or the event loop closes it when it is garbage."""
        if self._closed:
            raise EngineClosed(self._closed)
        request_id = request_id or uuid.uuid4().hex
        if request_id in self._streams or request_id in self._tokenizing or request_id in self.engine.requests:
            raise ValueError(f"request id {request_id!r} is already in use; give a new one or None")
        self._tokenizing.add(request_id)
        try:
            req = await asyncio.get_running_loop().run_in_executor(self._tokenizer, self._make_request, prompt,
                                                                   params, request_id)
        finally:
            self._tokenizing.discard(request_id)
        if self._closed:   # the server began to shut down while this prompt was being tokenized
            raise EngineClosed(self._closed)
        stream = self._streams[request_id] = _OutputStream()
        self._submit(("add", req, ""))
        finished = False
        try:
            while not finished:
                item = await stream.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
        finally:
            self._streams.pop(request_id, None)
            if not finished:
                self._leave(request_id)

    def _make_request(self, prompt: Prompt | list[dict], params: SamplingParams | None, request_id: str) -> Request:
        """In the tokenizer's thread, so the event loop answers meanwhile: a chat template took 3.4 s over
        120,000 messages. A text prompt that cannot fit max_model_len whatever its tokens are is refused
        before it is tokenized (50 MB took 90 s)."""
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
            try:
                prompt = self.engine.tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            except TemplateError as err:
                raise ValueError(f"the model's chat template refused the messages: {err}") from None
        text = prompt_text(prompt)
        limit = self.engine.max_model_len
        if text is not None and len(text) >= limit:   # shorter texts cannot be refused by the bound below
            longest = self._longest_token_chars()
            if longest is not None and -(-len(text) // longest) >= limit:
                raise ValueError(f"the prompt has at least {-(-len(text) // longest)} tokens ({len(text)} characters, "
                                 f"and no token of this model is longer than {longest}) but the engine serves at "
                                 f"most {limit} (max_model_len), prompt and output together; shorten the prompt")
        return self.engine.make_request(prompt, params, request_id)

    def _longest_token_chars(self) -> int | None:
        """A bound on the characters one token covers: its decoded bytes, plus 1 for a leading space a
        decoder strips. None where the tokenizer may delete text first (a normalizer), so no bound holds."""
        if self._token_chars is None:
            tokenizer = self.engine.tokenizer
            backend = getattr(tokenizer, "backend_tokenizer", None)
            if tokenizer is None or backend is None or backend.normalizer is not None:
                self._token_chars = 0
            else:
                pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))],
                                                clean_up_tokenization_spaces=False)
                self._token_chars = max(len(p.encode()) for p in pieces) + 1
        return self._token_chars or None

    def _leave(self, request_id: str) -> None:
        """The caller stopped reading: a queued request leaves at once, even mid-step (the step in progress
        may be a long prefill); one that runs is aborted at the step's end, which frees its KV blocks."""
        if self.engine.abort_if_waiting(request_id, LEFT_EARLY):
            self.stats.num_waiting = self.engine.scheduler.num_waiting   # /metrics shows it gone now
        self._submit(("abort", request_id, LEFT_EARLY))   # also wakes the loop to hand the output back

    def abort(self, request_id: str, reason: str = "aborted by the caller") -> None:
        """Abort at the next step boundary; its stream ends with finish_reason "abort". Unknown or
        finished ids are ignored: a request may finish while the abort is on its way."""
        self._submit(("abort", request_id, reason))

    def abort_all(self, reason: str) -> None:
        """Abort every request in the engine, and those on their way in, at the next step boundary."""
        self._submit(("abort_all", "", reason))

    @property
    def closed_reason(self) -> str | None:
        """Why new requests are refused (shutting down, or the loop died); None while serving."""
        return self._closed

    def trace_since(self, since: int, limit: int = 1000) -> dict:
        """The trace's step records from step `since` on (at most `limit`), as plain data, and the `since`
        to ask with next. A step the trace no longer keeps is skipped: `first_kept_step` says so."""
        trace = self.engine.trace
        steps = list(trace.steps)   # one copy, taken at once: the engine thread appends while we read
        start = bisect.bisect_left(steps, since, key=lambda record: record.step)
        rows = [record.to_row() for record in steps[start:start + max(0, limit)]]
        return {"enabled": trace.enabled, "num_seats": trace.num_seats,
                "first_kept_step": steps[0].step if steps else trace.num_steps,
                "next_since": rows[-1]["step"] + 1 if rows else max(since, 0), "steps": rows}

    def _submit(self, op: tuple[str, Request | str, str]) -> None:
        if self._loop_task is not None and self._loop_task.done():
            return   # stopped: generate() refuses new requests, and an abort has nothing left to abort
        self._ops.append(op)
        self._idle.clear()
        self._wake.set()
        if self._loop_task is None:   # started here, not in __init__: it needs the running event loop
            self._loop_task = asyncio.get_running_loop().create_task(self._run(), name="minicb-engine-loop")

    # --- the loop ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                self._apply_ops()
                self._update_stats()
                if not self.engine.has_unfinished_requests():
                    # No await between the check and the wait: an add cannot slip in unseen.
                    self._wake.clear()
                    self._idle.set()
                    await self._wake.wait()
                    continue
                try:
                    outputs = await loop.run_in_executor(self._executor, self.engine.step)
                except Exception as err:
                    self._fail_all(err)
                    continue
                self._deliver(outputs)
            except Exception as err:   # a bug outside the step: refuse new work rather than hang anyone
                log.exception("the engine loop failed; the server takes no more requests")
                self._closed = f"the engine loop failed ({err!r}); restart the server"
                self._fail_streams(EngineClosed(self._closed))
                self._idle.set()
                return

    def _apply_ops(self) -> None:
        ops, self._ops = self._ops, []
        for kind, target, reason in ops:
            if kind == "add":
                try:
                    self.engine.queue(target)
                except ValueError as err:   # its id was reused while the old request was still leaving
                    self._streams.get(target.request_id, _OutputStream()).put(err)
            elif kind == "abort" and target in self.engine.requests:
                self.engine.abort(target, reason)
            elif kind == "abort_all":
                self._abort_everything(reason)

    def _unfinished(self) -> list[str]:
        return [rid for rid, req in self.engine.requests.items() if not req.status.finished]

    def _abort_everything(self, reason: str) -> None:
        unfinished = self._unfinished()
        for request_id in unfinished:
            self.engine.abort(request_id, reason)
        if unfinished:
            log.warning("aborted %d unfinished requests: %s", len(unfinished), reason)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for output in outputs:
            self._count(output)
            stream = self._streams.get(output.request_id)
            if stream is not None:
                stream.put(output)
            elif output.finished and output.outputs[0].finish_reason == "abort":
                log.info("request %s aborted: %s", output.request_id, output.reason)
            if output.finished:
                for listener in self.finished_listeners:
                    listener(output)

    def _fail_all(self, err: Exception) -> None:
        """Fail every request in flight with the step's error (finish_reason "error", as /metrics counts
        them): what a half-done step left in their state cannot be trusted, and the pool must be freed. The
        engine stays up for the requests that come next."""
        log.error("an engine step failed: %r; failing the %d requests in flight", err, len(self._streams))
        reason = f"an engine step failed: {err!r}"
        self._fail_streams(EngineError(reason))
        for request_id in self._unfinished():
            self.engine.fail(request_id, reason)

    def _fail_streams(self, error: Exception) -> None:
        for stream in self._streams.values():
            stream.put(error)

    def _count(self, output: RequestOutput) -> None:
        completion = output.outputs[0]
        seen = self._tokens_seen.pop(output.request_id, 0)
        if completion.token_ids and not seen:
            self.stats.prompt_tokens += len(output.prompt_token_ids)
            if self.engine.config.enable_prefix_caching:
                self.stats.prefix_cache_queries += len(output.prompt_token_ids)
                self.stats.prefix_cache_hits += output.num_cached_tokens
        self.stats.generation_tokens += len(completion.token_ids) - seen
        if output.finished:
            self.stats.finished[completion.finish_reason] += 1
        elif completion.token_ids:
            self._tokens_seen[output.request_id] = len(completion.token_ids)

    def _update_stats(self) -> None:
        sched, s = self.engine.scheduler, self.stats
        usage = sched.kv.usage()
        s.num_running, s.num_waiting, s.num_swapped = sched.num_running, sched.num_waiting, sched.num_swapped
        s.kv_cache_usage = usage.owned_blocks / usage.num_blocks
        s.num_preemptions = self.engine.num_preemptions

    # --- the end ----------------------------------------------------------------------------------

    async def drain(self, timeout: float, reason: str) -> None:
        """Refuse new requests, give those in flight up to `timeout` seconds to finish, then abort the
        rest with `reason` (their streams end with finish_reason "abort")."""
        self._closed = self._closed or "the server is shutting down; retry on another replica or later"
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            self.abort_all(reason)
            await self._idle.wait()

    async def shutdown(self) -> None:
        """Abort whatever is left, stop the loop, and let the step in progress end."""
        await self.drain(0, "the server shut down")
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        self._executor.shutdown(wait=True)
        self._tokenizer.shutdown(wait=True, cancel_futures=True)
