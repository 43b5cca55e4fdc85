"""Who may use the server: an optional API key, the Host a request names, and the type of a POST body.
Each refusal comes before a byte of the body is read.

A server on 127.0.0.1 is still reachable from the learner's browser. Any web page can post to it as a
form (text/plain asks no permission), and a page on a domain that a DNS trick points at 127.0.0.1 reads
the answers too: its requests name the attacker's domain in Host. So POST bodies must be JSON, the Host
must name the address the server is bound to, and with --api-key every route but /health needs the key.
"""
from __future__ import annotations

import hmac
import ipaddress
import json

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from minicb.serve.openai_protocol import ApiError

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "[::1]"}


class AsciiJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped: a lone surrogate a client sent (as a field's name, say)
    cannot be encoded as UTF-8, and an error that quotes it must still be sent."""

    def render(self, content: object) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode()


def error_response(err: ApiError) -> JSONResponse:
    return AsciiJSONResponse(err.body, err.http_status, headers=err.headers)


def allowed_hosts(bound_host: str, given: list[str] | None) -> set[str] | None:
    """The names a request's Host may give (None: any). By default those of the bound address: any
    for a server bound to every interface (0.0.0.0, ::), whose names the server cannot know."""
    if given:
        return None if "*" in given else {h.lower() for h in given}
    try:
        address = ipaddress.ip_address(bound_host)
    except ValueError:
        return {bound_host.lower()}   # a name, such as localhost
    if address.is_unspecified:
        return None
    names = {f"[{address}]" if address.version == 6 else str(address)}
    return names | LOOPBACK_NAMES if address.is_loopback else names


def host_name(host: str) -> str:
    """The Host header without its port: 127.0.0.1:8000 -> 127.0.0.1, [::1]:8000 -> [::1]."""
    host = host.lower()
    return host[:host.index("]") + 1] if host.startswith("[") and "]" in host else host.rsplit(":", 1)[0]


class AccessGuard:
    """ASGI middleware: the Host and the API key, checked before the app sees the request."""

    def __init__(self, app: ASGIApp, api_key: str | None, hosts: set[str] | None):
        self.app, self.api_key, self.hosts = app, api_key, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (err := self.refusal(scope)) is not None:
            await error_response(err)(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> ApiError | None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if self.hosts is not None and host_name(host) not in self.hosts:
            return ApiError(421, f"Host {host!r} is not this server's: it answers to {sorted(self.hosts)}; start it "
                                 "with --allowed-hosts to add names (a page on another site may not call it)",
                            code="misdirected_request")
        if self.api_key is not None and scope["path"] != "/health":
            given = headers.get("authorization", "").removeprefix("Bearer ").encode()
            if not hmac.compare_digest(given, self.api_key.encode()):
                err = ApiError(401, "a missing or wrong API key: send the header 'Authorization: Bearer KEY', with "
                                    "the key the server was started with (--api-key)", code="invalid_api_key")
                err.headers["WWW-Authenticate"] = "Bearer"
                return err
        return None


def check_json_type(content_type: str | None) -> None:
    """A POST body must say it is JSON: a web page can send text/plain or a form to any site unasked."""
    given = (content_type or "").split(";")[0].strip().lower()
    if given != "application/json":
        raise ApiError(415, f"the body's Content-Type is {given or 'not given'}; send JSON with "
                            "'Content-Type: application/json'", code="unsupported_media_type")
