"""AsyncLLM in-process, no HTTP: it steps only while there is work, off the event loop, and a caller that
stops listening, a failed step or a shutdown never leaves a request behind or its blocks taken."""
from __future__ import annotations

import asyncio
import threading
import time
from contextlib import aclosing

import pytest

from minicb.sampling import SamplingParams
from minicb.serve.async_llm import AsyncLLM, EngineClosed, EngineError

PROMPT = "ROMEO.\n"
LONG = SamplingParams(max_tokens=500, ignore_eos=True)


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def llm(loop):
    llm = AsyncLLM(None, device="cpu", max_num_seqs=8, num_blocks=256)
    yield llm
    loop.run_until_complete(llm.shutdown())


def count_steps(llm: AsyncLLM, monkeypatch, fail_at: int | None = None) -> list[str]:
    """Record the thread of every engine step (and fail the fail_at-th one)."""
    threads, step = [], llm.engine.step

    def recorded():
        threads.append(threading.current_thread().name)
        if len(threads) == fail_at:
            raise RuntimeError("boom")
        return step()

    monkeypatch.setattr(llm.engine, "step", recorded)
    return threads


async def until(condition, timeout: float = 60) -> None:   # liveness, generous for a loaded machine
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s"
        await asyncio.sleep(0.01)


def pool_is_empty(llm: AsyncLLM) -> bool:
    return not llm.engine.requests and llm.engine.scheduler.kv.usage().owned_blocks == 0


def test_the_loop_sleeps_while_idle_and_wakes_for_a_request(llm, loop, monkeypatch):
    threads = count_steps(llm, monkeypatch)
    before = (llm.stats.prompt_tokens, llm.stats.generation_tokens)

    async def scenario() -> None:
        outputs = [o async for o in llm.generate(PROMPT, SamplingParams(max_tokens=3, ignore_eos=True))]
        assert [len(o.outputs[0].token_ids) for o in outputs] == [1, 2, 3] and outputs[-1].finished
        await asyncio.sleep(0.05)
        ran = len(threads)
        await asyncio.sleep(0.3)
        assert len(threads) == ran, "the loop stepped with nothing to do"
        again = [o async for o in llm.generate(PROMPT, SamplingParams(max_tokens=2, ignore_eos=True))]
        assert again[-1].finished and len(threads) >= ran + 2

    loop.run_until_complete(scenario())
    assert set(threads) == {"minicb-engine_0"}   # every step on the engine's own thread, off the event loop
    prompt_tokens = len(llm.engine.encode(PROMPT))
    assert (llm.stats.prompt_tokens, llm.stats.generation_tokens) == (before[0] + 2 * prompt_tokens, before[1] + 5)


@pytest.mark.parametrize("how", ["break", "cancel"])
def test_leaving_generate_early_aborts_the_request_and_frees_its_blocks(llm, loop, how):
    aborted = llm.stats.finished["abort"]

    async def read_two(running: asyncio.Event | None = None) -> None:
        async with aclosing(llm.generate(PROMPT, LONG)) as outputs:
            async for output in outputs:
                if len(output.outputs[0].token_ids) >= 2:
                    if running is None:
                        break
                    running.set()

    async def scenario() -> None:
        if how == "break":
            await read_two()
        else:
            running = asyncio.Event()
            reader = asyncio.ensure_future(read_two(running))
            await running.wait()
            reader.cancel()
        await until(lambda: llm.stats.finished["abort"] == aborted + 1)

    loop.run_until_complete(scenario())
    assert pool_is_empty(llm)


def test_a_failed_step_fails_its_streams_and_the_engine_serves_on(llm, loop, monkeypatch):
    count_steps(llm, monkeypatch, fail_at=3)
    before = dict(llm.stats.finished)

    async def scenario() -> None:
        with pytest.raises(EngineError, match="boom"):
            async for _ in llm.generate(PROMPT, LONG):
                pass
        after = [o async for o in llm.generate(PROMPT, SamplingParams(max_tokens=3, ignore_eos=True))]
        assert after[-1].outputs[0].finish_reason == "length"

    loop.run_until_complete(scenario())
    assert pool_is_empty(llm)
    counted = {reason: llm.stats.finished[reason] - before.get(reason, 0) for reason in ("error", "abort", "length")}
    assert counted == {"error": 1, "abort": 0, "length": 1}, "a request a failed step took down counts as an error"


def test_a_rejected_request_comes_back_finished_with_its_reason(llm, loop, monkeypatch):
    # max_waiting=0: none may wait that the next step cannot start. Of 9 sent at once to 8 seats, one is refused.
    monkeypatch.setattr(llm.engine.config, "max_waiting", 0)   # the scheduler reads the same config object
    rejected = llm.stats.finished["rejected"]

    async def first_outputs() -> list:
        streams = [llm.generate(PROMPT, LONG) for _ in range(9)]
        try:
            return await asyncio.gather(*(anext(stream) for stream in streams))
        finally:
            for stream in streams:
                await stream.aclose()

    firsts = loop.run_until_complete(first_outputs())
    [output] = [o for o in firsts if o.finished]
    assert output.outputs[0].finish_reason == "rejected" and "max_waiting=0" in output.reason
    assert sum(o.outputs[0].token_ids != [] for o in firsts) == 8, "the other 8 run"
    loop.run_until_complete(until(lambda: pool_is_empty(llm)))
    assert llm.stats.finished["rejected"] == rejected + 1


def test_bad_input_raises_at_once_and_queues_nothing(llm, loop):
    async def scenario() -> None:
        with pytest.raises(ValueError, match="the prompt is empty"):
            await anext(llm.generate("", SamplingParams()))

    loop.run_until_complete(scenario())
    assert pool_is_empty(llm)


def test_drain_lets_requests_finish_then_aborts_the_rest_with_its_reason():
    """Two drains, so that neither outcome depends on how fast the machine steps: one with time enough
    for the request in flight (it returns as soon as nothing is left), one with none."""
    async def scenario() -> None:
        llm = AsyncLLM(None, device="cpu", max_num_seqs=4, num_blocks=128)
        short = llm.generate(PROMPT, SamplingParams(max_tokens=3, ignore_eos=True))
        assert not (await anext(short)).finished
        await llm.drain(120, "closing time")
        assert [o async for o in short][-1].outputs[0].finish_reason == "length"
        with pytest.raises(EngineClosed, match="shutting down"):
            await anext(llm.generate(PROMPT))
        await llm.shutdown()

        llm = AsyncLLM(None, device="cpu", max_num_seqs=4, num_blocks=128)
        long = llm.generate(PROMPT, LONG)
        assert not (await anext(long)).finished
        await llm.drain(0, "closing time")
        end = [o async for o in long][-1]
        assert (end.outputs[0].finish_reason, end.reason) == ("abort", "closing time")
        await llm.shutdown()
        assert pool_is_empty(llm)

    asyncio.run(scenario())
