"""`python -m minicb serve`: an OpenAI-compatible HTTP server over AsyncLLM, in the style of vLLM's.

    POST /v1/completions         a prompt (text or token ids); streaming as server-sent events
    POST /v1/chat/completions    for models whose tokenizer has a chat template (Bard has none)
    GET  /v1/models, /health
    GET  /metrics                Prometheus text (minicb:* metrics, see server_metrics.py)
    GET  /debug/trace?since=N    the engine's step records from step N on, for a widget following a live server
                                 (at most 10,000 per call: page on with `next_since`); only with --enable-debug-trace

A request waits for its first output (its first token, or its rejection) before the response starts, so a
request the engine turns away (the queue is over max_waiting, or it waited past max_queue_delay_s) is
answered 503 with Retry-After, streaming or not. A client that disconnects takes its request with it: a
queued one leaves the queue at once, a running one is aborted and its KV blocks are free by the next step.
The HTTP layer schedules nothing; AsyncLLM does.

What one client may cost is bounded (minicb/serve/http_limits.py): a body over --max-request-body-mb is refused
with 413 before it is read whole; a connection that sends nothing for --timeout-keep-alive seconds is
closed, and a request not whole within --request-read-timeout seconds of its first byte gets 408; past
--max-connections, a new connection closes the oldest that has no request in flight. Text prompts are
tokenized, and chats rendered, off the event loop, so /health and every other client keep being answered.
Who may call it (minicb/serve/access.py): with --api-key, only a client that sends the key; a POST only with
a JSON body; and only a request whose Host names the server (a web page elsewhere may not call it).

Shutdown, on SIGTERM or Ctrl-C: the server stops accepting connections at once, lets the requests in flight
finish for up to --shutdown-timeout seconds, then aborts the rest (a stream ends with finish_reason "abort",
a request still waiting for its whole answer gets 503), and the process exits 0.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import aclosing, asynccontextmanager

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from minicb.config import cli_overrides
from minicb.scheduler.request import RequestOutput
from minicb.serve.access import AccessGuard, allowed_hosts, check_json_type, error_response
from minicb.serve.async_llm import AsyncLLM, EngineClosed, EngineError
from minicb.serve.http_limits import (BACKLOG, READ_TIMED_OUT, bounded_protocol, default_max_connections,
                                     log_accept_failures_once, read_body)
from minicb.serve.openapi import openapi_document
from minicb.serve.openai_protocol import (DEFAULT_COMPLETION_MAX_TOKENS, ApiError, ParsedRequest, choice, parse_json,
                                          parse_request, response_body, shown, sse, usage)
from minicb.serve.server_metrics import ServerMetrics

RETRY_AFTER_S = 1   # a rejection reflects the queue now; a second later it may have room
MAX_TRACE_STEPS = 10_000   # per /debug/trace call: the trace keeps up to 100,000 steps, ~270 MB as JSON
log = logging.getLogger("minicb.serve")


def refusal(output: RequestOutput) -> ApiError | None:
    """Why a finished output is not an answer: turned away, aborted (only a shutdown aborts a request
    whose client is still there) or failed."""
    reason = output.outputs[0].finish_reason
    if reason == "rejected":
        return ApiError(503, f"the server turned the request away: {output.reason}", code="rejected",
                        retry_after=RETRY_AFTER_S)
    if reason == "abort":
        return ApiError(503, f"the request was aborted: {output.reason}", code="aborted", retry_after=RETRY_AFTER_S)
    if reason == "error":
        return ApiError(500, f"the request failed: {output.reason}", code="engine_error")
    return None


async def until_disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[Response]) -> Response:
    """Run a handler's work, cancelled if the client goes away first: cancelling generate() aborts the
    request. (Once a stream has started, Starlette's StreamingResponse watches for the same.)"""
    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(until_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        task.cancel()   # nothing once it is done; otherwise the client left, or this handler was cancelled
    await asyncio.wait({task})
    return Response(status_code=499) if task.cancelled() else task.result()   # 499: nobody is there to read it


def build_app(async_llm: AsyncLLM, model_name: str, max_body_bytes: int, debug_trace: bool = False,
              api_key: str | None = None, hosts: set[str] | None = None) -> FastAPI:
    """hosts: the names a request's Host may give (None: any)."""
    metrics = ServerMetrics(async_llm, model_name)
    tokenizer = async_llm.engine.tokenizer

    async def json_body(request: Request) -> dict:
        check_json_type(request.headers.get("content-type"))
        return parse_json(await read_body(request, max_body_bytes))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await async_llm.shutdown()

    app = FastAPI(title="minicb", lifespan=lifespan)

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(AccessGuard, api_key=api_key, hosts=hosts)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        return error_response(err)

    @app.exception_handler(ClientDisconnect)
    async def left_mid_body(request: Request, err: ClientDisconnect) -> Response:
        why = ("did not send it within --request-read-timeout seconds (answered 408)"
               if request.scope.get(READ_TIMED_OUT) else "disconnected")
        log.warning("%s %s: the client %s before sending its whole request; nothing was queued", request.method,
                    request.url.path, why)
        return Response(status_code=499)   # nobody is there to read it

    @app.exception_handler(Exception)
    async def bug(request: Request, err: Exception) -> JSONResponse:
        # Starlette logs the traceback; the client gets no detail of the server's insides.
        return await api_error(request, ApiError(500, "the server failed on this request; it is a bug in minicb, "
                                                      "please report it with the server's log", code="internal_error"))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        error = ApiError(err.status_code, str(err.detail))
        error.headers.update(err.headers or {})   # a 405's Allow (RFC 9110 §15.5.6), for one
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def query_error(request: Request, err: RequestValidationError) -> JSONResponse:
        problem = err.errors()[0]
        where = str(problem["loc"][-1])
        return await api_error(request, ApiError(400, f"{where}: {problem['msg']}", where))

    @app.get("/health")
    async def health() -> Response:
        if async_llm.closed_reason:
            raise ApiError(503, async_llm.closed_reason)
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": int(time.time()),
                                            "owned_by": "minicb", "max_model_len": async_llm.engine.max_model_len}]}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def trace(since: int = 0, limit: int = 1000) -> Response:
        if not 0 <= limit <= MAX_TRACE_STEPS:
            raise ApiError(400, f"limit={limit} is out of range: ask for 0 to {MAX_TRACE_STEPS} steps per call, and "
                                "page on with the answer's next_since", "limit")
        # Megabytes of JSON: built on a thread, so that the streams and /health are answered meanwhile.
        body = await asyncio.to_thread(lambda: json.dumps(async_llm.trace_since(since, limit)).encode())
        return Response(body, media_type="application/json")

    if debug_trace:   # it lists every client's requests and timings: only for a server that asked for it
        app.get("/debug/trace")(trace)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        parsed = parse_request(await json_body(request), False, model_name, DEFAULT_COMPLETION_MAX_TOKENS)
        return await unless_disconnected(request, respond(parsed, parsed.prompt, chat=False))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        if not getattr(tokenizer, "chat_template", None):
            raise ApiError(400, f"model {shown(model_name)} has no chat template, so it cannot serve chat; send a "
                                "plain prompt to /v1/completions instead", "messages", "no_chat_template")
        # A chat's length is up to the model, as OpenAI's is; the engine stops it at max_model_len.
        parsed = parse_request(await json_body(request), True, model_name, async_llm.engine.max_model_len)
        return await unless_disconnected(request, respond(parsed, parsed.prompt, chat=True))

    async def respond(parsed: ParsedRequest, prompt: str | list[int], chat: bool) -> Response:
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        outputs = async_llm.generate(prompt, parsed.params, request_id)
        try:
            first = await anext(outputs)   # the first token, or the rejection: before any byte of the answer
        except ValueError as err:   # the prompt itself (empty, too long, ids out of range): its message says why
            raise ApiError(400, str(err), "messages" if chat else "prompt") from None
        except EngineClosed as err:
            raise ApiError(503, str(err), code="shutting_down", retry_after=RETRY_AFTER_S) from None
        except EngineError as err:
            raise ApiError(500, str(err), code="engine_error") from None
        if err := refusal(first):
            raise err
        if parsed.stream:
            return StreamingResponse(events(outputs, first, request_id, chat, parsed.include_usage),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        final = first
        async with aclosing(outputs):
            try:
                async for final in outputs:
                    pass
            except EngineError as err:
                raise ApiError(500, str(err), code="engine_error") from None
        if err := refusal(final):
            raise err
        text = final.outputs[0].text
        body = response_body(chat, request_id, model_name, [choice(chat, text, final.outputs[0].finish_reason,
                                                                    stream=False)], stream=False)
        return JSONResponse({**body, "usage": usage(final)})

    async def events(outputs: AsyncIterator[RequestOutput], first: RequestOutput, request_id: str, chat: bool,
                     include_usage: bool) -> AsyncIterator[str]:
        """`data: {chunk}` per output that adds text, the last with its finish_reason ("abort" for a request a
        shutdown cut short), then with include_usage a chunk of usage alone, then `data: [DONE]`. A failure
        mid-stream is an event of OpenAI's error shape."""
        def chunk(choices: list[dict], **extra) -> str:
            body = response_body(chat, request_id, model_name, choices, stream=True)
            return sse({**body, **({"usage": None} if include_usage else {}), **extra})

        async with aclosing(outputs):
            output, shown = first, 0
            if chat:
                yield chunk([choice(chat, "", None, stream=True, first=True)])
            while True:
                text, finish = output.outputs[0].text, output.outputs[0].finish_reason
                if finish == "error":
                    yield sse(refusal(output).body)
                    break
                if len(text) > shown or output.finished:
                    yield chunk([choice(chat, text[shown:], finish, stream=True)])
                    shown = max(shown, len(text))
                if output.finished:
                    if include_usage:
                        yield chunk([], usage=usage(output))
                    break
                try:
                    output = await anext(outputs)
                except EngineError as err:
                    yield sse(ApiError(500, str(err), code="engine_error").body)
                    break
        yield sse("[DONE]")

    return app


class GracefulServer(uvicorn.Server):
    """uvicorn, which stops accepting connections on SIGTERM or Ctrl-C and waits for the open ones, plus
    minicb's grace period: AsyncLLM.drain lets the requests in flight finish, then aborts the rest."""

    def __init__(self, config: uvicorn.Config, async_llm: AsyncLLM, model_name: str, grace_s: float):
        super().__init__(config)
        self.async_llm, self.model_name, self.grace_s = async_llm, model_name, grace_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task | None = None

    async def startup(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        log_accept_failures_once(self._loop)
        await super().startup(sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]   # the real port, also for --port 0
            print(f"minicb serving {self.model_name} on http://{host}:{port}", flush=True)

    def handle_exit(self, sig: int, frame) -> None:
        if not self.should_exit and self._loop is not None:   # the first signal starts the grace period
            self._loop.call_soon_threadsafe(self._start_drain)
        super().handle_exit(sig, frame)

    def _start_drain(self) -> None:
        reason = f"the server shut down; the request did not finish within the {self.grace_s:g} s grace period"
        self._drain = asyncio.ensure_future(self.async_llm.drain(self.grace_s, reason))


def serve(args: argparse.Namespace) -> int:
    for flag in ("max_request_body_mb", "timeout_keep_alive", "request_read_timeout", "engine_threads",
                 "max_connections"):
        if getattr(args, flag) is not None and not getattr(args, flag) > 0:   # NaN too
            print(f"error: --{flag.replace('_', '-')} {getattr(args, flag)} is invalid: use a number > 0",
                  file=sys.stderr)
            return 2
    try:
        async_llm = AsyncLLM(args.model, **cli_overrides(args))
    except (ValueError, OSError, ImportError) as err:   # ImportError: a GGUF without the gguf package
        print(f"error: {err}", file=sys.stderr)
        return 2
    # On the CPU, torch's intra-op threads take every core by default, and the event loop (HTTP, SSE,
    # JSON) then fights them for one: on 2 cores that made each step 2.6x slower than offline. One core is
    # left to the loop unless --engine-threads or OMP_NUM_THREADS says otherwise: of the splits measured
    # (bench/serve.py --thread-split, bench/README.md), it served the most on a shared 2-core machine.
    if async_llm.engine.runner.device.type == "cpu":
        if args.engine_threads is not None:
            torch.set_num_threads(args.engine_threads)
        elif "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(max(1, torch.get_num_threads() - 1))
    # minicb's own lines (aborts, failed steps) next to uvicorn's, at the same level.
    logging.basicConfig(level=args.uvicorn_log_level.upper().replace("TRACE", "DEBUG"),
                        format="%(levelname)s:     %(name)s: %(message)s")
    model_name = args.served_model_name or async_llm.engine.config.model or "bard"   # --model, $MINICB_MODEL
    # uvicorn's own deadline is only a backstop: the drain aborts what is left at grace_s, which ends them.
    api_key = args.api_key or os.environ.get("MINICB_API_KEY") or None
    app = build_app(async_llm, model_name, int(args.max_request_body_mb * 2**20), args.enable_debug_trace, api_key,
                    allowed_hosts(args.host, args.allowed_hosts))
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.uvicorn_log_level,
                            timeout_graceful_shutdown=args.shutdown_timeout + 5,
                            timeout_keep_alive=args.timeout_keep_alive, backlog=BACKLOG,
                            http=bounded_protocol(args.request_read_timeout,
                                                  args.max_connections or default_max_connections()))
    # After a signal-driven shutdown uvicorn raises the signal again for the handler that was there before it;
    # the default one would kill the process with the signal's status instead of the clean exit 0.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    GracefulServer(config, async_llm, model_name, args.shutdown_timeout).run()
    return 0
