"""Measure the shipped Bard model with minicb itself: samples and generated-length distribution.

    python tools/bard_report.py            # ~2 min on 2 CPU cores; writes minicb/assets/bard/eval_report.json

The course needs Bard's outputs to end by themselves (EOS) at heavy-tailed lengths, like the
speeches it learned from; this script checks that and records the figures the README quotes.
"""
from __future__ import annotations

import argparse
import json
import random
import time

from minicb import BARD_PATH, LLM, SamplingParams

SAMPLE_SPEAKERS = ("ROMEO.\n", "HAMLET.\n", "FALSTAFF.\n")


def percentile(sorted_values: list[int], q: float) -> int:
    return sorted_values[round(q / 100 * (len(sorted_values) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    speakers = json.loads((BARD_PATH / "speakers.json").read_text())
    rng = random.Random(args.seed)
    prompts = [name + "\n" for name in rng.choices(list(speakers), weights=list(speakers.values()), k=args.prompts)]
    llm = LLM(None, device="cpu", max_num_seqs=args.prompts, num_blocks=args.prompts * (args.max_tokens // 16 + 2),
              max_num_batched_tokens=16 * args.prompts)

    start = time.time()
    params = [SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed + i)
              for i in range(len(prompts))]
    outputs = [o.outputs[0] for o in llm.generate(prompts, params)]
    seconds = time.time() - start
    lengths = sorted(len(o.token_ids) for o in outputs)
    ended = sum(o.finish_reason == "stop" for o in outputs) / len(outputs)
    # The README's samples: `python -m minicb generate --prompt ROMEO. --seed 1` and so on, at the CLI's defaults.
    samples = llm.generate(list(SAMPLE_SPEAKERS), [SamplingParams(temperature=args.temperature, max_tokens=256,
                                                                  seed=args.seed + 1 + i) for i in range(3)],
                           use_tqdm=False)
    training = json.loads((BARD_PATH / "training_report.json").read_text())
    report = {
        "heldout_loss_nats_per_token": training["heldout_loss_nats_per_token"],
        "parameters": training["parameters"],
        "corpus_speech_tokens_p50_p90_p99": training["corpus_speech_tokens_p50_p90_p99"],
        "generated_tokens_p50_p90_p99": [percentile(lengths, q) for q in (50, 90, 99)],
        "eos_within_512_fraction": round(ended, 3),
        "prompts": len(prompts), "temperature": args.temperature, "seed": args.seed,
        "samples": [p + s.outputs[0].text for p, s in zip(SAMPLE_SPEAKERS, samples)],
    }
    (BARD_PATH / "eval_report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"({len(prompts)} prompts generated together in {seconds:.0f} s)")


if __name__ == "__main__":
    main()
