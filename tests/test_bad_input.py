"""Bad input gets a clear error that says what to do instead."""
from __future__ import annotations

import json

import pytest

from minicb.engine import LLM
from minicb.model.loader import load_model
from minicb.runner import ModelRunner
from minicb.sampling import SamplingParams


def test_unknown_model_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="local folder.*never downloads"):
        ModelRunner(tmp_path / "no-such-model", device="cpu")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path)


def test_unsupported_architecture(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "n_embd": 64}))
    with pytest.raises(ValueError, match="'GPT2LMHeadModel'.*not supported.*LlamaForCausalLM"):
        load_model(tmp_path)


def test_unsupported_rope_type(tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint("llama")
    raw = json.loads((folder / "config.json").read_text())
    raw["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="rope type 'yarn' is not supported"):
        load_model(tmp_path)


def test_missing_weights_are_named(tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint("llama")
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        load_model(tmp_path)


def test_sharded_checkpoint_loads_like_a_single_file(tiny_checkpoint, tmp_path):
    folder, hf_model = tiny_checkpoint("qwen3")
    hf_model.save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    sharded, _ = load_model(tmp_path)
    single, _ = load_model(folder)
    for (name, a), (_, b) in zip(sharded.state_dict().items(), single.state_dict().items()):
        assert (a == b).all(), name


def test_prompts_the_model_cannot_serve(bard_llm):
    greedy = SamplingParams(temperature=0, max_tokens=4)
    with pytest.raises(ValueError, match="prompt is empty"):
        bard_llm.generate([""], greedy)
    with pytest.raises(ValueError, match="prompt is empty"):
        bard_llm.generate([[]], greedy)
    too_long = [5] * bard_llm.engine.max_model_len
    with pytest.raises(ValueError, match=r"1024 tokens but the engine serves at most 1024.*shorten"):
        bard_llm.generate([too_long], greedy)
    with pytest.raises(ValueError, match=r"token ids must be integers in \[0, "):
        bard_llm.generate([[1, 10**6]], greedy)
    with pytest.raises(ValueError, match="2 prompts but 3 SamplingParams"):
        bard_llm.generate(["A.\n", "B.\n"], [greedy] * 3)
    with pytest.raises(ValueError, match="empty list of prompts"):
        bard_llm.generate([], greedy)
    assert not bard_llm.engine.has_unfinished_requests()   # nothing half-queued by a rejected call


def test_generation_stops_at_max_model_len(bard_llm):
    prompt = [5] * (bard_llm.engine.max_model_len - 3)
    (out,) = bard_llm.generate([prompt], SamplingParams(temperature=0, max_tokens=50, ignore_eos=True), use_tqdm=False)
    assert len(out.outputs[0].token_ids) == 3 and out.outputs[0].finish_reason == "length"


def test_a_prompt_larger_than_the_kv_pool_is_rejected_and_others_are_served():
    llm = LLM(None, device="cpu", num_blocks=4, block_size=16)   # 64 token slots in all
    params = SamplingParams(temperature=0, max_tokens=5)
    outs = llm.generate(["ROMEO.\n", " ".join(["word"] * 80), "JULIET.\n"], params, use_tqdm=False)
    assert [o.outputs[0].finish_reason for o in outs][1] == "rejected"
    assert "whole pool has 4 (64 token slots)" in outs[1].reason and "raise num_blocks" in outs[1].reason
    assert all(len(outs[i].outputs[0].token_ids) > 0 for i in (0, 2))


def test_bad_engine_config():
    with pytest.raises(ValueError, match="EngineConfig.batching='dynamic' is unknown"):
        LLM(None, batching="dynamic")
    with pytest.raises(ValueError, match="EngineConfig.max_num_seqs=0 is invalid"):
        LLM(None, max_num_seqs=0)
    with pytest.raises(ValueError, match="dtype='fp8' is unknown"):
        ModelRunner(None, device="cpu", dtype="fp8")


def test_a_duplicate_request_id_is_refused(bard_llm):
    engine = bard_llm.engine
    engine.add_request("ROMEO.\n", SamplingParams(max_tokens=1), request_id="dup")
    with pytest.raises(ValueError, match="request id 'dup' is already in use"):
        engine.add_request("JULIET.\n", SamplingParams(max_tokens=1), request_id="dup")
    while engine.has_unfinished_requests():
        engine.step()
