"""`python -m minicb serve` under the attacks of issue 23: huge bodies and prompts, many stop strings, deep
JSON and huge numbers, bursts against --max-waiting, clients that stop mid-body or say nothing, queued
requests whose clients leave during a long step, and a /debug/trace that asks for everything.

Most tests share one subprocess server. Two orderings need a step or a tokenization held on purpose: those
run a real uvicorn server on loopback inside this process, with the engine's forward or its tokenizer
gated by an Event, so that what must happen meanwhile is checked while it is certainly still held."""
from __future__ import annotations

import asyncio
import http.client
import socket
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from minicb.serve.api_server import build_app
from minicb.serve.async_llm import AsyncLLM
from minicb.serve.server_process import metric, start_server

PROMPT = "ROMEO.\n"
LONG = {"prompt": PROMPT, "max_tokens": 1000, "ignore_eos": True, "stream": True}   # outlasts any test's wait
MAX_BODY = 2**20   # the module server's --max-request-body-mb 1


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
    return (f"POST {path} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"
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

    streamed = httpx.post(server.url + "/v1/completions", content=chunked(), timeout=60)
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
    assert "went silent for --request-read-timeout" in server.log()


# --- /debug/trace and compatibility -----------------------------------------------------------------

def test_debug_trace_refuses_a_limit_over_its_cap(server):
    error = error_of(httpx.get(server.url + "/debug/trace", params={"limit": 10_001}), 400)
    assert error["param"] == "limit" and "0 to 10000 steps per call" in error["message"]
    assert "next_since" in error["message"]
    assert httpx.get(server.url + "/debug/trace", params={"limit": 10_000}).status_code == 200
    assert httpx.get(server.url + "/debug/trace", params={"limit": -1}).status_code == 400


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
    whose forward and tokenization each pass a Gate first."""
    forward, tokenizing = Gate(), Gate()
    async_llm = AsyncLLM(None, device="cpu", **engine_config)
    execute, make_request = async_llm.engine.runner.execute, async_llm.engine.make_request
    async_llm.engine.runner.execute = lambda batch, sampling: (forward.wait(), execute(batch, sampling))[1]
    async_llm.engine.make_request = lambda *args, **kw: (tokenizing.wait(), make_request(*args, **kw))[1]
    config = uvicorn.Config(build_app(async_llm, "bard", MAX_BODY), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, what="the in-process server's start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", forward, tokenizing
    finally:
        forward.opened.set()
        tokenizing.opened.set()
        server.should_exit = True
        thread.join(60)


def test_health_answers_while_a_prompt_is_being_tokenized():
    with in_process_server(max_num_seqs=4) as (url, _, tokenizing), httpx.Client(base_url=url, timeout=60) as client:
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
    with in_process_server(max_num_seqs=1) as (url, forward, _):
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
