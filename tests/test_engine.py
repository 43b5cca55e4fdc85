"""The engine end to end on Bard: batched equals solo, streaming, real vs simulated schedules."""
from __future__ import annotations

import pytest

from conftest import count_near_ties
from minicb.engine import LLMEngine, PoolTooSmallWarning
from minicb.lab.workload import make_workload, run_workload
from minicb.llm import LLM
from minicb.sampling import SamplingParams
from minicb.stats.metrics import summarize


def test_a_busy_continuous_run_equals_solo_runs(bard_llm):
    """Each request's greedy tokens in a busy continuous run (32 requests, 16 seats) equal its solo run. A
    divergence is accepted only at a near-tie of the solo run's logits (batching changes the low float bits);
    such cases are counted and must stay rare."""
    work = make_workload(32, lengths="natural", seed=3, max_tokens=96)
    llm = LLM(None, device="cpu", max_num_seqs=16, num_blocks=512, max_num_batched_tokens=256)
    batched = llm.generate([w.prompt for w in work], [w.params for w in work], use_tqdm=False)
    assert max(len(s.admitted) for s in llm.engine.trace.steps) > 1           # prefills really were batched
    assert any(s.prefill_tokens and s.decode_tokens for s in llm.engine.trace.steps)  # mixed steps happened
    solo = [bard_llm.generate([w.prompt], w.params, use_tqdm=False)[0].outputs[0].token_ids for w in work]
    near_ties = count_near_ties(bard_llm.engine.runner, [bard_llm.engine.encode(w.prompt) for w in work],
                                [out.outputs[0].token_ids for out in batched], solo, what="the batched run")
    assert near_ties <= 2, f"{near_ties} of 32 requests diverged at near-ties"


def test_streaming_returns_text_as_it_is_made(bard_llm):
    seen: dict[int, str] = {}
    finished_order = []
    prompts = ["ROMEO.\n", "JULIET.\n"]
    params = [SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)]
    for index, new_text, output in bard_llm.stream(prompts, params):
        seen[index] = seen.get(index, "") + new_text
        if output.finished:
            finished_order.append(index)
    assert finished_order == [0, 1]              # the short one is returned first, not with the batch
    final = bard_llm.generate(prompts, params, use_tqdm=False)
    assert [seen[0], seen[1]] == [o.outputs[0].text for o in final]


def test_static_engine_returns_results_only_when_the_batch_ends(bard_llm):
    engine = LLMEngine(device="cpu", batching="static", max_num_seqs=2, num_blocks=64)
    engine.add_request("ROMEO.\n", SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    engine.add_request("JULIET.\n", SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))
    returned_at = [len(engine.step()) for _ in range(5)]
    assert returned_at == [0, 0, 0, 0, 2]


@pytest.mark.parametrize("batching", ["static", "continuous"])
def test_simulated_mode_gives_the_real_schedule(batching):
    """Same workload, same scheduler code: the trace matches step for step, apart from times."""
    work = make_workload(24, lengths="heavy", seed=5, max_tokens=64)
    traces = []
    for simulate in (False, True):
        engine = LLMEngine(device="cpu", batching=batching, max_num_seqs=8, num_blocks=48, simulate=simulate)
        run_workload(engine, work, progress=False)
        traces.append([{k: v for k, v in row.items() if k not in ("start_time", "duration")}
                       for row in engine.trace.to_rows()])
    assert traces[0] == traces[1]


def test_the_simulator_serves_every_request_of_a_long_run():
    """2,000 heavy-tailed requests (the soak and bench/ run 10,000): all served, every token counted."""
    engine = LLMEngine(device="cpu", simulate=True, max_num_seqs=64, num_blocks=4096)
    work = make_workload(2_000, lengths="heavy", rate=200.0, seed=1)
    stats = summarize(run_workload(engine, work, progress=False), engine.trace)
    assert stats["served"] == 2_000
    assert stats["output_tokens"] == sum(w.params.max_tokens for w in work)
    assert 0 < stats["seat_utilization"] <= 1


@pytest.mark.parametrize("batching", ["static", "padded"])
def test_a_static_batch_is_released_after_an_abort(batching):
    """Regression: once the abort left only finished members, every step returned nothing forever."""
    engine = LLMEngine(device="cpu", batching=batching)
    a = engine.add_request("ROMEO.\n", SamplingParams(max_tokens=1))
    b = engine.add_request("JULIET.\n", SamplingParams(max_tokens=50, ignore_eos=True))
    engine.step()
    engine.abort(b)
    returned = {o.request_id: o for _ in range(3) for o in engine.step()}
    assert set(returned) == {a, b} and returned[a].outputs[0].finish_reason == "length"
    assert returned[b].outputs[0].finish_reason == "abort"
    assert not engine.has_unfinished_requests()
    assert engine.scheduler.kv.usage().free_blocks == engine.scheduler.kv.num_blocks


def stop_strings_from(text: str) -> list[str]:
    """Stop strings cut out of a known output: at its start, middle and end, and across words."""
    return [text[i:i + n] for i, n in ((0, 3), (5, 4), (len(text) // 2, 5), (len(text) - 6, 6)) if text[i:i + n]]


def test_a_stream_never_shows_text_that_a_stop_string_cuts(bard_llm):
    """The stream holds back text that could still begin a stop string, so the pieces add up to the
    final text; the final text is the full output cut before the first stop string."""
    greedy = SamplingParams(temperature=0, max_tokens=80)
    params = SamplingParams(temperature=0, max_tokens=80, stop=["ol t"])
    pieces = [text for _, text, _ in bard_llm.stream(["ROMEO.\n"], params)]
    assert "".join(pieces) == "O, that's the fo"   # the case: "fool" leaked before the cut
    for prompt in ("ROMEO.\n", "JULIET.\n", "HAMLET.\n"):
        full = bard_llm.generate([prompt], greedy, use_tqdm=False)[0].outputs[0].text
        for stop in stop_strings_from(full):
            pieces, final = [], None
            for _, text, output in bard_llm.stream([prompt], SamplingParams(temperature=0, max_tokens=80, stop=[stop])):
                pieces.append(text)
                final = output
            assert "".join(pieces) == final.outputs[0].text == full[:full.index(stop)], (prompt, stop)


def steps_of(llm: LLM, prompts: list[str]) -> int:
    before = len(llm.engine.trace.steps)
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=3, ignore_eos=True), use_tqdm=False)
    return len(llm.engine.trace.steps) - before


def test_an_abandoned_stream_takes_its_requests_with_it():
    llm = LLM(None, device="cpu")
    long = SamplingParams(temperature=0, max_tokens=300, ignore_eos=True)
    for _ in llm.stream(["ROMEO.\n", "JULIET.\n"], long):
        break
    assert steps_of(llm, ["HAMLET.\n"]) == 3        # no hidden steps of the abandoned requests first
    with pytest.raises(ZeroDivisionError):
        for _ in llm.stream(["ROMEO.\n"], long):
            1 / 0
    assert steps_of(llm, ["HAMLET.\n"]) == 3
    assert not llm.engine.requests and not llm.engine.has_unfinished_requests()


def test_a_list_with_one_bad_request_queues_none():
    llm = LLM(None, device="cpu")
    with pytest.raises(ValueError, match="seed"):
        llm.generate(["ROMEO.\n", "JULIET.\n"], [SamplingParams(), SamplingParams(seed=2**70)], use_tqdm=False)
    assert not llm.engine.requests and not llm.engine.has_unfinished_requests()
    assert steps_of(llm, ["HAMLET.\n"]) == 3


def test_a_request_cut_short_by_a_small_pool_says_why():
    with pytest.warns(PoolTooSmallWarning, match="holds 32 tokens.*max_model_len=1024"):
        engine = LLMEngine(device="cpu", num_blocks=2, block_size=16)
    engine.add_request("ROMEO.\n", SamplingParams(max_tokens=100, ignore_eos=True))
    out = next(o for _ in range(100) for o in engine.step() if o.finished)
    assert out.outputs[0].finish_reason == "length" and len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == 32
    assert "32 tokens, all the KV pool holds" in out.reason and "raise num_blocks" in out.reason
    roomy = LLMEngine(device="cpu", num_blocks=64, max_model_len=16)
    roomy.add_request("ROMEO.\n", SamplingParams(max_tokens=100, ignore_eos=True))
    out = next(o for _ in range(100) for o in roomy.step() if o.finished)
    assert out.outputs[0].finish_reason == "length" and "max_model_len=16" in out.reason
    done = LLM(None, device="cpu").generate(["ROMEO.\n"], SamplingParams(max_tokens=2, ignore_eos=True))[0]
    assert done.outputs[0].finish_reason == "length" and done.reason is None   # max_tokens is no surprise


def test_a_long_lived_engine_forgets_requests_once_returned():
    engine = LLMEngine(device="cpu", simulate=True)
    for _ in range(3):
        ids = {engine.add_request("ROMEO.\n", SamplingParams(max_tokens=5, ignore_eos=True)) for _ in range(50)}
        finished = [o.request_id for _ in range(20) for o in engine.step() if o.finished]
        assert sorted(finished) == sorted(ids)        # each result exactly once
        assert not engine.requests


def test_generate_encodes_each_prompt_once():
    llm = LLM(None, device="cpu", simulate=True)
    calls = []
    tokenizer = llm.engine.tokenizer

    class Counting:
        def __call__(self, text, **kwargs):
            calls.append(text)
            return tokenizer(text, **kwargs)

        def __getattr__(self, name):
            return getattr(tokenizer, name)

    llm.engine.tokenizer = Counting()
    prompts = ["ROMEO.\n", "JULIET.\n", "ROMEO.\n"]
    llm.generate(prompts, SamplingParams(max_tokens=2), use_tqdm=False)
    assert calls == prompts, "each prompt goes through the tokenizer exactly once"
