"""minicb's continuous batching against Hugging Face transformers, one workload, one run, one machine.

    .venv/bin/python bench/vs_hf.py [--requests 64] [--seats 16] [--compile] [--flex] [--model PATH_OR_NAME]

Every engine serves the same prompts with the same per-request output lengths (forced, greedy),
so the useful tokens are identical and only the serving differs:
- minicb continuous batching, max_num_seqs = seats (and, with --compile, EngineConfig.compile=True, timed on
  its second pass over the workload: the first one compiles; with --flex, attn_backend="flex", its compile
  timed in: a first run pays it);
- HF `generate`, left-padded static batches of `seats`, each run to its longest member;
- HF's own continuous batching manager (transformers >= 5), an explicit small config.

The default model is the shipped Bard: speaker-line prompts, heavy-tailed lengths up to 256 tokens. `--model`
takes what MINICB_MODEL takes (a folder, a .gguf file, a fetched model's name such as "smollm2", a hub id); a
model with a chat template gets chat requests instead, each a question through its template, with heavy-tailed
lengths up to 64 tokens (`--max-tokens` changes either cap). ms/step is the wall time over the forward passes,
prefill and decode steps alike. Last, the matmuls alone of minicb's own steps, each step's shape timed once:
no engine of these weights can beat that on this machine, and each engine's time is a multiple of it.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

from minicb import BARD_PATH, LLM
from minicb.lab.workload import make_workload, output_lengths
from minicb.model.loader import resolve_model_path

# Chat requests for a model with a chat template: what people ask a small assistant, short and long.
CHAT_QUESTIONS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain how photosynthesis works, step by step.",
    "Give me three tips for learning to program.",
    "What is the difference between a virus and a bacterium?",
    "Why is the sky blue?",
    "Tell me a story about a dragon who loves books.",
    "How do I make a cup of tea?",
    "Summarise the plot of Romeo and Juliet in a few sentences.",
    "What are the planets of the solar system, in order from the sun?",
    "Can you explain what a neural network is to a ten-year-old?",
    "List five healthy breakfast ideas.",
    "What should I pack for a weekend hiking trip in the mountains?",
    "Translate 'good morning, how are you?' into French and Spanish.",
    "Why do cats purr?",
    "Write a haiku about autumn leaves.",
]


class Run(NamedTuple):
    wall_s: float
    steps: int   # forward passes: one per engine step (HF's are counted by a hook on the model)


def hf_model(path: Path = BARD_PATH, device: str = "cpu", dtype: str = "float32"):
    """The checkpoint as HF runs it, counting its forward passes in `model.forward_calls`."""
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()   # the weights load in milliseconds; a bar per load is noise
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype),
                                                     attn_implementation="sdpa").to(device).eval()
    # Every run here is greedy. Bard's stored defaults sample (temperature 0.8), and HF warns that a greedy
    # config inheriting a temperature ignores it, so the benchmark starts from greedy defaults instead.
    saved = model.generation_config
    model.generation_config = GenerationConfig(do_sample=False, bos_token_id=saved.bos_token_id,
                                               eos_token_id=saved.eos_token_id, pad_token_id=saved.pad_token_id)
    model.forward_calls = 0

    def count(*_):
        model.forward_calls += 1
    model.register_forward_pre_hook(count)
    return model


def run_minicb(prompts: list[list[int]], lengths: list[int], seats: int, path: Path = BARD_PATH,
               device: str = "cpu", dtype: str = "float32", attn_backend: str = "torch", compile: bool = False,
               after: Callable[[LLM, list], None] | None = None) -> Run:
    """`after`, if given, gets the engine and the records of the timed steps, once the timing is done."""
    from minicb import SamplingParams

    # A KV pool that holds every request at once, as HF's 4,096 pages do: no run is slowed by preemption.
    block_size, totals = 16, [len(p) + n for p, n in zip(prompts, lengths)]
    llm = LLM(str(path), device=device, dtype=dtype, attn_backend=attn_backend, max_num_seqs=seats,
              max_num_batched_tokens=4096, block_size=block_size, max_model_len=max(totals),
              num_blocks=sum(-(-t // block_size) for t in totals), compile=compile)
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in lengths]
    if compile:
        llm.generate(prompts, params, use_tqdm=False)   # compiles; the timed pass below reuses the graphs
    steps_before, start = llm.engine.trace.num_steps, time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - start
    assert [len(o.outputs[0].token_ids) for o in outs] == lengths
    steps = llm.engine.trace.num_steps - steps_before
    if after is not None:
        after(llm, llm.engine.trace.steps[-steps:])
    return Run(wall, steps)


def matmuls_alone(model: torch.nn.Module, steps: list) -> float:
    """Seconds the steps' matmuls alone take, as the engine runs them (packed or not): for each step, every
    Linear but the LM head on its tokens, the LM head on its sequences. What no engine of these weights can
    beat on this CPU (floor.py's matmuls, at each step's shape)."""
    from floor import floor_pass, step_matmuls

    seconds = {}   # (tokens, sequences) -> seconds, timed once per shape after a warm-up pass
    for tokens, seqs in sorted({(step.num_tokens, len(step.seats)) for step in steps}):
        # every sequence brings at least one token, so the LM head's rows are the first `seqs` of its input
        matmuls = [(x[:seqs] if m is model.lm_head else x, m) for x, m in step_matmuls(model, tokens)]
        floor_pass(matmuls, packed=True)
        seconds[tokens, seqs] = floor_pass(matmuls, packed=True)
    return sum(seconds[step.num_tokens, len(step.seats)] for step in steps)


def run_hf_padded(prompts: list[list[int]], lengths: list[int], seats: int, pad_id: int | None,
                  path: Path = BARD_PATH, device: str = "cpu", dtype: str = "float32") -> Run:
    from transformers import GenerationConfig

    model = hf_model(path, device, dtype)
    if pad_id is None:   # some tokenizers (Llama 3's) name no pad token; padding is masked out, any id will do
        pad_id = 0
    start = time.perf_counter()
    for i in range(0, len(prompts), seats):
        batch, want = prompts[i:i + seats], lengths[i:i + seats]
        width = max(map(len, batch))
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
        # min_new_tokens holds EOS back, so every batch runs to its longest member's length.
        config = GenerationConfig(max_new_tokens=max(want), min_new_tokens=max(want), do_sample=False,
                                  eos_token_id=model.generation_config.eos_token_id, pad_token_id=pad_id)
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    return Run(time.perf_counter() - start, model.forward_calls)


def run_hf_continuous(prompts: list[list[int]], lengths: list[int], seats: int, path: Path = BARD_PATH,
                      device: str = "cpu", dtype: str = "float32") -> Run:
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    model = hf_model(path, device, dtype)
    cb = ContinuousBatchingConfig(page_size=16, num_blocks=4096, max_batch_tokens=512,
                                  max_requests_per_batch=seats, auto_switch_to_flash=False)
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, max_new_tokens=max(lengths))
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.start()
    try:
        start = time.perf_counter()
        for i, (p, n) in enumerate(zip(prompts, lengths)):
            manager.add_request(p, request_id=f"r{i}", max_new_tokens=n)
        got = {}
        while len(got) < len(prompts):
            result = manager.get_result(timeout=60)
            if result is not None:
                got[result.request_id] = len(result.generated_tokens)
        wall = time.perf_counter() - start
    finally:
        manager.stop(block=True)
    assert [got[f"r{i}"] for i in range(len(prompts))] == lengths
    return Run(wall, model.forward_calls)


def workload(tokenizer, num_requests: int, max_tokens: int | None) -> tuple[list[list[int]], list[int]]:
    """Prompt ids and forced output lengths (heavy-tailed, seeded): chat questions through the model's chat
    template where it has one, else Bard's speaker lines (the workload of every earlier run)."""
    if not tokenizer.chat_template:
        work = make_workload(num_requests, lengths="heavy", seed=0, max_tokens=max_tokens or 256)
        return [tokenizer(w.prompt)["input_ids"] for w in work], [w.params.max_tokens for w in work]
    chats = [[{"role": "user", "content": CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)]}] for i in range(num_requests)]
    prompts = [tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)["input_ids"]
               for chat in chats]
    return prompts, output_lengths(num_requests, "heavy", seed=0, max_len=max_tokens or 64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--seats", type=int, default=16)
    ap.add_argument("--compile", action="store_true", help="add a row for minicb with EngineConfig.compile=True")
    ap.add_argument("--flex", action="store_true", help='add a row for minicb with attn_backend="flex"')
    ap.add_argument("--model", default=None, help="a folder, .gguf file, fetched name (smollm2) or hub id; "
                                                  "default: the shipped Bard")
    ap.add_argument("--max-tokens", type=int, default=None,
                    help="cap of the heavy-tailed output lengths (default: 64 for a chat model, 256 for Bard)")
    ap.add_argument("--dtype", default="float32", help="every engine's dtype: float32 or bfloat16")
    ap.add_argument("--out", type=Path, default=None, help="default: bench/results/vs_hf[_MODEL].json")
    args = ap.parse_args()
    path = resolve_model_path(args.model)
    args.out = args.out or Path(f"bench/results/vs_hf{'_' + path.name if args.model else ''}.json")

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    prompts, lengths = workload(tok, args.requests, args.max_tokens)
    useful = sum(lengths)
    threads = torch.get_num_threads()

    def run(engine, *extra, **options) -> Run:
        # Each engine starts on the process's threads: minicb's may fit them to the idle cores as it runs.
        torch.set_num_threads(threads)
        return engine(prompts, lengths, args.seats, *extra, dtype=args.dtype, **options)

    alone = {}   # the matmuls alone of minicb's steps, timed after its run
    runs = {"minicb continuous": run(run_minicb, path, after=lambda llm, steps: alone.update(
                seconds=matmuls_alone(llm.engine.runner.model, steps))),
            **({"minicb continuous, compiled": run(run_minicb, path, compile=True)} if args.compile else {}),
            **({"minicb continuous, flex": run(run_minicb, path, attn_backend="flex")} if args.flex else {}),
            "HF generate (padded static)": run(run_hf_padded, tok.pad_token_id, path),
            "HF continuous batching": run(run_hf_continuous, path)}
    torch.set_num_threads(threads)
    rows = {name: {"wall_s": round(r.wall_s, 2), "steps": r.steps, "ms_per_step": round(1e3 * r.wall_s / r.steps, 2),
                   "useful_tok_per_s": round(useful / r.wall_s, 1)} for name, r in runs.items()}
    base = rows["minicb continuous"]["useful_tok_per_s"]
    print(f"{path.name}: {args.requests} {'chat ' if tok.chat_template else ''}requests, "
          f"prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, {useful} useful tokens, "
          f"seats={args.seats}, "
          f"torch threads={torch.get_num_threads()}")
    print(f"{'engine':32s} {'wall s':>8s} {'steps':>6s} {'ms/step':>8s} {'tok/s':>9s} {'minicb / this':>14s}")
    for name, r in rows.items():
        print(f"{name:32s} {r['wall_s']:8.2f} {r['steps']:6d} {r['ms_per_step']:8.2f} {r['useful_tok_per_s']:9.1f} "
              f"{base / r['useful_tok_per_s']:14.2f}")
    ours, theirs = runs["minicb continuous"].wall_s, runs["HF continuous batching"].wall_s
    print(f"minicb's steps, their matmuls alone: {alone['seconds']:.2f} s; minicb took {ours / alone['seconds']:.2f}x "
          f"that, HF continuous batching {theirs / alone['seconds']:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": str(path), "requests": args.requests, "seats": args.seats, "useful_tokens": useful,
                                    "lengths": lengths, "engines": rows, "matmuls_alone_s": round(alone["seconds"], 2)},
                                   indent=2) + "\n")


if __name__ == "__main__":
    main()
