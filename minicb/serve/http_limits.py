"""What one client may cost the server before its request is even parsed: a bound on the body's size, and
deadlines for connections that send nothing, or stop halfway through a request.

uvicorn's own keep-alive timer starts only once a first response is sent, and nothing times out a request
whose headers or body stop arriving, so a few hundred silent sockets stay open for good. DeadlineH11Protocol
adds both deadlines to uvicorn's h11 protocol.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import h11
from starlette.requests import Request
from uvicorn.protocols.http.h11_impl import H11Protocol

from minicb.serve.openai_protocol import ApiError

log = logging.getLogger("minicb.serve")
READ_TIMED_OUT = "minicb.read_timed_out"   # set in a request's ASGI scope when its body stopped arriving


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The whole body, refused with 413 as soon as it is known to be over max_bytes: from Content-Length
    before any of it is read, else while it arrives, so an oversized body is never held whole."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise body_too_large(int(declared), max_bytes)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise body_too_large(len(body), max_bytes, at_least=True)
    return bytes(body)


def body_too_large(size: int, max_bytes: int, at_least: bool = False) -> ApiError:
    return ApiError(413, f"the request body has {'more than ' if at_least else ''}{size} bytes, over the server's "
                         f"limit of {max_bytes} (--max-request-body-mb {max_bytes / 2**20:g}); shorten the prompt, or "
                         "start the server with a larger --max-request-body-mb", code="request_too_large",
                    close_connection=True)


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with two deadlines more: a new connection that sends nothing is closed after
    timeout_keep_alive seconds (uvicorn's timer covers only the idle time after a response), and a request
    whose headers or body stop arriving for read_timeout seconds is answered 408 and closed.
    A server that has paused reading (its app is slow to take the body) never blames the client."""

    read_timeout: float = 30.0   # set by protocol_with_read_timeout

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._read_deadline: asyncio.TimerHandle | None = None
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._cancel_read_deadline()
        if self._request_incomplete() and not self.transport.is_closing():
            self._read_deadline = self.loop.call_later(self.read_timeout, self._request_stalled)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read_deadline()
        super().connection_lost(exc)

    def _cancel_read_deadline(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _request_incomplete(self) -> bool:
        """Headers begun but not ended, or a body not yet whole."""
        state = self.conn.their_state
        return state is h11.SEND_BODY or (state is h11.IDLE and bool(self.conn.trailing_data[0]))

    def _request_stalled(self) -> None:
        self._read_deadline = None
        if not self._request_incomplete() or self.transport.is_closing():
            return
        if self.flow.read_paused:   # the server is the slow one: give the client its time again
            self._read_deadline = self.loop.call_later(self.read_timeout, self._request_stalled)
            return
        cycle = self.cycle if self.cycle is not None and not self.cycle.response_complete else None
        if cycle is None or not cycle.response_started:
            self.transport.write(timeout_response(self.read_timeout))
        if cycle is None:
            log.warning("closed a connection whose request headers stopped arriving for %g s (--request-read-timeout)",
                        self.read_timeout)
        else:   # the app, which is reading the body, logs it in one line when it sees the disconnect
            cycle.scope[READ_TIMED_OUT] = True  # type: ignore[literal-required]
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()


def protocol_with_read_timeout(read_timeout: float) -> type[DeadlineH11Protocol]:
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"read_timeout": read_timeout})


def timeout_response(read_timeout: float) -> bytes:
    """A whole 408 in OpenAI's error shape, written straight to the socket: h11 cannot send a response to
    a request whose headers it never finished reading."""
    error: dict[str, Any] = ApiError(408, f"the request stopped arriving for {read_timeout:g} s "
                                          "(--request-read-timeout); send it whole, without pauses",
                                     code="request_timeout").body
    body = json.dumps(error).encode()
    head = (f"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode()
    return head + body
