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
    from minicb.lab.workload import make_workload

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


# In-process: main(argv) with capsys, no subprocess start-up per check.

def test_every_sampling_flag_has_help_and_the_cli_temperature_default_is_explained(capsys):
    import pytest

    from minicb.cli import main

    with pytest.raises(SystemExit) as done:
        main(["generate", "--help"])
    assert done.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())   # argparse wraps lines wherever it likes
    assert "sampling seed: the same seed gives the same completion (default: 0)" in help_text
    assert "0 for greedy (default: 0.8, where Bard reads best; note SamplingParams' own default is 1.0)" in help_text
    assert "-1 or 0 keeps all (default: -1)" in help_text
    assert "whose probability reaches p (default: 1.0, all)" in help_text
    assert "new tokens at most per completion, EOS included (default: 256)" in help_text


class FailingMidStream:
    """Stands in for LLM: streams one piece of text, then ends the way a request whose logits went NaN does."""

    def __init__(self, *args, **kwargs):
        pass

    def stream(self, prompts, params):
        from minicb.scheduler.request import CompletionOutput, RequestMetrics, RequestOutput

        yield 0, "But soft", None
        failed = CompletionOutput(text="But soft", token_ids=[5, 6], finish_reason="error")
        yield 0, "", RequestOutput("0", prompts[0], [1], [failed], True, RequestMetrics(0.0), reason="NaN logits")


def test_a_failed_completion_says_why_on_its_own_line_and_exits_2(capsys, monkeypatch):
    import minicb.cli

    monkeypatch.setattr(minicb.cli, "LLM", FailingMidStream)
    assert minicb.cli.main(["generate", "--prompt", "ROMEO."]) == 2
    captured = capsys.readouterr()
    assert captured.out == "ROMEO.\nBut soft\n[2 tokens, finished: error]\n"
    assert captured.err == "error: NaN logits\n"


def test_a_refused_prompt_prints_only_the_error(capsys):
    from minicb.cli import main

    assert main(["generate", "--prompt", "ROMEO.\udcff", "--device", "cpu"]) == 2   # as a shell gives invalid UTF-8
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: the prompt is not valid Unicode text") and "Traceback" not in captured.err
    assert main(["generate", "--prompt", "ROMEO. " * 600, "--device", "cpu"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: the prompt has ")


def test_the_cli_names_the_fix_for_a_bad_device_or_a_model_file(capsys):
    from minicb.cli import main
    from minicb.model.loader import BARD_PATH

    assert main(["generate", "--prompt", "ROMEO.", "--device", "mps"]) == 2
    assert "error: device='mps' is not supported: minicb runs on 'cpu' or 'cuda'" in capsys.readouterr().err
    assert main(["generate", "--prompt", "ROMEO.", "--device", "gpu"]) == 2
    assert "for an NVIDIA GPU use 'cuda'" in capsys.readouterr().err
    assert main(["generate", "--prompt", "ROMEO.", "--model", str(BARD_PATH / "config.json")]) == 2
    assert "is a file, not a folder: pass the folder that holds config.json" in capsys.readouterr().err


def test_the_demo_table_leads_with_what_no_load_can_change():
    """Steps, seat utilization and tokens per step are the schedule's; the times after the bar are the machine's,
    tok/s last. Simulated runs here, so the figures are the schedule's alone (no time is asserted on)."""
    from minicb.cli import batching_table
    from minicb.lab.workload import make_workload, run_workload
    from minicb.llm import LLM
    from minicb.stats.metrics import summarize

    work = make_workload(12, lengths="natural", temperature=0.8, max_tokens=60, seed=0)
    rows = []
    for batching in ("static", "continuous"):
        llm = LLM(None, device="cpu", simulate=True, batching=batching, max_num_seqs=4)
        rows.append((batching, summarize(run_workload(llm.engine, work, progress=False), llm.engine.trace)))
    header, *lines = batching_table(rows).splitlines()
    assert header.split()[:6] == ["steps", "seat", "util", "tokens/step", "|", "mean"]
    assert header.split("|")[1].split()[:6] == ["mean", "TTFT", "mean", "e2e", "tok/s", "(after"]
    assert "this machine's speed, now" in header
    for (name, st), line in zip(rows, lines):
        name_col, steps, util, per_step, bar, *_ = line.split()
        assert (name_col, int(steps), util, bar) == (name, st["steps"], f"{100 * st['seat_utilization']:.0f}%", "|")
        assert float(per_step) == round(st["output_tokens"] / st["steps"], 1)
