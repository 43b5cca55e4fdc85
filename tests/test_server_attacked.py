"""`python -m minicb serve` under the attacks of issues 23 and 44: huge bodies and prompts, many stop strings,
deep JSON and huge numbers, bursts against --max-waiting, clients that stop mid-body, say nothing or
trickle, queued requests whose clients leave during a long step, a sampling value that would fail a step,
a flood of connections, other sites' pages, and costly chats and traces.

Most tests share one subprocess server. Two orderings need a step or a tokenization held on purpose: those
run a real uvicorn server on loopback inside this process, with the engine's forward or its tokenizer
gated by an Event, so that what must happen meanwhile is checked while it is certainly still held."""
from __future__ import annotations

import asyncio
import http.client
import json
import resource
import select
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, ExitStack, contextmanager

import httpx
import pytest
import uvicorn

from minicb.serve import openapi
from minicb.serve.api_server import build_app
from minicb.serve.async_llm import AsyncLLM
from minicb.serve.bench_client import run_benchmark
from minicb.serve.server_process import metric, start_server

PROMPT = "ROMEO.\n"
LONG = {"prompt": PROMPT, "max_tokens": 1000, "ignore_eos": True, "stream": True}   # outlasts any test's wait
MAX_BODY = 2**20   # the module server's --max-request-body-mb 1
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server():
    with start_server("--max-num-seqs", "32", "--max-waiting", "2", "--max-request-body-mb", "1",
                      "--timeout-keep-alive", "1", "--request-read-timeout", "1") as server:
        yield server


def wait_for(condition, timeout: float = 20, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not hold within {timeout} s"
        time.sleep(0.02)


def pool_is_whole(url: str) -> bool:
    page = httpx.get(url + "/metrics", timeout=10).text
    return all(metric(page, f"minicb:{name}") == 0
               for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"))


def error_of(answer: httpx.Response, status: int) -> dict:
    assert answer.status_code == status, answer.text[:300]
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def raw_request(path: str, body: bytes, declared_length: int | None = None) -> bytes:
    length = len(body) if declared_length is None else declared_length
    return (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {length}\r\n\r\n").encode() + body


def read_until_closed(sock: socket.socket) -> bytes:
    sock.settimeout(30)   # a generous bound, not a measurement: the server's own deadline is 1 s
    received = b""
    while piece := sock.recv(65536):
        received += piece
    return received


# --- bodies and prompts -----------------------------------------------------------------------------

def test_a_body_over_the_limit_is_refused_413_naming_the_flag_declared_or_not(server):
    declared = httpx.post(server.url + "/v1/completions", json={"prompt": "x" * MAX_BODY}, timeout=60)
    error = error_of(declared, 413)
    assert "--max-request-body-mb 1" in error["message"] and error["code"] == "request_too_large"
    assert declared.headers["connection"] == "close"   # the rest of the body is never read

    def chunked():   # no Content-Length: the limit is enforced while the body arrives
        yield b'{"prompt": "'
        for _ in range(MAX_BODY // 65536 + 2):
            yield b"x" * 65536
        yield b'"}'

    streamed = httpx.post(server.url + "/v1/completions", content=chunked(), timeout=60, headers=JSON)
    assert "more than" in error_of(streamed, 413)["message"]
    assert httpx.get(server.url + "/health").status_code == 200


def test_a_prompt_too_long_for_any_tokenization_is_refused_before_tokenizing(server, bard_llm):
    text = "ROMEO.\n" * (MAX_BODY // 10)   # under the body limit, "\\n" taking 2 bytes of JSON
    error = error_of(httpx.post(server.url + "/v1/completions", json={"prompt": text}, timeout=60), 400)
    assert error["param"] == "prompt" and "at least" in error["message"] and "max_model_len" in error["message"]
    fewest = int(error["message"].split("at least ")[1].split()[0])
    assert fewest >= bard_llm.engine.max_model_len
    tokens = len(bard_llm.engine.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert fewest <= tokens, "the bound is a true lower bound on the token count"
    short_enough = bard_llm.engine.tokenizer.decode(list(range(10, 10 + 500)))
    assert httpx.post(server.url + "/v1/completions", json={"prompt": short_enough, "max_tokens": 2},
                      timeout=60).status_code == 200, "a prompt that fits is never refused by the bound"


def test_stop_strings_are_bounded_in_number_and_length(server):
    def refused(stop) -> str:
        body = {"prompt": PROMPT, "max_tokens": 2, "stop": stop}
        return error_of(httpx.post(server.url + "/v1/completions", json=body, timeout=30), 400)["message"]

    assert "stop has 5 strings; send at most 4" in refused(["a", "b", "c", "d", "e"])
    assert "stop has 8000 strings" in refused(["x" * 100] * 8000)
    assert "stop[1] has 129 characters; send stop strings of at most 128" in refused(["ok", "y" * 129])
    fine = httpx.post(server.url + "/v1/completions", timeout=30,
                      json={"prompt": PROMPT, "max_tokens": 2, "stop": ["a", "b", "c", "z" * 128]})
    assert fine.status_code == 200


@pytest.mark.parametrize("body, words", [
    (b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nests too deeply"),
    (b'{"prompt": "ROMEO.\\n", "max_tokens": ' + b"9" * 5000 + b"}", "a number too long to read"),
], ids=["deep", "huge-int"])
def test_deep_json_and_huge_numbers_get_400_and_the_connection_stays_usable(server, body, words):
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", "/v1/completions", body, {"content-type": "application/json"})
        refused = connection.getresponse()
        text = refused.read().decode()
        assert refused.status == 400 and words in text and '"invalid_request_error"' in text
        first_port = connection.sock.getsockname()[1]
        connection.request("POST", "/v1/completions", b'{"prompt": "ROMEO.\\n", "max_tokens": 2}',
                           {"content-type": "application/json"})
        served = connection.getresponse()
        assert served.status == 200 and b'"finish_reason"' in served.read()
        assert connection.sock.getsockname()[1] == first_port, "both answers came on the same connection"
    finally:
        connection.close()


# --- admission --------------------------------------------------------------------------------------

def test_max_waiting_counts_only_requests_without_a_seat(server):
    rejected_before = server.metric("minicb:request_success_total", finished_reason="rejected")

    async def burst(n: int, settle) -> list[int | None]:
        """n streams at once; the statuses that came back once `settle` holds (None: still waiting)."""
        limits = httpx.Limits(max_connections=n + 5, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:
            statuses: list[int | None] = [None] * n

            async def one(i: int) -> None:
                async with client.stream("POST", "/v1/completions", json=LONG) as response:
                    statuses[i] = response.status_code
                    await asyncio.sleep(3600)   # hold the seat until cancelled

            tasks = [asyncio.create_task(one(i)) for i in range(n)]
            deadline = time.monotonic() + 60
            while not settle(statuses):
                assert time.monotonic() < deadline, f"statuses {statuses}"
                await asyncio.sleep(0.05)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return statuses

    # 8 at once on an idle server with 32 seats and --max-waiting 2: none waits, none is refused.
    assert asyncio.run(burst(8, lambda s: None not in s)) == [200] * 8
    wait_for(lambda: pool_is_whole(server.url), what="an empty pool")
    # 40 at once: 32 take the seats, 2 may wait, and the other 6 are refused, however they arrive.
    statuses = asyncio.run(burst(40, lambda s: s.count(200) == 32 and s.count(503) == 6
                                 and server.metric("minicb:num_requests_waiting") == 2))
    assert statuses.count(None) == 2
    assert server.metric("minicb:request_success_total", finished_reason="rejected") == rejected_before + 6
    wait_for(lambda: pool_is_whole(server.url), what="an empty pool")


# --- connections ------------------------------------------------------------------------------------

def test_a_client_that_stops_mid_body_is_one_line_in_the_log(server):
    host, port = server.url.removeprefix("http://").split(":")
    said = "the client disconnected before sending its whole request"
    before = server.log().count(said)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(raw_request("/v1/completions", b'{"prompt": "ROM', declared_length=1000))
        time.sleep(0.2)
    wait_for(lambda: server.log().count(said) == before + 1, what="the disconnect's log line")
    log = server.log()
    assert "Traceback" not in log and "ClientDisconnect" not in log
    assert httpx.get(server.url + "/health").status_code == 200


def test_a_silent_partial_request_gets_408_and_is_closed(server):
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:   # the body stops halfway
        sock.sendall(raw_request("/v1/completions", b'{"prompt": "ROM', declared_length=1000))
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408") and b"--request-read-timeout" in answer
    assert b'"request_timeout"' in answer
    with socket.create_connection((host, int(port))) as sock:   # the headers stop halfway
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: te")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 408")
    with socket.create_connection((host, int(port))) as sock:   # nothing at all: closed after --timeout-keep-alive
        assert read_until_closed(sock) == b""
    assert "did not send it within --request-read-timeout" in server.log()


# --- compatibility -----------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("logit_bias", {}), ("tools", []), ("response_format", {"type": "text"}),
                                          ("suffix", ""), ("tool_choice", "none"), ("presence_penalty", 0.0)])
def test_fields_at_the_value_that_asks_for_nothing_are_accepted(server, field, value):
    answer = httpx.post(server.url + "/v1/completions", timeout=30,
                        json={"prompt": PROMPT, "max_tokens": 2, field: value})
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("body, words", [
    ({"echo": True}, "echo=true is not supported by minicb: remove it (or send false or null)"),
    ({"echo": 0}, "echo=0 is not supported"),   # JSON's 0 is not false
    ({"logit_bias": {"5": 10}}, 'logit_bias={"5": 10} is not supported by minicb: remove it (or send {} or null)'),
    ({"ignore_eos": "yes"}, 'ignore_eos="yes" is invalid: use true or false'),
    ({"seed": 1.5}, "seed=1.5 is invalid: use an integer in the int64 range [-2**63, 2**63 - 1] or null"),
])
def test_messages_spell_values_as_json_does(server, body, words):
    answer = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, **body}, timeout=30)
    message = error_of(answer, 400)["message"]
    assert words in message and "None" not in message and "False" not in message and "True" not in message


# --- orderings, on a server in this process ---------------------------------------------------------

class Gate:
    """Holds whoever calls wait() until opened; `entered` says someone is held."""

    def __init__(self):
        self.armed, self.entered, self.opened = False, threading.Event(), threading.Event()

    def wait(self) -> None:
        if self.armed:
            self.entered.set()
            assert self.opened.wait(60), "the test never opened the gate"


@contextmanager
def in_process_server(**engine_config):
    """A real uvicorn server on a free loopback port, on a thread of this process, over an AsyncLLM
    whose forward and tokenization each pass a Gate first. Bard is given a chat template, and the server
    /debug/trace."""
    forward, tokenizing = Gate(), Gate()
    async_llm = AsyncLLM(None, device="cpu", **engine_config)
    async_llm.engine.tokenizer.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    execute, make_request = async_llm.engine.runner.execute, async_llm.engine.make_request
    async_llm.engine.runner.execute = lambda batch, sampling: (forward.wait(), execute(batch, sampling))[1]
    async_llm.engine.make_request = lambda *args, **kw: (tokenizing.wait(), make_request(*args, **kw))[1]
    app = build_app(async_llm, "bard", MAX_BODY, debug_trace=True)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, what="the in-process server's start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", forward, tokenizing, async_llm
    finally:
        forward.opened.set()
        tokenizing.opened.set()
        server.should_exit = True
        thread.join(60)


def test_health_answers_while_a_prompt_is_being_tokenized():
    with in_process_server(max_num_seqs=4) as (url, _, tokenizing, _), httpx.Client(base_url=url, timeout=60) as client:
        tokenizing.armed = True
        done = threading.Event()
        answer: list[httpx.Response] = []
        big = threading.Thread(target=lambda: (answer.append(client.post("/v1/completions", json={
            "prompt": "ROMEO.\n" * 1000, "max_tokens": 2})), done.set()))
        big.start()
        assert tokenizing.entered.wait(30), "the prompt never reached the tokenizer"
        assert httpx.get(url + "/health", timeout=30).status_code == 200
        assert not done.is_set(), "/health was answered while the prompt was still being tokenized"
        tokenizing.opened.set()
        big.join(60)
        assert answer[0].status_code in (200, 400)   # served, or too long: decided after the tokenizer ran


def test_queued_requests_of_clients_that_left_leave_the_queue_during_the_step():
    with in_process_server(max_num_seqs=1) as (url, forward, _, _):
        host, port = url.removeprefix("http://").split(":")
        with httpx.Client(base_url=url, timeout=60) as client, \
                client.stream("POST", "/v1/completions", json=LONG) as running:   # holds the only seat
            lines = running.iter_lines()
            next(lines)
            queued = [socket.create_connection((host, int(port))) for _ in range(3)]
            for sock in queued:
                sock.sendall(raw_request("/v1/completions", b'{"prompt": "ROMEO.\\n", "max_tokens": 4}'))
            waiting = lambda: metric(httpx.get(url + "/metrics").text, "minicb:num_requests_waiting")  # noqa: E731
            wait_for(lambda: waiting() == 3, what="three queued requests")
            forward.armed = True
            assert forward.entered.wait(30), "no step reached its forward"
            steps = httpx.get(url + "/debug/trace").json()["next_since"]
            for sock in queued:
                sock.close()
            wait_for(lambda: waiting() == 0, what="the queue emptied while the step is held")
            assert httpx.get(url + "/debug/trace").json()["next_since"] == steps, "no step ended meanwhile"
            forward.opened.set()
        wait_for(lambda: pool_is_whole(url), what="an empty pool")
        aborted = metric(httpx.get(url + "/metrics").text, "minicb:request_success_total", finished_reason="abort")
        assert aborted == 4, "the three that left the queue and the stream that hung up"


# --- issue 44: one client must cost the others nothing ----------------------------------------------

async def finish_reason(lines: AsyncIterator[str]) -> str | None:
    """How a completion stream ended: its finish_reason, or "error" for an error event."""
    async for line in lines:
        if line.startswith("data: {"):
            event = json.loads(line.removeprefix("data: "))
            if "error" in event:
                return "error"
            if event["choices"] and event["choices"][0]["finish_reason"]:
                return event["choices"][0]["finish_reason"]
    return None


def test_a_poison_sampling_value_is_refused_and_the_streams_beside_it_finish(server):
    poisons = [{"temperature": 10**20, "top_k": 50}, {"temperature": 10**401}, {"top_p": 10**401}]

    async def run() -> tuple[list[httpx.Response], list[str | None]]:
        body = {"prompt": PROMPT, "max_tokens": 200, "ignore_eos": True, "stream": True}
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client, AsyncExitStack() as streams:
            lines = [(await streams.enter_async_context(client.stream("POST", "/v1/completions", json=body)))
                     .aiter_lines() for _ in range(4)]
            for stream in lines:
                await anext(stream)   # each has its first token: all four are running
            refused = [await client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, **poison})
                       for poison in poisons]
            return refused, [await finish_reason(stream) for stream in lines]

    refused, reasons = asyncio.run(run())
    assert [error_of(answer, 400)["param"] for answer in refused] == ["temperature", "temperature", "top_p"]
    assert "from 0 to 2" in refused[0].json()["error"]["message"]
    assert reasons == ["length"] * 4


@pytest.mark.parametrize("whole_headers", [False, True], ids=["headers", "body"])
def test_a_request_that_trickles_in_is_cut_off_before_it_arrives_whole(server, whole_headers):
    """At 1 byte per 0.05 s the request would take seconds; --request-read-timeout 1 bounds it in all."""
    request = raw_request("/v1/completions", b'{"prompt": "ROMEO.\\n", "max_tokens": 2, "user": "' + b"x" * 40 + b'"}')
    start = request.index(b"\r\n\r\n") + 4 if whole_headers else 0
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(request[:start])
        sent = start
        while sent < len(request) and not select.select([sock], [], [], 0.05)[0]:
            sock.sendall(request[sent:sent + 1])
            sent += 1
        answer = read_until_closed(sock)
    assert sent < len(request), "the server let the request arrive whole"
    assert answer.startswith(b"HTTP/1.1 408")


def test_refused_bodies_and_values_that_once_gave_500_or_a_reset(server):
    async def oversized() -> list[int]:   # as the openai SDK sends: httpx's async client
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            return [(await client.post("/v1/completions", json={"prompt": "x" * size})).status_code
                    for size in (5 * MAX_BODY, 10 * MAX_BODY)]

    assert asyncio.run(oversized()) == [413, 413]
    surrogate = httpx.post(server.url + "/v1/completions", content=b'{"prompt": "ROMEO.\\n", "\\ud800": 1}',
                           headers=JSON, timeout=30)
    assert error_of(surrogate, 400)["param"] == "\ud800"
    many = {"prompt": PROMPT, "max_tokens": 2, "stop_token_ids": list(range(65))}
    assert "at most 64" in error_of(httpx.post(server.url + "/v1/completions", json=many, timeout=30), 400)["message"]
    many["stop_token_ids"] = list(range(64))
    assert httpx.post(server.url + "/v1/completions", json=many, timeout=30).status_code == 200
    not_allowed = httpx.request("TRACE", server.url + "/health")
    assert error_of(not_allowed, 405)["type"] == "invalid_request_error" and "GET" in not_allowed.headers["allow"]


def test_integral_numbers_are_integers_as_json_schema_says(server):
    def text(body: dict) -> str:
        answer = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()["choices"][0]["text"]

    assert text({"prompt": [161.0], "max_tokens": 8.0, "seed": 3.0}) == text({"prompt": [161], "max_tokens": 8,
                                                                              "seed": 3})


def test_the_host_and_the_body_type_must_be_this_servers(server):
    """A web page elsewhere may not call the server: not by a DNS name pointed at 127.0.0.1 (its Host), nor
    by a form or text/plain post, which a browser sends to any site unasked."""
    evil = httpx.get(server.url + "/v1/models", headers={"host": "attacker.example:8000"})
    assert error_of(evil, 421)["code"] == "misdirected_request"
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        answer = httpx.post(server.url + "/v1/completions", content=b'{"prompt": "ROMEO.\\n", "max_tokens": 2}',
                            headers={"content-type": content_type} if content_type else {})
        assert error_of(answer, 415)["code"] == "unsupported_media_type"
    assert httpx.get(server.url.replace("127.0.0.1", "localhost") + "/health").status_code == 200


def test_the_published_schema_describes_every_route(server):
    document = httpx.get(server.url + "/openapi.json").json()
    for path in ("/v1/completions", "/v1/chat/completions"):
        operation = document["paths"][path]["post"]
        assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("Request")
        assert {"200", "400", "404", "413", "415", "503"} <= set(operation["responses"])
    assert "/debug/trace" not in document["paths"]   # off unless asked for: it lists every client's requests
    assert httpx.get(server.url + "/debug/trace").status_code == 404
    assert "422" not in json.dumps(document)
    assert "content" not in document["paths"]["/health"]["get"]["responses"]["200"]
    assert set(document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
    body = {"prompt": PROMPT, "max_tokens": 2, "stop": ["\n\n"]}
    openapi.CompletionRequest.model_validate(body)
    openapi.Completion.model_validate(httpx.post(server.url + "/v1/completions", json=body, timeout=30).json())
    openapi.ModelList.model_validate(httpx.get(server.url + "/v1/models").json())
    openapi.Error.model_validate(httpx.post(server.url + "/v1/completions", json={"prompt": 1}).json())


def test_a_flood_of_slow_connections_past_the_descriptor_limit_leaves_health_and_the_key_holders_served(monkeypatch):
    """1,100 connections that each send one byte and wait, against a server limited to 1,024 descriptors
    with a 600 s read timeout: each new one past --max-connections closes the oldest with no request in
    flight, so /health gets in, and the flood is one line of the log. The same server needs --api-key."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"the test opens 1,100 sockets itself; the hard descriptor limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))   # the server inherits it
    try:
        started = start_server("--request-read-timeout", "600", "--timeout-keep-alive", "600", "--api-key", "k3y")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300), hard))
    host, port = started.url.removeprefix("http://").split(":")
    with started as flooded, ExitStack() as sockets:
        for _ in range(1100):
            sockets.enter_context(socket.create_connection((host, int(port)))).sendall(b"G")
        assert httpx.get(flooded.url + "/health", timeout=30).status_code == 200
        assert flooded.log().count("over --max-connections") == 1
        key = {"authorization": "Bearer k3y"}
        for path in ("/v1/models", "/metrics", "/openapi.json"):
            refused = httpx.get(flooded.url + path)
            assert error_of(refused, 401)["code"] == "invalid_api_key" and refused.headers["www-authenticate"]
            assert httpx.get(flooded.url + path, headers={"authorization": "Bearer k3"}).status_code == 401
            assert httpx.get(flooded.url + path, headers=key).status_code == 200
        assert httpx.post(flooded.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 2},
                          headers=key, timeout=30).status_code == 200
        monkeypatch.setenv("OPENAI_API_KEY", "k3y")   # the benchmark client sends it, as the openai SDK does
        assert run_benchmark(flooded.url, None, 2, max_tokens=2, progress=False).summary["completed"] == 2


def test_chats_and_traces_are_built_off_the_event_loop_and_a_failure_tells_nothing_of_the_insides():
    with in_process_server(max_num_seqs=4) as (url, _, _, async_llm):
        rendering, building = Gate(), Gate()
        template, trace_since = async_llm.engine.tokenizer.apply_chat_template, async_llm.trace_since
        async_llm.engine.tokenizer.apply_chat_template = lambda *a, **kw: (rendering.wait(), template(*a, **kw))[1]
        async_llm.trace_since = lambda *a: (building.wait(), trace_since(*a))[1]
        chat = {"messages": [{"role": "user", "content": PROMPT}], "max_completion_tokens": 2}
        for gate, call in ((rendering, lambda: httpx.post(url + "/v1/chat/completions", json=chat, timeout=60)),
                           (building, lambda: httpx.get(url + "/debug/trace", timeout=60))):
            gate.armed = True
            answers: list[httpx.Response] = []
            caller = threading.Thread(target=lambda: answers.append(call()))
            caller.start()
            assert gate.entered.wait(30), "the work never began"
            assert httpx.get(url + "/health", timeout=30).status_code == 200 and not answers
            gate.opened.set()
            caller.join(60)
            assert answers[0].status_code == 200, answers[0].text
        chat["max_completion_tokens"] = 0
        assert error_of(httpx.post(url + "/v1/chat/completions", json=chat), 400)["param"] == "max_completion_tokens"
        async_llm.trace_since = lambda *a: 1 / 0
        error = error_of(httpx.get(url + "/debug/trace", timeout=30), 500)
        assert "ZeroDivision" not in error["message"] and "server's log" in error["message"]
