"""EngineConfig.compile: the torch.compile'd forward serves the same tokens as eager, without compiling
again for every new token count."""
from __future__ import annotations

import pytest
import torch

from conftest import count_near_ties
from minicb import LLM
from minicb.config import EngineConfig
from minicb.lab.workload import make_workload


def test_compiled_engine_serves_the_eager_engines_tokens():
    """Chunked prefills over a cached prefix, mixed steps and pure decode steps of many sizes, compiled and
    eager. A token may differ only where the eager run's top-2 logit gap is a near-tie (the fused kernels
    round differently); the number of compiled graphs stays small however many token counts the steps have."""
    work = make_workload(14, lengths="natural", seed=5, max_tokens=24)
    prompts, params = [w.prompt for w in work], [w.params for w in work]
    config = dict(max_num_seqs=6, max_num_batched_tokens=48, enable_chunked_prefill=True, num_blocks=128)
    eager = LLM(None, **config)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()   # graphs other tests in this process compiled (flex attention's) are not this engine's
    compiled = LLM(None, compile=True, **config)
    got = [o.outputs[0].token_ids for o in compiled.generate(prompts, params, use_tqdm=False)]
    want = [o.outputs[0].token_ids for o in eager.generate(prompts, params, use_tqdm=False)]

    prompt_ids = [eager.engine.encode(prompt) for prompt in prompts]
    near_ties = count_near_ties(eager.engine.runner, prompt_ids, got, want, what="the compiled engine")
    assert near_ties <= 1, f"{near_ties} of {len(prompts)} requests diverged at near-ties"

    steps = compiled.engine.trace.steps
    token_counts = {s.num_tokens for s in steps}
    assert len(token_counts) >= 8, f"the run had only {len(token_counts)} distinct step sizes; the test needs many"
    assert any(s.prefill_tokens and s.decode_tokens for s in steps), "no mixed prefill+decode step was run"
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert graphs <= 3, (f"{graphs} graphs compiled for {len(token_counts)} step sizes: the token count must be "
                         "a dynamic dimension, not a reason to compile again")


def test_compile_is_a_boolean_knob():
    with pytest.raises(ValueError, match=r"EngineConfig.compile='yes' is invalid: use True or False"):
        EngineConfig(compile="yes")
    assert not EngineConfig().compile
