"""A real model's defaults: a max_model_len the KV pool can serve, a token budget every allowed prompt fits,
messages that fit the model and the entry point, and requests that can never be served refused as bad input
(a 400 from the server, not a 503 to retry). Checkpoints: tiny random-init Llamas with Bard's tokenizer and a
long max_position_embeddings, as a real model has."""
from __future__ import annotations

import asyncio
import json
import warnings

import httpx
import pytest

from conftest import TINY, save_random_checkpoint
from minicb.engine import PoolTooSmallWarning
from minicb.llm import LLM
from minicb.model.loader import BARD_PATH
from minicb.sampling import SamplingParams
from minicb.serve.async_llm import AsyncLLM
from minicb.serve.server_process import start_server

LONG_CONTEXT = 2**20
KV_BYTES_PER_TOKEN = TINY["num_hidden_layers"] * 2 * TINY["num_key_value_heads"] * (
    TINY["hidden_size"] // TINY["num_attention_heads"]) * 4   # K and V, fp32
POISON = 7   # a token whose input embedding is NaN in the poisoned checkpoint


def pool_tokens(megabytes: float, block_size: int = 16) -> int:
    """The tokens a KV pool of `megabytes` holds for the tiny model, counted in whole blocks."""
    return int(megabytes * 2**20 // (KV_BYTES_PER_TOKEN * block_size)) * block_size


def long_context_checkpoint(folder, poisoned: bool = False):
    from transformers import AutoTokenizer, LlamaConfig

    tokenizer = AutoTokenizer.from_pretrained(str(BARD_PATH))
    config = LlamaConfig(**{**TINY, "vocab_size": len(tokenizer), "max_position_embeddings": LONG_CONTEXT})
    save_random_checkpoint(config, folder, seed=3, tokenizer=tokenizer)
    if poisoned:
        from safetensors.torch import load_file, save_file

        weights = load_file(folder / "model.safetensors")
        weights["model.embed_tokens.weight"][POISON] = float("nan")   # untied: the LM head stays clean
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    return long_context_checkpoint(tmp_path_factory.mktemp("long-context"))


def test_the_default_pool_caps_max_model_len_and_the_budget_fits_it(long_model):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PoolTooSmallWarning)
        engine = LLM(str(long_model), device="cpu").engine
    assert engine.max_model_len == pool_tokens(256) < LONG_CONTEXT
    assert engine.config.max_num_batched_tokens == engine.max_model_len   # unchunked, a whole prompt is one step
    chunked = LLM(str(long_model), device="cpu", enable_chunked_prefill=True).engine
    assert chunked.config.max_num_batched_tokens == 2048
    assert LLM(None, device="cpu").engine.config.max_num_batched_tokens == 2048   # Bard's 1,024 fit 2,048


def test_every_length_the_capped_engine_allows_is_served_and_a_longer_prompt_says_what_to_raise(long_model):
    llm = LLM(str(long_model), device="cpu", kv_cache_memory_mb=0.25)
    limit = pool_tokens(0.25)
    assert llm.engine.max_model_len == limit
    (out,) = llm.generate([[5] * (limit - 1)], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    assert out.outputs[0].finish_reason == "length" and len(out.outputs[0].token_ids) == 1
    with pytest.raises(ValueError, match=rf"{limit} tokens but the engine serves at most {limit}.*raise "
                                         rf"kv_cache_memory_mb=0.25: the model allows {LONG_CONTEXT}"):
        llm.generate([[5] * limit], use_tqdm=False)


def test_a_pool_too_small_warns_at_the_callers_line_naming_the_knob_that_sized_it(long_model):
    for make in (lambda: LLM(str(long_model), device="cpu", num_blocks=4),
                 lambda: AsyncLLM(str(long_model), device="cpu", num_blocks=4)):
        with pytest.warns(PoolTooSmallWarning, match=r"holds 64 tokens.*Raise num_blocks, or set max_model_len <= "
                                                     r"64") as caught:
            make()
        assert [w.filename for w in caught] == [__file__]
    with pytest.warns(PoolTooSmallWarning, match="Raise kv_cache_memory_mb, or set max_model_len"):
        LLM(str(long_model), device="cpu", kv_cache_memory_mb=0.25, max_model_len=4096)


def test_messages_fit_the_model_in_use(long_model):
    with pytest.raises(ValueError, match=r"the prompt is empty; give at least one token$"):
        LLM(str(long_model), device="cpu", kv_cache_memory_mb=1).generate([[]], use_tqdm=False)
    with pytest.raises(ValueError, match=r"for Bard, a speaker line such as 'ROMEO.\\n'"):
        LLM(None, device="cpu", num_blocks=64).generate([[]], use_tqdm=False)


def test_generate_on_a_real_model_prints_no_warning(long_model, capsys):
    from minicb.cli import main

    assert main(["generate", "--model", str(long_model), "--device", "cpu", "--prompt", "ROMEO.",
                 "--max-tokens", "3"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "[3 tokens, finished: length]" in captured.out


# --- through a real server ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def poisoned_server(tmp_path_factory):
    folder = long_context_checkpoint(tmp_path_factory.mktemp("poisoned"), poisoned=True)
    with start_server("--model", str(folder), "--kv-cache-memory-mb", "0.25", "--served-model-name", "tiny") as server:
        yield server


def completion(client: httpx.AsyncClient, prompt: list[int], **body) -> asyncio.Future:
    return client.post("/v1/completions", json={"model": "tiny", "prompt": prompt, **body}, timeout=120)


def test_one_requests_nan_or_tiny_temperature_fails_nobody_else_and_counts_as_an_error(poisoned_server):
    """Ten streams run while one request asks for temperature 1e-40 and another's logits go NaN: the ten finish
    with the text they get without the two, 1e-40 is answered as greedy, the NaN one alone fails (500, with
    why), and /metrics counts it as an error, not an abort."""
    server = poisoned_server
    streams = [[20 + i, 9, 11] for i in range(10)]
    greedy = dict(max_tokens=24, temperature=0, ignore_eos=True)

    async def scenario():
        async with httpx.AsyncClient(base_url=server.url) as client:
            alone = []
            for p in streams:
                answer = await completion(client, p, **greedy)
                assert answer.status_code == 200, answer.text
                alone.append(answer.json()["choices"][0]["text"])
            running = [asyncio.ensure_future(completion(client, p, **greedy, stream=True)) for p in streams]
            await asyncio.sleep(0.3)
            tiny = await completion(client, [5, 9], max_tokens=5, temperature=1e-40, ignore_eos=True)
            nan = await completion(client, [POISON, 9], max_tokens=5, ignore_eos=True)
            as_greedy = await completion(client, [5, 9], max_tokens=5, temperature=0, ignore_eos=True)
            return alone, await asyncio.gather(*running), tiny, nan, as_greedy

    error_before = server.metric("minicb:request_success_total", finished_reason="error")
    alone, streamed, tiny, nan, as_greedy = asyncio.run(scenario())
    for want, answer in zip(alone, streamed):
        chunks = [line.removeprefix("data: ") for line in answer.text.split("\n\n") if line]
        assert chunks[-1] == "[DONE]" and '"finish_reason":"length"' in chunks[-2].replace(" ", "")
        assert "".join(json.loads(c)["choices"][0]["text"] for c in chunks[:-1]) == want
    assert tiny.status_code == 200 and tiny.json()["choices"][0]["text"] == as_greedy.json()["choices"][0]["text"]
    assert nan.status_code == 500 and "NaN" in nan.json()["error"]["message"]
    assert server.metric("minicb:request_success_total", finished_reason="error") == error_before + 1
    assert server.metric("minicb:request_success_total", finished_reason="abort") == 0


def test_models_advertise_a_max_model_len_the_server_can_serve(poisoned_server):
    limit = pool_tokens(0.25)
    models = httpx.get(poisoned_server.url + "/v1/models").json()
    assert models["data"][0]["max_model_len"] == limit
    with httpx.Client(base_url=poisoned_server.url) as client:
        served = client.post("/v1/completions", json={"prompt": [5] * (limit - 1), "max_tokens": 3}, timeout=120)
        assert served.status_code == 200 and served.json()["choices"][0]["finish_reason"] == "length"
        refused = client.post("/v1/completions", json={"prompt": [5] * limit, "max_tokens": 3}, timeout=60)
    assert refused.status_code == 400 and "retry-after" not in refused.headers
    assert "raise kv_cache_memory_mb" in refused.json()["error"]["message"]


def test_requests_that_can_never_be_served_get_400_saying_why(long_model):
    """An explicit pool of 8 blocks (128 slots) and a budget of 64 tokens without chunked prefill."""
    with start_server("--model", str(long_model), "--num-blocks", "8", "--max-num-batched-tokens", "64") as server:
        with httpx.Client(base_url=server.url) as client:
            over_budget = client.post("/v1/completions", json={"prompt": [5] * 100, "max_tokens": 3}, timeout=60)
            over_pool = client.post("/v1/completions", json={"prompt": [5] * 200, "max_tokens": 3}, timeout=60)
            fits = client.post("/v1/completions", json={"prompt": [5] * 60, "max_tokens": 3}, timeout=60)
    assert over_budget.status_code == 400 and "retry-after" not in over_budget.headers
    assert "more than max_num_batched_tokens=64" in over_budget.json()["error"]["message"]
    assert "enable_chunked_prefill" in over_budget.json()["error"]["message"]
    assert over_pool.status_code == 400 and "retry-after" not in over_pool.headers
    assert "whole pool has 8 (128 token slots); raise num_blocks" in over_pool.json()["error"]["message"]
    assert fits.status_code == 200

