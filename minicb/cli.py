"""`python -m minicb generate|demo`: the course's engine from a terminal, no notebook needed."""
from __future__ import annotations

import argparse
import sys

from minicb.generate import Sequence, generate
from minicb.runner import ModelRunner
from minicb.sampling import SamplingParams

DEMO_SPEAKERS = ("ROMEO.", "JULIET.", "HAMLET.", "FALSTAFF.")


def bard_prompt(text: str) -> str:
    """Bard's prompts are a speaker line: `ROMEO.` becomes `ROMEO.\\n`."""
    return text if text.endswith("\n") else text + "\n"


def stream_one(runner: ModelRunner, prompt: str, params: SamplingParams, out=sys.stdout) -> Sequence:
    """Print a single completion as it is generated, token by token."""
    shown = 0

    def print_new_text(seqs: list[Sequence]) -> None:
        nonlocal shown
        text = seqs[0].text
        # A byte-level token can end inside a multi-byte character; wait for the rest of it.
        ready = len(text) - 1 if text.endswith("\ufffd") and seqs[0].finish_reason is None else len(text)
        out.write(text[shown:ready])
        out.flush()
        shown = max(shown, ready)

    (seq,) = generate(runner, [prompt], params, on_step=print_new_text)
    out.write(f"\n[{len(seq.output_token_ids)} tokens, finished: {seq.finish_reason}]\n")
    return seq


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minicb", description="minicb: continuous batching, built to learn from")
    sub = ap.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", default=None, help="local Hugging Face model folder (default: the shipped Bard)")
    common.add_argument("--device", default="auto", help="cpu, cuda or auto (default)")
    common.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: fp32 on CPU, bf16/fp16 on GPU)")
    common.add_argument("--seed", type=int, default=0)
    common.add_argument("--temperature", type=float, default=0.8)
    common.add_argument("--top-k", type=int, default=-1)
    common.add_argument("--top-p", type=float, default=1.0)
    common.add_argument("--max-tokens", type=int, default=256)
    gen = sub.add_parser("generate", parents=[common], help="stream one completion to the terminal")
    gen.add_argument("--prompt", required=True, help="for Bard a speaker line such as 'ROMEO.' (a newline is added)")
    sub.add_parser("demo", parents=[common], help="a speech from each of a few speakers")
    args = ap.parse_args(argv)

    try:
        params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                max_tokens=args.max_tokens, seed=args.seed)
        runner = ModelRunner(args.model, device=args.device, dtype=args.dtype)
        prompts = [args.prompt] if args.command == "generate" else list(DEMO_SPEAKERS)
        for prompt in prompts:
            prompt = bard_prompt(prompt) if args.model is None else prompt
            sys.stdout.write(prompt)
            stream_one(runner, prompt, params)
            sys.stdout.write("\n")
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
