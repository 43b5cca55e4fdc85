"""What one client may cost the server before its request is even parsed: a bound on the body's size,
deadlines for connections that send nothing or send slowly, and a bound on open connections.

uvicorn's own keep-alive timer starts only once a first response is sent, and nothing times out a request
whose headers or body arrive slowly, so a few hundred slow sockets stay open for good. DeadlineH11Protocol
adds the bounds to uvicorn's h11 protocol.
"""
from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from typing import Any

import h11
from starlette.requests import Request
from uvicorn.protocols.http.h11_impl import H11Protocol

from minicb.serve.openai_protocol import ApiError

log = logging.getLogger("minicb.serve")
READ_TIMED_OUT = "minicb.read_timed_out"   # set in a request's ASGI scope when its body stopped arriving
# asyncio accepts up to BACKLOG connections a turn of the loop, and a connection is closed for room two turns
# after it is accepted (measured: 2 x BACKLOG over the bound at worst): the reserve covers it and the log.
BACKLOG = 128
FD_RESERVE = 3 * BACKLOG


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
    """uvicorn's h11 protocol, bounded against slow and numerous clients:
    - a new connection that sends nothing is closed after timeout_keep_alive seconds (uvicorn's timer covers
      only the idle time after a response);
    - a request has read_timeout seconds in all, from its first byte, to arrive whole (headers and body), or it
      is answered 408 and closed: a deadline that restarted at every byte let 1 byte a second hold it forever.
      A server that has paused reading (its app is slow to take the body) never blames the client;
    - at max_connections open, a new connection closes the oldest that has no request in flight (idle, or
      still sending), so a flood of slow clients cannot take every file descriptor and shut out /health;
    - a response that closes the connection before the request's body was read (a 413) closes as RFC 9112
      §9.6 says: send the answer, stop sending, read and drop what the client still sends for a bounded
      time, then close. Closing at once with the body unread resets the connection, and a client still
      sending it never reads the answer."""

    read_timeout: float = 30.0   # set by bounded_protocol
    max_connections: int = 1000

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.opened_at = self.loop.time()
        self._read_deadline: asyncio.TimerHandle | None = None
        self._lingering = False
        self.transport = LingeringTransport(transport, self)   # what the request cycles get, too
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)
        if len(self.connections) > self.max_connections:
            self._make_room()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return   # the rest of a refused body: dropped
        super().data_received(data)
        if not self._request_incomplete():
            self._cancel_read_deadline()
        elif self._read_deadline is None and not self.transport.is_closing():
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

    def _in_flight(self) -> bool:
        """A whole request whose answer is not yet sent: the one kind of connection never closed for room."""
        return self.cycle is not None and not self.cycle.response_complete and not self._request_incomplete()

    def _make_room(self) -> None:
        # A connection closed a moment ago is still in the set until its descriptor is freed: skip it.
        idle = [c for c in self.connections
                if c is not self and not c._in_flight() and not c.transport.is_closing()]
        victim = min(idle, key=lambda c: c.opened_at, default=self)
        CONNECTION_FLOOD.log(f"{len(self.connections)} connections are open, over --max-connections "
                             f"{self.max_connections}: closed the oldest with no request in flight")
        victim.transport.raw.close()

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
            SLOW_HEADERS.log(f"closed a connection whose request headers did not arrive whole within "
                             f"{self.read_timeout:g} s (--request-read-timeout)")
        else:   # the app, which is reading the body, logs it in one line when it sees the disconnect
            cycle.scope[READ_TIMED_OUT] = True  # type: ignore[literal-required]
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.raw.close()   # a stalled client sends nothing more to linger for

    def linger(self) -> None:
        """Half-close, drop what still arrives, and close when the client does or read_timeout has passed."""
        self._lingering = True
        self._cancel_read_deadline()
        self.transport.write_eof()
        self.loop.call_later(self.read_timeout, self.transport.raw.abort)


class LingeringTransport:
    """The connection's transport, whose close() lingers while the client is still sending a request body."""

    def __init__(self, transport: asyncio.Transport, protocol: DeadlineH11Protocol):
        self.raw, self._protocol = transport, protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def close(self) -> None:
        if self._protocol.conn.their_state is h11.SEND_BODY and not self.raw.is_closing():
            self._protocol.linger()
        else:
            self.raw.close()


class OncePerMinute:
    """A log line for an event that can come thousands of times a second: the first, then a count each minute."""

    def __init__(self) -> None:
        self.last, self.unsaid = -60.0, 0

    def log(self, message: str) -> None:
        now = time.monotonic()
        if now - self.last < 60:
            self.unsaid += 1
            return
        more = f" (and {self.unsaid} more times in the last minute)" if self.unsaid else ""
        log.warning("%s%s", message, more)
        self.last, self.unsaid = now, 0


CONNECTION_FLOOD, SLOW_HEADERS, NO_DESCRIPTORS = OncePerMinute(), OncePerMinute(), OncePerMinute()


def bounded_protocol(read_timeout: float, max_connections: int) -> type[DeadlineH11Protocol]:
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,),
                {"read_timeout": read_timeout, "max_connections": max_connections})


def default_max_connections() -> int:
    """What the process's file-descriptor limit leaves after FD_RESERVE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, soft - FD_RESERVE)


def log_accept_failures_once(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio logs a traceback for every accept() that finds no descriptor free, up to thousands a second:
    132 MB in a minute under a flood. Say it once a minute instead."""
    def handler(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        if context.get("message") == "socket.accept() out of system resource":
            NO_DESCRIPTORS.log("accept() found no file descriptor free (ulimit -n); lower --max-connections")
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


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
