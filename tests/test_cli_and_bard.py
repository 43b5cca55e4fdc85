"""The shipped Bard folder, and the headless main job `python -m minicb generate`."""
from __future__ import annotations

import os
import subprocess
import sys

from minicb.model.loader import BARD_PATH


def test_bard_is_a_standard_hf_folder_that_loads_offline():
    from transformers import AutoTokenizer

    from conftest import load_hf

    files = {p.name for p in BARD_PATH.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"} <= files
    assert sum(p.stat().st_size for p in BARD_PATH.iterdir()) < 25 * 2**20
    model = load_hf(BARD_PATH)
    config = model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert config.num_key_value_heads < config.num_attention_heads  # GQA
    assert 3e6 <= sum(p.numel() for p in model.parameters()) <= 8e6
    tok = AutoTokenizer.from_pretrained(str(BARD_PATH))
    assert tok.eos_token == "<|eos|>" and tok.convert_tokens_to_ids("<|eos|>") == config.eos_token_id
    assert tok.decode(tok("ROMEO.\nBut soft!")["input_ids"]) == "ROMEO.\nBut soft!"


def test_bard_stops_by_itself_at_heavy_tailed_lengths():
    """The course needs Bard to end its speeches with EOS, at lengths that vary a lot."""
    from minicb import LLM
    from minicb.workload import make_workload

    work = make_workload(100, lengths="natural", temperature=0.8, max_tokens=512, seed=11)
    llm = LLM(None, device="cpu", max_num_seqs=100, num_blocks=100 * 34, max_num_batched_tokens=1024)
    outs = [o.outputs[0] for o in llm.generate([w.prompt for w in work], [w.params for w in work], use_tqdm=False)]
    assert sum(o.finish_reason == "stop" for o in outs) >= 90
    lengths = sorted(len(o.token_ids) for o in outs)
    assert lengths[89] / lengths[49] >= 3      # p90 / p50


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "minicb", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_generate_streams_one_speech():
    done = run_cli("generate", "--prompt", "ROMEO.", "--seed", "3", "--max-tokens", "40", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ROMEO.\n")
    assert "tokens, finished: " in done.stdout
    again = run_cli("generate", "--prompt", "ROMEO.", "--seed", "3", "--max-tokens", "40", "--device", "cpu")
    assert again.stdout == done.stdout  # seeded: the same speech twice


def test_cli_reports_bad_input_clearly(tmp_path):
    missing = run_cli("generate", "--prompt", "ROMEO.", "--model", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "error: model folder" in missing.stderr and "Traceback" not in missing.stderr
    bad = run_cli("generate", "--prompt", "ROMEO.", "--temperature", "-1")
    assert bad.returncode == 2 and "SamplingParams.temperature=-1.0 is invalid" in bad.stderr
