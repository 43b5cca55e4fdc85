"""Property-based reliability: random workloads against random engine configs, checked every step.

Workloads: arrival steps, prompt and output lengths, priorities, aborts at random steps. Configs:
tiny KV pools, block sizes 1/4/16, recompute, swap (with tiny swap pools, so it falls back) or
auto preemption, chunked prefill on or off, fcfs or priority, decode_first or prefill_first,
1 to 16 seats, small token budgets, a bounded queue. After every step the pool's
invariants, one state per request, and the seat and token limits must hold. At the end nothing
may be lost or stuck, every block must be free, and every request's tokens must be a prefix of its
solo run (all of them, if it finished normally).

The simulated clock with its deterministic stand-in model makes the large run cheap; a run 20
times smaller uses the real Bard network. `make test` runs the "fast" profile (200 + 10 schedules),
`make soak` the "soak" one (10,000 + 500).
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import NEAR_TIE_GAP, RELIABILITY_COUNTS, check_states, top2_gap
from minicb.engine import LLMEngine
from minicb.request import RequestStatus
from minicb.sampling import SamplingParams
from minicb.scheduler.policy import PreemptionCost

# auto: recompute below 20 tokens of context, swap above (a fixed model keeps examples fast).
CROSSOVER_AT_20_TOKENS = PreemptionCost(0.0, 1.0, 0.0, 20.0, 0.0)
FINISHED_NORMALLY = (RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_STOPPED)
MAX_STEPS = 4000   # far beyond any drawn workload: reaching it means a request is stuck


@st.composite
def scenarios(draw):
    block_size = draw(st.sampled_from([1, 4, 16]))
    pool_tokens = draw(st.integers(8, 160))
    chunked = draw(st.booleans())
    config = dict(
        block_size=block_size, num_blocks=-(-pool_tokens // block_size),
        max_num_seqs=draw(st.integers(1, 16)), max_num_batched_tokens=draw(st.integers(8, 64)),
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=draw(st.sampled_from([0, 4, 16])) if chunked else 0,
        scheduling_policy=draw(st.sampled_from(["fcfs", "priority"])),
        schedule_priority=draw(st.sampled_from(["decode_first", "prefill_first"])),
        max_waiting=draw(st.none() | st.integers(0, 8)),
        preemption_mode=draw(st.sampled_from(["recompute", "swap", "auto"])),
        swap_space_mb=draw(st.sampled_from([0.0, 0.01, 0.05, 1.0])),
        preemption_cost=CROSSOVER_AT_20_TOKENS)
    requests = draw(st.lists(st.fixed_dictionaries(dict(
        arrival_step=st.integers(0, 15), prompt=st.lists(st.integers(1, 300), min_size=1, max_size=40),
        max_tokens=st.integers(1, 30), priority=st.integers(0, 3),
        abort_step=st.none() | st.integers(0, 40))), min_size=1, max_size=12))
    return config, requests


def check_step(engine: LLMEngine) -> None:
    check_states(engine)
    if engine.trace.steps:
        step = engine.trace.steps[-1]
        over_budget = step.num_tokens > engine.config.max_num_batched_tokens
        # The one exception: unchunked, a preempted request that grew past the budget runs alone.
        assert not over_budget or (len(step.tokens) == 1 and not engine.config.enable_chunked_prefill)


def run_scenario(model, simulate: bool, config: dict, requests: list[dict]) -> None:
    engine = LLMEngine(model=model, device="cpu", simulate=simulate, **config)
    ids: dict[int, str] = {}
    step = 0
    while len(ids) < len(requests) or engine.has_unfinished_requests():
        for i, r in enumerate(requests):
            if r["arrival_step"] == step:
                params = SamplingParams(temperature=0, max_tokens=r["max_tokens"], ignore_eos=True)
                ids[i] = engine.add_request(r["prompt"], params, priority=r["priority"])
            if r["abort_step"] == step and i in ids:
                engine.abort(ids[i])
        engine.step()
        check_step(engine)
        step += 1
        assert step < MAX_STEPS, "requests are stuck"
    RELIABILITY_COUNTS["schedules"] += 1
    RELIABILITY_COUNTS["steps"] += step
    assert engine.block_manager.usage().free_blocks == engine.block_manager.num_blocks
    for i, r in enumerate(requests):
        req = engine.requests[ids[i]]
        assert req.status.finished and (req.status is not RequestStatus.REJECTED or req.reason)
        if req.output_token_ids:
            solo = LLMEngine(model=model, device="cpu", simulate=simulate, num_blocks=64, block_size=16)
            solo.add_request(r["prompt"], SamplingParams(temperature=0, max_tokens=r["max_tokens"], ignore_eos=True))
            while solo.has_unfinished_requests():
                solo.step()
            alone = solo.requests["0"].output_token_ids
            got = req.output_token_ids
            diverged = next((k for k, (a, b) in enumerate(zip(got, alone)) if a != b), None)
            if diverged is not None:
                # Only the real network can differ, and only at a near-tie: a batch changes low float bits.
                assert not simulate, "the deterministic stand-in must never diverge"
                gap = top2_gap(solo.runner, r["prompt"] + alone[:diverged])
                assert gap < NEAR_TIE_GAP, f"token {diverged} differs from the solo run, top-2 gap {gap:.2e}"
                RELIABILITY_COUNTS["near_ties"] += 1
                continue
            assert got == alone[:len(got)]
            if req.status in FINISHED_NORMALLY and req.num_tokens < engine.max_seq_tokens:
                assert got == alone


@given(scenarios())
def test_random_schedules_in_simulation(tiny_checkpoint, scenario):
    folder, _ = tiny_checkpoint("llama")
    run_scenario(str(folder), True, *scenario)


@settings(max_examples=max(5, settings().max_examples // 20))   # the real network is ~20x slower
@given(scenarios())
def test_random_schedules_on_bard(scenario):
    run_scenario(None, False, *scenario)
