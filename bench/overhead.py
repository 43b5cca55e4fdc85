"""Where a decode step's time goes: the forward pass vs everything around it.

    .venv/bin/python bench/overhead.py [--steps 30] [--compile]

For 8, 32 and 64 running sequences (mixed context lengths), it times whole engine steps and the
forward pass inside them; the rest is scheduling, batch building, sampling and bookkeeping. It
also times a bare HF decode step (uniform batch of 64, DynamicCache, no scheduling) in the same run.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import torch

from minicb import BARD_PATH, LLMEngine, SamplingParams
from minicb.lab.workload import bard_prompts


def decoding_engine(num_seqs: int, max_tokens: int, compile: bool = False, seed: int = 0, model: str | None = None,
                    filler: tuple[int, int] = (16, 200), **engine_options) -> LLMEngine:
    """An engine with num_seqs requests of mixed context lengths (a Bard speaker line and filler[0] to
    filler[1] - 1 random tokens), prefilled and one decode step in (so a compiled engine has compiled).
    model: what EngineConfig.model takes (None: Bard); token ids below 2,000 exist in every vocabulary here;
    engine_options: more EngineConfig fields."""
    block_size, longest = 16, 16 + filler[1] + max_tokens   # 16: room for the speaker line
    engine = LLMEngine(model=model, device="cpu", max_num_seqs=num_seqs, block_size=block_size,
                       num_blocks=num_seqs * -(-longest // block_size), max_model_len=longest,
                       max_num_batched_tokens=8192, compile=compile, **engine_options)
    g = torch.Generator().manual_seed(seed)
    for prompt in bard_prompts(num_seqs, seed=seed):
        filler_ids = torch.randint(10, 2000, (int(torch.randint(*filler, (1,), generator=g)),), generator=g).tolist()
        engine.add_request(engine.encode(prompt) + filler_ids,
                           SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True))
    engine.step()   # all prefills
    engine.step()   # the first decode
    return engine


def time_steps(engine: LLMEngine, steps: int) -> tuple[float, float]:
    """Mean seconds per step over `steps` steps: the whole step, and the forward pass inside it (the
    runner's logits, which its execute samples from)."""
    forward = 0.0
    logits_of = engine.runner.logits

    def timed_logits(batch):
        nonlocal forward
        t = time.perf_counter()
        logits = logits_of(batch)
        forward += time.perf_counter() - t
        return logits

    engine.runner.logits = timed_logits
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    del engine.runner.logits   # the instance attribute goes; the method shows again
    return (time.perf_counter() - start) / steps, forward / steps


def engine_decode_times(num_seqs: int, steps: int, compile: bool = False) -> tuple[float, float]:
    """Mean seconds per decode step: the whole step, and the forward pass inside it (compiled before timing)."""
    return time_steps(decoding_engine(num_seqs, steps + 10, compile, seed=num_seqs), steps)


def hf_bare_decode(num_seqs: int, context: int, steps: int) -> float:
    from transformers import AutoModelForCausalLM, DynamicCache

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(str(BARD_PATH), dtype=torch.float32,
                                                     attn_implementation="sdpa").eval()
    ids = torch.randint(10, 2000, (num_seqs, context))
    with torch.no_grad():
        cache = DynamicCache()
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        model(input_ids=token, past_key_values=cache, use_cache=True)   # warm-up
        start = time.perf_counter()
        for _ in range(steps):
            token = model(input_ids=token, past_key_values=cache, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
        return (time.perf_counter() - start) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--compile", action="store_true", help="EngineConfig.compile=True (timed after compiling)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    args.out = args.out or Path(f"bench/results/overhead{'_compiled' if args.compile else ''}.json")
    rows = {}
    for n in (1, 8, 32, 64):
        step, forward = engine_decode_times(n, args.steps, args.compile)
        rows[n] = {"step_ms": round(step * 1e3, 2), "forward_ms": round(forward * 1e3, 2),
                   "overhead_share": round(1 - forward / step, 3)}
        print(f"{n:3d} seqs: step {step * 1e3:7.2f} ms, forward {forward * 1e3:7.2f} ms, "
              f"outside the forward {100 * (1 - forward / step):5.1f}%")
    bare = hf_bare_decode(64, context=110, steps=args.steps)
    relative = bare / (rows[64]["step_ms"] / 1e3)
    print(f"bare HF decode step, uniform batch of 64: {bare * 1e3:.2f} ms; "
          f"minicb's full step reaches {100 * relative:.0f}% of its speed")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"compile": args.compile, "engine": rows, "hf_bare_decode_ms": round(bare * 1e3, 2),
                                    "minicb_speed_vs_hf_bare": round(relative, 3)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
