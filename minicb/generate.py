"""The simplest driver of a ModelRunner: start every prompt together and decode until each stops.

Each sequence gets enough blocks for its whole prompt plus max_tokens up front, and a finished
sequence simply drops out of the next flat batch. No queue, no admission, no preemption: the engine
(lesson 02) replaces this with real scheduling. It is what `python -m minicb generate` and the model
parity tests run on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from minicb.batch import FlatBatch, SequenceChunk
from minicb.runner import ModelRunner
from minicb.sampling import SamplingParams, find_stop, sample


@dataclass
class Sequence:
    prompt_token_ids: list[int]
    params: SamplingParams
    generator: torch.Generator
    block_table: list[int]
    output_token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None   # "stop" (EOS, stop token or stop string) or "length"

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)


def encode_prompt(runner: ModelRunner, prompt: str | list[int]) -> list[int]:
    """Token ids for a prompt, with a clear error for anything the model cannot serve."""
    if isinstance(prompt, str):
        if runner.tokenizer is None:
            raise ValueError(f"{runner.model_path} has no tokenizer files; pass prompts as token-id lists")
        ids = runner.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    else:
        ids = list(prompt)
    if not ids:
        raise ValueError("the prompt is empty; give at least one token (for Bard, a speaker line such as 'ROMEO.\\n')")
    vocab = runner.config.vocab_size
    if any(not isinstance(t, int) or not 0 <= t < vocab for t in ids):
        raise ValueError(f"prompt token ids must be integers in [0, {vocab})")
    limit = runner.config.max_model_len
    if len(ids) >= limit:
        raise ValueError(f"the prompt has {len(ids)} tokens but the model serves at most {limit} "
                         f"(max_model_len), prompt and output together; shorten the prompt")
    return ids


def _update(runner: ModelRunner, seq: Sequence, token: int) -> None:
    seq.output_token_ids.append(token)
    p, eos = seq.params, runner.config.eos_token_ids
    if runner.tokenizer is not None:
        old_len = len(seq.text)
        seq.text = runner.tokenizer.decode(seq.output_token_ids, skip_special_tokens=True)
        cut = find_stop(seq.text, p, scan_from=old_len)
        if cut is not None:
            seq.text, seq.finish_reason = seq.text[:cut], "stop"
            return
    if (token in eos and not p.ignore_eos) or token in p.stop_token_ids:
        seq.finish_reason = "stop"
    elif len(seq.output_token_ids) >= p.max_tokens or seq.num_tokens >= runner.config.max_model_len:
        seq.finish_reason = "length"


def generate(runner: ModelRunner, prompts: list[str | list[int]], params: SamplingParams | list[SamplingParams],
             on_step: Callable[[list[Sequence]], None] | None = None) -> list[Sequence]:
    """Generate for every prompt at once; on_step sees all sequences after every forward step."""
    if isinstance(params, SamplingParams):
        params = [params] * len(prompts)
    if len(params) != len(prompts):
        raise ValueError(f"got {len(prompts)} prompts but {len(params)} SamplingParams; give one, or one per prompt")
    bs = runner.block_size
    seqs, next_block = [], 0
    for prompt, p in zip(prompts, params):
        ids = encode_prompt(runner, prompt)
        capacity = min(len(ids) + p.max_tokens, runner.config.max_model_len)
        n_blocks = -(-capacity // bs)
        if next_block + n_blocks > runner.num_blocks:
            raise ValueError(f"these prompts need more than the runner's {runner.num_blocks} KV blocks; "
                             "pass fewer prompts, a smaller max_tokens, or a larger num_blocks")
        seqs.append(Sequence(ids, p, p.make_generator(runner.device), list(range(next_block, next_block + n_blocks))))
        next_block += n_blocks

    chunks = [SequenceChunk(s.prompt_token_ids, 0, s.block_table) for s in seqs]
    running = list(seqs)
    while running:
        logits = runner.execute(FlatBatch.build(chunks, bs, runner.device))
        tokens = sample(logits, [s.params for s in running], [s.generator for s in running])
        for seq, token in zip(running, tokens):
            _update(runner, seq, token)
        if on_step is not None:
            on_step(seqs)
        running = [s for s in running if s.finish_reason is None]
        chunks = [SequenceChunk([s.output_token_ids[-1]], s.num_tokens - 1, s.block_table) for s in running]
    return seqs
