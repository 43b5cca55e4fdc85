"""Shared fixtures: random-init tiny checkpoints of each supported architecture, and HF references."""
from __future__ import annotations

import os
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing in the suite may reach a hub

import pytest
import torch
from hypothesis import HealthCheck, settings

if not torch.cuda.is_available():
    # The Triton kernels run on the CPU through the interpreter, which must be on before they are defined.
    os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs several workers: one thread each (and in the lessons' kernels), or their OpenMP threads
    # take turns on the cores and each runs slower than alone.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

import minicb
from minicb.course.progress import TEST_NAME, TryCounter
from minicb.lab.near_tie import NEAR_TIE_BOUND, compare_greedy_runs, gaps_of
from minicb.model.loader import BARD_PATH

# Hypothesis profiles for the properties that take the default count: "fast" for `make test` (derandomized: the
# same examples every run, so CI cannot flake), "full" for `make test-properties` (4x more, still derandomized),
# "soak" for `make soak` (random, 200x more).
settings.register_profile("fast", max_examples=50, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("full", settings.get_profile("fast"), max_examples=200)
settings.register_profile("soak", max_examples=10_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("fast")

RELIABILITY_COUNTS = {"schedules": 0, "steps": 0, "failing_runs": 0, "near_ties": 0}


def pytest_addoption(parser):
    parser.addoption("--any-model", action="store_true",
                     help="also run tests/test_any_model.py: every lesson on a tiny random-init Qwen2 (minutes; "
                          "`make test-any-model`)")
    parser.addoption("--lesson-model", default=None, metavar="MODEL",
                     help="with --any-model, run every lesson on MODEL (a fetched model's name such as smollm2, or "
                          "a folder) instead of the tiny random Qwen2: `make test-real-model-lessons`")
    parser.addoption("--real-model", action="store_true",
                     help="also run tests/test_real_model.py on SmolLM2-135M-Instruct, fetched by `make real-model` "
                          "(minutes; `make test-real-model`)")


# Marks of the tests that take minutes, each run only with its flag: mark -> (flag, why it is skipped).
OPT_IN = {"any_model": ("--any-model", "every lesson on another model takes minutes: make test-any-model"),
          "real_model": ("--real-model", "the real model takes minutes, after `make real-model`: make test-real-model")}


def pytest_configure(config):
    # A venv made in another checkout (its editable install) runs that checkout's minicb, and its solutions,
    # against this one's tests and exercises: every verdict would be about the wrong files.
    here, imported = Path(__file__).resolve().parents[1], Path(minicb.__file__).resolve().parents[1]
    if imported != here:
        raise pytest.UsageError(f"these are the tests of {here}, but Python imports minicb from {imported}: this "
                                f"venv belongs to that checkout. Make one here (`make .venv/.minicb-installed` in "
                                f"{here}), or put {here} first on PYTHONPATH")
    config.addinivalue_line("markers", "any_model: every lesson on another model; runs only with --any-model")
    config.addinivalue_line("markers", "real_model: on SmolLM2-135M-Instruct (make real-model); runs only with "
                                       "--real-model")
    config.pluginmanager.register(TryCounter(here), "minicb-tries")


def pytest_collection_modifyitems(config, items):
    for mark, (flag, why) in OPT_IN.items():
        if not config.getoption(flag):
            skip = pytest.mark.skip(reason=why)
            for item in items:
                if mark in item.keywords:
                    item.add_marker(skip)


@pytest.fixture(autouse=True)
def graded_functions_are_the_learners_own(request):
    """A task's check grades the learner's functions (grading.imported_instead_of_written), on exercises/ only."""
    graded = TEST_NAME.match(request.node.name)
    if graded is None or "exercises" not in Path(str(request.node.path)).parts:
        return
    from grading import imported_instead_of_written
    from minicb import course
    if course.impl() != "exercises":
        return
    task = next((t for t in course.TASKS if (t.lesson, t.number) == (int(graded[1]), int(graded[2]))), None)
    problem = task and imported_instead_of_written(task, course.lesson(task.module))
    if problem:
        pytest.fail(problem, pytrace=False)


# What passing tests report with record_property(name, ...): name -> the heading it is shown under. A design task
# says by how much it passed, so that a learner sees whether a design met its target with room to spare or by a
# hair; the real model's parity runs say how many sequences parted from the reference at a near-tie.
REPORTED = {"margin": "design tasks: how far within their targets",
            "near_ties": "real model: sequences that parted from HF generate at a near-tie (accepted, counted)"}


def pytest_terminal_summary(terminalreporter):
    for prop, heading in REPORTED.items():
        rows = [(report.nodeid.split("::")[-1], value) for report in terminalreporter.stats.get("passed", [])
                if report.when == "call" for name, value in report.user_properties if name == prop]
        if rows:
            terminalreporter.section(heading)
            for test, value in rows:
                terminalreporter.write_line(f"{test}: {value}")
    counts = RELIABILITY_COUNTS
    if counts["schedules"] or counts["failing_runs"]:
        terminalreporter.write_line(
            f"reliability: {counts['schedules']} random schedules passed ({counts['steps']} steps checked), "
            f"{counts['failing_runs']} failing runs (hypothesis replays and shrinks each failure), "
            f"{counts['near_ties']} near-tie divergences on the real network")


# A greedy token may legitimately differ from the reference only where the reference's two best
# logits are closer than this: two correct fp32 implementations differ by ~1e-6 in the logits.
NEAR_TIE_GAP = NEAR_TIE_BOUND[torch.float32]

TINY = dict(vocab_size=320, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            initializer_range=0.2)  # a wide init makes logits peaked, so greedy paths have few near-ties


def tiny_hf_config(variant: str):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    if variant == "llama":
        return LlamaConfig(**TINY)
    if variant == "llama3-rope-tied":
        return LlamaConfig(**TINY, tie_word_embeddings=True, rope_theta=500000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64})
    if variant == "mistral":
        return MistralConfig(**TINY, sliding_window=None)
    if variant == "qwen2":
        return Qwen2Config(**TINY, tie_word_embeddings=True)
    if variant == "qwen3":
        return Qwen3Config(**{**TINY, "num_key_value_heads": 1}, head_dim=24)  # explicit head_dim != d/H
    raise ValueError(variant)


TINY_VARIANTS = ["llama", "llama3-rope-tied", "mistral", "qwen2", "qwen3"]


def load_hf(path):
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


def save_random_checkpoint(hf_config, folder, seed: int, tokenizer=None):
    """A random-init model of hf_config, saved in folder with HF's own save_pretrained (safetensors), with
    `tokenizer`'s files beside it when one is given: a model folder needs them to serve text."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(hf_config).save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """variant -> (folder, HF model): saved once per session with HF's own save_pretrained."""
    made = {}

    def make(variant: str):
        if variant not in made:
            folder = save_random_checkpoint(tiny_hf_config(variant), tmp_path_factory.mktemp(variant),
                                            seed=TINY_VARIANTS.index(variant))
            made[variant] = (folder, load_hf(folder))
        return made[variant]

    return make


@pytest.fixture(scope="session")
def bard_hf():
    return load_hf(BARD_PATH)


@pytest.fixture(scope="session")
def bard_runner():
    from minicb.runner.model_runner import ModelRunner

    return ModelRunner(None, device="cpu", num_blocks=1024, block_size=16)


def bard_llm_with(**config):
    from minicb.llm import LLM

    return LLM(None, device="cpu", max_num_seqs=64, num_blocks=2048, **config)


@pytest.fixture(scope="session")
def bard_llm():
    return bard_llm_with()


@pytest.fixture(scope="session")
def bard_loop_llm():
    """Bard with the per-sequence attention loop, the form lesson 03 teaches."""
    return bard_llm_with(attn_backend="torch-loop")


_HF_GREEDY: dict[tuple, tuple[list[int], torch.Tensor]] = {}


def hf_greedy(hf_model, prompt_ids: list[int], max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
    """HF `generate`'s greedy tokens for one prompt, alone, ignoring EOS, and its logits at each step; each
    reference is generated once per test process (the models are session fixtures, never changed)."""
    key = (hf_model, tuple(prompt_ids), max_new_tokens)   # the model itself: an id could be reused
    if key not in _HF_GREEDY:
        _HF_GREEDY[key] = _hf_greedy(hf_model, prompt_ids, max_new_tokens)
    return _HF_GREEDY[key]


def _hf_greedy(hf_model, prompt_ids: list[int], max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
    from transformers import GenerationConfig

    # generate() fills unset fields from the model's own generation_config, EOS included, so the
    # "ignore EOS" reference needs EOS removed there as well.
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0)
    saved_eos = hf_model.generation_config.eos_token_id
    hf_model.generation_config.eos_token_id = None
    try:
        with torch.no_grad():
            out = hf_model.generate(torch.tensor([prompt_ids]), generation_config=config,
                                    output_logits=True, return_dict_in_generate=True)
    finally:
        hf_model.generation_config.eos_token_id = saved_eos
    return out.sequences[0, len(prompt_ids):].tolist(), torch.cat(out.logits).float()  # (n, vocab)


def compare_greedy(got: list[int], want: list[int], ref_logits: torch.Tensor) -> str:
    """'equal', or 'near-tie' when the first divergence sits where the reference's own logits there (HF's) have a
    top-2 gap below NEAR_TIE_GAP (after which the sequences legitimately part ways); anything else fails."""
    result = compare_greedy_runs(None, [[]], [got], [want], NEAR_TIE_GAP,
                                 gap_at=lambda run, step: float(gaps_of(ref_logits[step])))
    assert result.ok, f"greedy tokens against the reference: {result}"
    return "equal" if result.same else "near-tie"


def count_near_ties(runner, prompt_ids: list[list[int]], got: list[list[int]], want: list[list[int]],
                    bound: float = NEAR_TIE_GAP, what: str = "the run") -> int:
    """How many of `got` diverge from `want`, the reference's greedy tokens for the same prompts. Each
    divergence must start where the reference's top-2 logit gap (after prompt + want's tokens so far,
    prefilled alone on `runner`) is below `bound`; anywhere else it is a bug, and this fails saying so."""
    result = compare_greedy_runs(runner, prompt_ids, got, want, bound)
    assert result.ok, f"{what} against the reference: {result}"
    return len(result.near_ties)


def recording_engine(**config):
    """An LLMEngine that also keeps every request it was given in `engine.seen`, for a test to read
    after the run: the engine itself forgets a request once its result has gone back."""
    from minicb.engine import LLMEngine

    engine = LLMEngine(**config)
    engine.seen = {}
    queue = engine.queue

    def queue_and_keep(req):
        engine.seen[req.request_id] = req
        return queue(req)

    engine.queue = queue_and_keep
    return engine


def check_states(engine) -> None:
    """After any step: the pool's invariants hold (swap pool included), every request sits in
    exactly one place (waiting, running, swapped or finished) with the matching status, and no
    more sequences run than there are seats."""
    from minicb.scheduler.request import RequestStatus

    engine.scheduler.check_invariants()
    sched = engine.scheduler
    waiting = [r.request_id for r in sched.waiting]
    running = [r.request_id for r in sched.running]
    swapped = [r.request_id for r in getattr(sched, "swapped", [])]
    finished = [r.request_id for r in engine.requests.values() if r.status.finished]
    everyone = waiting + running + swapped + finished
    assert len(everyone) == len(set(everyone)) == len(engine.requests), "a request is in two states, or none"
    assert all(r.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED) for r in sched.waiting)
    assert all(r.status is RequestStatus.RUNNING for r in sched.running)
    assert all(engine.requests[r].status is RequestStatus.SWAPPED for r in swapped)
    assert set(swapped) == set(engine.scheduler.kv.swapped), "swap pool and scheduler disagree"
    assert len(sched.running) <= engine.config.max_num_seqs
    holding = set(running) | {r.request_id for r in getattr(sched, "batch", [])}   # static: idle members too
    assert set(engine.trace._seat_of) <= holding, "a seat is held by a request that left the batch"


def write_files(root: Path, files: dict[str, str]) -> None:
    """A small tree of files under root (a fake package or checkout), by path relative to it."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
