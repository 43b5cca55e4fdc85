"""Bad input gets a clear error that says what to do instead."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from minicb.llm import LLM
from minicb.model.config import read_model_config
from minicb.model.loader import load_model
from minicb.runner.model_runner import ModelRunner
from minicb.sampling import SamplingParams


def test_unknown_model_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist: pass a local folder.*hub id"):
        ModelRunner(tmp_path / "no-such-model", device="cpu")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path)


def test_unsupported_architecture(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "n_embd": 64}))
    with pytest.raises(ValueError, match="'GPT2LMHeadModel'.*not supported.*LlamaForCausalLM"):
        load_model(tmp_path)


def test_a_config_with_model_type_alone_loads_as_that_family_and_an_unknown_one_is_named(tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint("llama")
    raw = json.loads((folder / "config.json").read_text())
    del raw["architectures"]
    (tmp_path / "config.json").write_text(json.dumps({**raw, "model_type": "llama"}))
    assert read_model_config(tmp_path).architecture == "LlamaForCausalLM"
    (tmp_path / "config.json").write_text(json.dumps({**raw, "model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type 'gpt2' .* not supported.*or model_type 'llama'"):
        read_model_config(tmp_path)


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
    with pytest.raises(ValueError, match=r"token ids must be Python integers in \[0, "):
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


def test_a_prompt_larger_than_the_kv_pool_is_refused_at_once_and_queues_nothing():
    llm = LLM(None, device="cpu", num_blocks=4, block_size=16)   # 64 token slots in all
    params = SamplingParams(temperature=0, max_tokens=5)
    with pytest.raises(ValueError, match=r"can never serve the request: it needs 6 KV blocks to start but the whole "
                                         r"pool has 4 \(64 token slots\); raise num_blocks, or shorten the prompt"):
        llm.generate(["ROMEO.\n", " ".join(["word"] * 80), "JULIET.\n"], params, use_tqdm=False)
    assert not llm.engine.has_unfinished_requests()
    assert all(len(o.outputs[0].token_ids) > 0 for o in llm.generate(["ROMEO.\n", "JULIET.\n"], params, use_tqdm=False))


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


# --- values that used to crash deep inside torch or transformers --------------------------------------------


def test_none_means_no_stop_strings_or_ids_as_in_vllm():
    params = SamplingParams(stop=None, stop_token_ids=None)
    assert params.stop == [] and params.stop_token_ids == []


@pytest.mark.parametrize("kwargs,message", [
    (dict(stop_token_ids=7), r"stop_token_ids=7 is invalid: use a list such as \[7\]"),
    (dict(stop_token_ids=[True]), r"stop_token_ids=\[True\] is invalid: use a list of token ids"),
    (dict(stop=5), r"stop=5 is invalid: use a string or a list of non-empty strings"),
    (dict(stop={"x": 1}), r"stop=\{'x': 1\} is invalid: use a string or a list"),
    (dict(seed=2**70), r"seed=1180591620717411303424 is invalid: use an integer in the int64 range"),
    (dict(seed=-2**63 - 1), r"seed=-9223372036854775809 is invalid: use an integer in the int64 range"),
    (dict(seed=True), r"seed=True is invalid: use an integer"),
    (dict(top_p=float("nan")), r"top_p=nan is invalid: use a number in \(0, 1\]"),
    (dict(temperature=float("nan")), r"temperature=nan is invalid: use a finite number >= 0"),
    (dict(temperature=True), r"temperature=True is invalid"),
    (dict(max_tokens=True), r"max_tokens=True is invalid: use an integer >= 1"),
    (dict(top_k=False), r"top_k=False is invalid"),
    (dict(ignore_eos="no"), r"ignore_eos='no' is invalid: use True or False"),
])
def test_sampling_values_that_used_to_fail_inside_torch(kwargs, message):
    with pytest.raises(ValueError, match=rf"SamplingParams\.{message}"):
        SamplingParams(**kwargs)


def test_the_int64_seed_range_is_accepted_end_to_end():
    from minicb.sampling import make_generator

    for seed in (-2**63, 2**63 - 1):
        make_generator(SamplingParams(seed=seed).seed)


def test_top_k_zero_means_off_as_in_vllm_and_the_sampler_keeps_every_token():
    import torch

    from minicb.sampling import sample

    assert SamplingParams(top_k=0).top_k == -1
    n = 400
    logits = torch.zeros(n, 4)   # uniform: every token must turn up
    drawn = sample(logits, [SamplingParams(top_k=0)] * n, [torch.Generator().manual_seed(i) for i in range(n)])
    assert set(drawn) == {0, 1, 2, 3}


@pytest.mark.parametrize("kwargs,message", [
    (dict(max_model_len="512"), r"max_model_len='512' is invalid: use an integer >= 2 or None"),
    (dict(max_model_len=2.5), r"max_model_len=2.5 is invalid: use an integer >= 2 or None"),
    (dict(max_model_len=True), r"max_model_len=True is invalid"),
    (dict(kv_cache_memory_mb=float("nan")), r"kv_cache_memory_mb=nan is invalid: use a finite number > 0"),
    (dict(kv_cache_memory_mb=float("inf")), r"kv_cache_memory_mb=inf is invalid: use a finite number > 0"),
    (dict(swap_space_mb=float("nan")), r"swap_space_mb=nan is invalid: use a finite number >= 0"),
    (dict(swap_space_mb=float("inf")), r"swap_space_mb=inf is invalid"),
    (dict(max_queue_delay_s=float("nan")), r"max_queue_delay_s=nan is invalid: use a finite number of seconds"),
    (dict(max_queue_delay_s="5"), r"max_queue_delay_s='5' is invalid"),
    (dict(max_num_seqs=True), r"max_num_seqs=True is invalid: use an integer >= 1"),
    (dict(block_size=16.0), r"block_size=16.0 is invalid: use an integer >= 1"),
    (dict(num_blocks=False), r"num_blocks=False is invalid"),
    (dict(max_waiting=2.0), r"max_waiting=2.0 is invalid"),
    (dict(long_prefill_token_threshold=True), r"long_prefill_token_threshold=True is invalid"),
    (dict(enable_chunked_prefill="yes"), r"enable_chunked_prefill='yes' is invalid: use True or False"),
    (dict(seed="0"), r"seed='0' is invalid: use an integer"),
])
def test_engine_config_rejects_nan_and_wrong_types(kwargs, message):
    from minicb.config import EngineConfig

    with pytest.raises(ValueError, match=rf"EngineConfig\.{message}"):
        EngineConfig(**kwargs)


def test_devices_and_dtypes_minicb_cannot_run_on():
    import torch

    from minicb.runner.model_runner import resolve_device, resolve_dtype

    with pytest.raises(ValueError, match=r"dtype=torch.int8 is not supported; use one of float32, float16, bfloat16"):
        resolve_dtype(torch.int8, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"device='gpu' is unknown to torch: for an NVIDIA GPU use 'cuda'"):
        resolve_device("gpu")
    for device in ("mps", "meta", "xla"):
        with pytest.raises(ValueError, match=rf"device='{device}' is not supported: minicb runs on 'cpu' or 'cuda'"):
            resolve_device(device)
    for device in ("cuda:x", "", "CPU", 3):
        with pytest.raises(ValueError, match=r"is not a valid device string: minicb runs on 'cpu' or 'cuda'"):
            resolve_device(device)
    assert resolve_device("cpu:0").type == "cpu"


def test_a_model_path_that_is_a_file_says_so(tiny_checkpoint):
    folder, _ = tiny_checkpoint("llama")
    for file in ("config.json", "model.safetensors"):
        with pytest.raises(NotADirectoryError, match=rf"{file}' is a file, not a folder: pass the folder that holds "
                                                     rf"config.json and \*.safetensors \('{folder}' here\)"):
            load_model(folder / file)


def test_a_config_missing_a_size_names_the_key_and_the_file(tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint("llama")
    raw = json.loads((folder / "config.json").read_text())
    del raw["hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=rf"{tmp_path / 'config.json'} lacks 'hidden_size', which minicb needs"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**raw, "hidden_size": "64"}))
    with pytest.raises(ValueError, match=r"has hidden_size='64'; it must be an integer >= 1"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config.json is not valid JSON .*restore the config.json"):
        load_model(tmp_path)


@pytest.mark.parametrize("change, message", [
    ("vocab_size", r"tensor 'model.embed_tokens.weight' in .*model.safetensors has shape \[(\d+), 64\] but "
                   r".*config.json implies \[(\d+), 64\]"),
    ("intermediate_size", r"tensors 'model.layers.0.mlp.gate_proj.weight', 'model.layers.0.mlp.up_proj.weight' in "
                          r".*model.safetensors have shapes \[160, 64\], \[160, 64\], stacked into "
                          r"'model.layers.0.mlp.gate_up_proj.weight', but .*config.json implies \[640, 64\]"),
])
def test_weights_of_another_shape_than_the_config_name_the_tensor(tiny_checkpoint, tmp_path, change, message):
    folder, _ = tiny_checkpoint("llama")
    raw = json.loads((folder / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, change: 2 * raw[change]}))
    (tmp_path / "model.safetensors").symlink_to(folder / "model.safetensors")
    with pytest.raises(ValueError, match=message + r": the weights and config.json come from different models"):
        load_model(tmp_path)


@pytest.mark.parametrize("prompt, fix", [
    (7, "token ids go in a list"), ((1, 2, 3), "token ids go in a list"), (np.array([1, 2, 3]), r"\.tolist\(\)"),
    (torch.tensor([1, 2, 3]), r"\.tolist\(\)"), ([1, True], "Python integers"),
    ([np.int64(1)], "type int64 cannot be served.*list of token ids"),
    ({"text": "ROMEO.\n"}, "exactly one of 'prompt'.*'prompt_token_ids'"),
])
def test_prompts_of_the_wrong_type_name_the_fix(bard_llm, prompt, fix):
    with pytest.raises(ValueError, match=fix):
        bard_llm.generate(prompt, SamplingParams(max_tokens=1), use_tqdm=False)
    assert not bard_llm.engine.has_unfinished_requests()


def test_prompt_dicts_are_served_as_in_vllm(bard_llm):
    greedy = SamplingParams(temperature=0, max_tokens=6)
    ids = bard_llm.engine.make_request("ROMEO.\n").prompt_token_ids
    outs = bard_llm.generate(["ROMEO.\n", {"prompt": "ROMEO.\n"}, {"prompt_token_ids": ids}], greedy, use_tqdm=False)
    assert len({tuple(o.outputs[0].token_ids) for o in outs}) == 1
    assert outs[1].prompt == "ROMEO.\n" and outs[2].prompt_token_ids == ids


def test_a_lone_surrogate_is_not_text(bard_llm):
    with pytest.raises(ValueError, match=r"not valid Unicode text: '\\udcff' at index 6.*errors='replace'"):
        bard_llm.generate("ROMEO.\udcff\n", use_tqdm=False)


def test_sampling_params_must_be_sampling_params(bard_llm):
    with pytest.raises(ValueError, match=r"must be a SamplingParams, not dict.*SamplingParams\(\*\*d\)"):
        bard_llm.generate("ROMEO.\n", {"temperature": 0}, use_tqdm=False)


def test_a_priority_under_fcfs_is_refused_not_ignored(bard_llm):
    with pytest.raises(ValueError, match="priority=2 has no effect under scheduling_policy='fcfs'.*'priority'"):
        bard_llm.generate(["ROMEO.\n"], SamplingParams(max_tokens=1), priority=[2], use_tqdm=False)
    assert not bard_llm.engine.has_unfinished_requests()
