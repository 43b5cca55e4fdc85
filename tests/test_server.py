"""`python -m minicb serve` over real HTTP on loopback: the OpenAI SDK and raw SSE, concurrency, disconnects,
bad input, overload, SIGTERM, chat on a model with a chat template, and the debug and metrics endpoints."""
from __future__ import annotations

import asyncio
import json
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import openai
import pytest

from conftest import save_random_checkpoint, tiny_hf_config
from minicb.sampling import SamplingParams
from minicb.serve.server_process import ServerProcess, start_server

PROMPT = "ROMEO.\n"
LONG = {"prompt": PROMPT, "max_tokens": 1000, "ignore_eos": True, "stream": True}   # outlasts any test's wait


@pytest.fixture(scope="module")
def server():
    with start_server("--max-num-seqs", "256", "--num-blocks", "2048", "--enable-debug-trace") as server:
        yield server


def events_of(body: str) -> list[str]:
    """The SSE events' data, checking the framing: every event is `data: ...` followed by a blank line."""
    assert body.endswith("\n\n"), body[-200:]
    events = body[:-2].split("\n\n")
    assert all(e.startswith("data: ") and "\n" not in e for e in events), events
    return [e.removeprefix("data: ") for e in events]


def chunks_of(body: str) -> list[dict]:
    data = events_of(body)
    assert data[-1] == "[DONE]" and "[DONE]" not in data[:-1]
    return [json.loads(d) for d in data[:-1]]


def wait_for(condition, timeout: float = 60, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not hold within {timeout} s"
        time.sleep(0.05)


def pool_is_whole(server: ServerProcess) -> bool:
    return all(server.metric(f"minicb:{name}") == 0
               for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"))


# --- answers --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=0.8, top_p=0.9, top_k=40, seed=7)],
                         ids=["greedy", "seeded"])
def test_openai_sdk_matches_llm_generate(server, bard_llm, sampling):
    want = bard_llm.generate(PROMPT, SamplingParams(max_tokens=24, **sampling), use_tqdm=False)[0].outputs[0]
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    args = dict(model="bard", prompt=PROMPT, max_tokens=24, temperature=sampling["temperature"],
                top_p=sampling.get("top_p"), seed=sampling.get("seed"), extra_body={"top_k": sampling.get("top_k")})
    got = client.completions.create(**args)
    assert got.choices[0].text == want.text and got.choices[0].finish_reason == want.finish_reason
    usage, generated = got.usage, len(want.token_ids)
    assert usage.completion_tokens == generated and usage.total_tokens == usage.prompt_tokens + generated
    pieces = list(client.completions.create(**args, stream=True))
    assert "".join(p.choices[0].text for p in pieces) == want.text
    assert [p.choices[0].finish_reason for p in pieces][-1] == want.finish_reason


def test_sse_framing_and_usage(server, bard_llm):
    body = {"prompt": PROMPT, "max_tokens": 9, "temperature": 0, "ignore_eos": True}
    whole = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()
    streamed = httpx.post(server.url + "/v1/completions", timeout=60,
                          json={**body, "stream": True, "stream_options": {"include_usage": True}})
    assert streamed.headers["content-type"].startswith("text/event-stream")
    chunks = chunks_of(streamed.text)
    *text_chunks, last = chunks
    assert all(c["object"] == "text_completion" and c["usage"] is None and len(c["choices"]) == 1
               for c in text_chunks)
    assert [c["choices"][0]["finish_reason"] for c in text_chunks] == [None] * (len(text_chunks) - 1) + ["length"]
    assert "".join(c["choices"][0]["text"] for c in text_chunks) == whole["choices"][0]["text"]
    prompt_tokens = len(bard_llm.engine.encode(PROMPT))
    assert last["choices"] == [] and last["usage"] == whole["usage"] == {
        "prompt_tokens": prompt_tokens, "completion_tokens": 9, "total_tokens": prompt_tokens + 9}
    plain = chunks_of(httpx.post(server.url + "/v1/completions", json={**body, "stream": True}, timeout=60).text)
    assert all("usage" not in c for c in plain)   # usage only when asked for


def test_200_concurrent_streams_complete_and_leave_the_pool_whole(server):
    done_before = server.metric("minicb:request_success_total", finished_reason="length")

    async def one(client: httpx.AsyncClient, i: int) -> list[dict]:
        body = {"prompt": PROMPT, "max_tokens": 6, "ignore_eos": True, "seed": i, "stream": True}
        async with client.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            return chunks_of((await response.aread()).decode())

    async def all_of_them() -> list[list[dict]]:
        limits = httpx.Limits(max_connections=250, max_keepalive_connections=250)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=120) as client:
            return await asyncio.gather(*(one(client, i) for i in range(200)))

    results = asyncio.run(all_of_them())
    assert all(chunks[-1]["choices"][0]["finish_reason"] == "length" for chunks in results)
    assert len({chunks[0]["id"] for chunks in results}) == 200
    assert server.metric("minicb:request_success_total", finished_reason="length") == done_before + 200
    assert pool_is_whole(server)


def test_a_client_that_disconnects_has_its_request_aborted(server):
    aborted = server.metric("minicb:request_success_total", finished_reason="abort")
    with httpx.Client(base_url=server.url, timeout=60) as client:
        with client.stream("POST", "/v1/completions", json=LONG) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: {")   # the request runs; now hang up mid-stream
    wait_for(lambda: server.metric("minicb:request_success_total", finished_reason="abort") == aborted + 1,
             what="the streaming request's abort")
    wait_for(lambda: pool_is_whole(server), what="an empty pool")
    # A non-streaming client that gives up while its answer is being generated takes its request along too.
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/completions", json={**LONG, "stream": False}, timeout=1.0)
    wait_for(lambda: server.metric("minicb:request_success_total", finished_reason="abort") == aborted + 2,
             what="the waiting request's abort")
    wait_for(lambda: pool_is_whole(server), what="an empty pool")


# --- refusals -------------------------------------------------------------------------------------------

BAD_INPUT = [   # (path, body, status, words the message must hold, the field it names)
    ("/v1/completions", b'{"prompt": ', 400, "not valid JSON", None),
    ("/v1/completions", b"[1, 2]", 400, "must be a JSON object", None),
    ("/v1/completions", {"prompt": 5}, 400, "prompt must be a string or a list of token ids", "prompt"),
    ("/v1/completions", {"prompt": ["a", "b"]}, 400, "send one request per prompt", "prompt"),
    ("/v1/completions", {"prompt": ""}, 400, "the prompt is empty", "prompt"),
    ("/v1/completions", {"prompt": [5, 99999]}, 400, "token ids must be", "prompt"),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": "ten"}, 400, 'max_tokens="ten" is invalid: use an integer',
     "max_tokens"),
    ("/v1/completions", {"prompt": PROMPT, "stream": "yes"}, 400, 'stream="yes" is invalid: use true or false',
     "stream"),
    ("/v1/completions", {"prompt": PROMPT, "temperature": -1}, 400, "temperature=-1 is invalid: use a finite number",
     "temperature"),
    ("/v1/completions", {"prompt": PROMPT, "top_p": 0}, 400, "top_p=0 is invalid: use a number in (0, 1]", "top_p"),
    ("/v1/completions", {"prompt": PROMPT, "n": 2}, 400, "send n separate requests", "n"),
    ("/v1/completions", {"prompt": PROMPT, "best_of": 3}, 400, "best_of=3 is not supported", "best_of"),
    ("/v1/completions", {"prompt": PROMPT, "logprobs": 2}, 400, "logprobs=2 is not supported by minicb: remove it",
     "logprobs"),
    ("/v1/completions", {"prompt": PROMPT, "echo": True}, 400, "echo=true is not supported", "echo"),
    ("/v1/completions", {"prompt": PROMPT, "suffix": "!"}, 400, 'suffix="!" is not supported', "suffix"),
    ("/v1/completions", {"prompt": PROMPT, "max_token": 5}, 400, 'unknown field "max_token"', "max_token"),
    ("/v1/completions", {"prompt": PROMPT, "stream_options": {"include_usage": True}}, 400,
     "set stream to true", "stream_options"),
    ("/v1/completions", {"prompt": PROMPT, "model": "gpt-4"}, 404, 'this server serves "bard"', "model"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, 400, "/v1/completions", "messages"),
]


@pytest.mark.parametrize("path, body, status, words, param", BAD_INPUT,
                         ids=[f"{i}-{w.split()[0]}" for i, (_, _, _, w, _) in enumerate(BAD_INPUT)])
def test_bad_input_is_refused_with_a_message_that_names_the_fix(server, path, body, status, words, param):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = httpx.post(server.url + path, content=content, headers={"content-type": "application/json"}, timeout=30)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert words in error["message"] and error["param"] == param and error["type"] == "invalid_request_error"


def test_unknown_model_through_the_sdk_is_not_found(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="GET /v1/models lists it"):
        client.completions.create(model="gpt-4", prompt=PROMPT, max_tokens=2)


def test_an_overloaded_server_answers_503_with_retry_after_while_the_others_complete():
    flags = ("--max-num-seqs", "1", "--max-waiting", "1", "--max-queue-delay-s", "1.5")
    with start_server(*flags) as server, httpx.Client(base_url=server.url, timeout=60) as client, \
            ThreadPoolExecutor(1) as pool:
        def queue_one() -> Future:
            return pool.submit(httpx.post, server.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 4},
                               timeout=60)

        # One running, one waiting: the queue is full, and a third is turned away at once, streaming or not.
        with client.stream("POST", "/v1/completions", json=LONG) as running:
            lines = running.iter_lines()   # kept: a dropped iterator closes the connection when collected
            next(lines)
            waiting = queue_one()
            wait_for(lambda: server.metric("minicb:num_requests_waiting") == 1, what="a waiting request")
            for stream in (True, False):
                refused = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "stream": stream})
                assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
                error = refused.json()["error"]
                assert "max_waiting=1" in error["message"] and (error["type"], error["code"]) == (
                    "service_unavailable", "rejected")
        # The long one hung up, so the waiting one runs, and completes.
        served = waiting.result()
        assert served.status_code == 200 and served.json()["choices"][0]["finish_reason"] == "length"
        # Waiting longer than max_queue_delay_s behind a long request: turned away too.
        with client.stream("POST", "/v1/completions", json=LONG) as running:
            lines = running.iter_lines()   # kept: a dropped iterator closes the connection when collected
            next(lines)
            stale = queue_one().result()
        assert stale.status_code == 503 and "max_queue_delay_s=1.5" in stale.json()["error"]["message"]
        assert server.metric("minicb:request_success_total", finished_reason="rejected") == 3
        wait_for(lambda: pool_is_whole(server), what="an empty pool")


def test_sigterm_finishes_requests_in_flight_aborts_the_rest_and_exits_0():
    # A grace period of 1 s: the short request's last 3 steps fit in it, the long one's 1000 steps never do.
    with start_server("--shutdown-timeout", "1") as server:
        async def read(client: httpx.AsyncClient, body: dict, started: asyncio.Event) -> list[dict]:
            async with client.stream("POST", "/v1/completions", json=body) as response:
                text = ""
                async for piece in response.aiter_text():
                    text += piece
                    started.set()
                return chunks_of(text)

        async def scenario() -> tuple[list[dict], list[dict]]:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                started = [asyncio.Event(), asyncio.Event()]
                long = asyncio.create_task(read(client, LONG, started[0]))
                await started[0].wait()
                short = asyncio.create_task(read(client, {**LONG, "max_tokens": 4}, started[1]))
                await started[1].wait()
                server.process.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.5)
                async with httpx.AsyncClient(base_url=server.url) as newcomer:
                    with pytest.raises(httpx.ConnectError):   # no new connections once shutting down
                        await newcomer.post("/v1/completions", json={"prompt": PROMPT})
                return await short, await long

        short, long = asyncio.run(scenario())
        assert short[-1]["choices"][0]["finish_reason"] == "length"
        assert sum(len(c["choices"][0]["text"]) for c in short) > 0
        assert long[-1]["choices"][0]["finish_reason"] == "abort"
        assert server.process.wait(timeout=60) == 0   # a liveness bound: the drain itself is --shutdown-timeout 1
        assert "aborted 1 unfinished requests" in server.log()


# --- chat -----------------------------------------------------------------------------------------------

CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] | upper }}.\n{{ m['content'] }}\n\n{% endfor %}"
                 "{% if add_generation_prompt %}ASSISTANT.\n{% endif %}")


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory):
    """A random-init tiny Qwen2 with Bard's tokenizer and a plain chat template."""
    from transformers import AutoTokenizer

    from minicb.model.loader import BARD_PATH

    tokenizer = AutoTokenizer.from_pretrained(str(BARD_PATH))
    tokenizer.chat_template = CHAT_TEMPLATE
    config = tiny_hf_config("qwen2")
    config.vocab_size = len(tokenizer)
    folder = save_random_checkpoint(config, tmp_path_factory.mktemp("qwen2-chat"), seed=0, tokenizer=tokenizer)
    with start_server("--model", str(folder), "--served-model-name", "tiny-qwen2") as server:
        yield server


def test_chat_applies_the_template_streaming_and_not(chat_server, bard_llm):
    bard_tokenizer = bard_llm.engine.tokenizer
    client = openai.OpenAI(base_url=chat_server.url + "/v1", api_key="none", max_retries=0)
    messages = [{"role": "system", "content": "Speak briefly."}, {"role": "user", "content": "Who is there?"}]
    whole = client.chat.completions.create(model="tiny-qwen2", messages=messages, max_tokens=6, temperature=0)
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 6
    templated = "SYSTEM.\nSpeak briefly.\n\nUSER.\nWho is there?\n\nASSISTANT.\n"
    assert whole.usage.prompt_tokens == len(bard_tokenizer(templated, add_special_tokens=False)["input_ids"])
    pieces = list(client.chat.completions.create(model="tiny-qwen2", messages=messages, max_tokens=6,
                                                 temperature=0, stream=True))
    assert all(p.object == "chat.completion.chunk" for p in pieces)
    assert pieces[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in pieces) == whole.choices[0].message.content
    assert pieces[-1].choices[0].finish_reason == "length"
    assert httpx.get(chat_server.url + "/v1/models").json()["data"][0]["id"] == "tiny-qwen2"


def test_chat_takes_text_parts_and_a_null_assistant_content_as_text(chat_server):
    def answer(messages: list[dict]) -> dict:
        reply = httpx.post(chat_server.url + "/v1/chat/completions", timeout=60,
                           json={"messages": messages, "max_tokens": 4, "temperature": 0})
        assert reply.status_code == 200, reply.text
        return reply.json()

    plain = answer([{"role": "assistant", "content": ""}, {"role": "user", "content": "Who is there?"}])
    text_parts = [{"type": "text", "text": "Who is "}, {"type": "text", "text": "there?"}]
    parts = answer([{"role": "assistant", "content": None}, {"role": "user", "content": text_parts}])
    assert parts["usage"] == plain["usage"] and parts["choices"] == plain["choices"], "the same templated prompt"


@pytest.mark.parametrize("message", [{"role": "user"}, {"role": "user", "content": None},
                                     {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
                         ids=["no-content", "null-from-the-user", "an-image"])
def test_chat_refuses_messages_that_are_not_text(chat_server, message):
    answer = httpx.post(chat_server.url + "/v1/chat/completions", json={"messages": [message]})
    assert answer.status_code == 400
    assert "list of text parts (minicb takes text only)" in answer.json()["error"]["message"]


# --- models, health, trace ------------------------------------------------------------------------------

def test_models_and_health(server):
    assert httpx.get(server.url + "/health").status_code == 200
    models = httpx.get(server.url + "/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["bard"]
    assert models["data"][0]["max_model_len"] == 1024


def test_debug_trace_pages_with_since(server):
    def run_one() -> None:
        assert httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 3},
                          timeout=30).status_code == 200

    run_one()
    first = httpx.get(server.url + "/debug/trace").json()
    assert first["enabled"] and first["steps"] and first["next_since"] == first["steps"][-1]["step"] + 1
    run_one()
    later = httpx.get(server.url + "/debug/trace", params={"since": first["next_since"]}).json()
    steps = [s["step"] for s in later["steps"]]
    assert steps and steps[0] == first["next_since"] and steps == sorted(steps)
    row = later["steps"][0]
    assert {"start_time", "duration", "seats", "waiting", "blocks_used", "admitted", "finished", "preempted"} \
        <= set(row)
    assert any(request_id is not None for request_id, _ in row["seats"])
    one = httpx.get(server.url + "/debug/trace", params={"since": steps[0], "limit": 1}).json()
    assert [s["step"] for s in one["steps"]] == steps[:1] and one["next_since"] == steps[0] + 1
    assert httpx.get(server.url + "/debug/trace", params={"since": "x"}).status_code == 400
    error = httpx.get(server.url + "/debug/trace", params={"limit": 10_001}).json()["error"]
    assert error["param"] == "limit" and "0 to 10000 steps per call" in error["message"]
    assert "next_since" in error["message"]
    assert httpx.get(server.url + "/debug/trace", params={"limit": -1}).status_code == 400


# --- the command line -----------------------------------------------------------------------------------

def test_serve_has_a_flag_per_engine_knob_and_refuses_bad_ones_clearly(capsys):
    from minicb.cli import main
    from minicb.config import cli_knobs

    with pytest.raises(SystemExit) as done:
        main(["serve", "--help"])
    assert done.value.code == 0
    help_text = capsys.readouterr().out
    for name in cli_knobs():
        assert "--" + name.replace("_", "-") in help_text
    for flag in ("--max-num-seqs", "--enable-chunked-prefill", "--kv-cache-memory-mb", "--preemption-mode",
                 "--max-waiting", "--max-queue-delay-s", "--served-model-name", "--shutdown-timeout",
                 "--max-request-body-mb", "--timeout-keep-alive", "--request-read-timeout", "--engine-threads"):
        assert flag in help_text
    assert main(["serve", "--device", "cpu", "--max-num-seqs", "0"]) == 2
    assert "EngineConfig.max_num_seqs=0 is invalid: use an integer >= 1" in capsys.readouterr().err
    assert main(["serve", "--device", "cpu", "--request-read-timeout", "0"]) == 2
    assert "--request-read-timeout 0.0 is invalid: use a number > 0" in capsys.readouterr().err


def test_prefix_cache_hits_are_counted_in_metrics_and_change_no_answer():
    prompt = list(range(200, 240))   # 40 token ids: 2 full blocks of 16 can be hit, the rest is always computed
    body = {"prompt": prompt, "max_tokens": 6, "temperature": 0}
    with start_server("--enable-prefix-caching") as server:
        first = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()
        again = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()
        queries = server.metric("minicb:prefix_cache_queries_total")
        hits = server.metric("minicb:prefix_cache_hits_total")
    assert again["choices"][0]["text"] == first["choices"][0]["text"], "a hit gives the same greedy answer"
    assert (queries, hits) == (80, 32), "both prompts are looked up; the second finds its two full blocks"
