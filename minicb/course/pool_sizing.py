"""Lesson 04's design task: size the KV pool for a workload, graded on the simulator.

An answer is a block size and a number of blocks: a pool of block_size * num_blocks token slots, cut from
the device's KV memory. Four things judge it, each measured over whole runs:
- waste: the share of the slots held by sequences that hold no token (internal fragmentation: the
  unfilled end of each sequence's last block);
- block overhead: each block a step's attention reads costs a table lookup and a read of its own, so
  small blocks add work per token read (the PagedAttention paper, §7.2: blocks too small underuse the GPU);
- preemptions: how often a growing sequence found no free block and a running request gave its blocks back;
- memory: the slots the pool takes, which nothing else on the device can use.
The workload is chat-like: short speaker-line prompts, heavy-tailed output lengths drawn in advance
(ignore_eos), Poisson arrivals. Its peak demand differs from seed to seed, and the heavy tail makes a
few seeds' peaks far above the rest.
"""
from __future__ import annotations

from dataclasses import dataclass

from minicb import course
from minicb.engine import LLMEngine
from minicb.lab.workload import WorkloadRequest, make_workload, run_workload
from minicb.parts import EngineParts

BLOCK_SIZES = (8, 16, 32, 64, 128)   # the block sizes the paged attention kernels are built for
MAX_WASTE = 0.3              # at most this share of the held slots may hold no token
BLOCK_OVERHEAD_TOKENS = 4    # reading one more block costs about as much as reading this many more tokens
MAX_BLOCK_OVERHEAD = 1 / 3   # the blocks' cost may add at most this share to the cost of the tokens read
MAX_PREEMPTIONS_PER_REQUEST = 0.02   # over all the graded runs: at most 2 preemptions per 100 requests
MEMORY_SHARE = 1.25          # the pool may take at most this many times the slots of the reference answer's


@dataclass(frozen=True)
class PoolProblem:
    """n requests per run at `rate` per second, `max_num_seqs` seats, outputs up to max_tokens; every
    request fits in max_model_len tokens. The device's KV memory holds budget_slots token slots.
    practice_seeds: the workloads to design on (the grader uses others, drawn the same way)."""
    n: int = 64
    rate: float = 60.0
    max_num_seqs: int = 16
    max_tokens: int = 128
    max_model_len: int = 160
    budget_slots: int = 4096
    block_sizes: tuple[int, ...] = BLOCK_SIZES
    practice_seeds: tuple[int, ...] = (0, 1, 2)

    def workload(self, seed: int) -> list[WorkloadRequest]:
        """The requests of one run; seed draws the prompts, the output lengths and the arrival gaps."""
        return make_workload(self.n, lengths="heavy", rate=self.rate, seed=seed, max_tokens=self.max_tokens)


@dataclass(frozen=True)
class PoolReport:
    """One pool on one workload. Slot counts are summed over the run's steps (a slot held for ten steps
    counts ten times), so held_slot_steps weighs each step by what the pool held then."""
    block_size: int
    num_blocks: int
    requests: int
    preemptions: int
    peak_slots: int               # the most slots held at once
    held_slot_steps: int
    empty_slot_steps: int         # held, and holding no token

    @property
    def slots(self) -> int:
        return self.block_size * self.num_blocks

    @property
    def waste(self) -> float:
        return self.empty_slot_steps / self.held_slot_steps if self.held_slot_steps else 0.0

    @property
    def block_overhead(self) -> float:
        return block_overhead([self])

    def __str__(self) -> str:
        return (f"{self.num_blocks} blocks of {self.block_size} ({self.slots:,} slots): {self.waste:.0%} of the held "
                f"slots empty, block overhead {self.block_overhead:.0%}, {self.preemptions} preemptions for "
                f"{self.requests} requests, peak {self.peak_slots:,} slots held")


def answer_error(answer: object, problem: PoolProblem = PoolProblem()) -> str | None:
    """What makes `answer` no pool the grader can run, in words; None when it is one."""
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        return f"return a pair (block_size, num_blocks), not {answer!r}"
    block_size, num_blocks = answer
    if isinstance(block_size, bool) or block_size not in problem.block_sizes:
        return f"the block size must be one of {problem.block_sizes}, not {block_size!r}"
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
        return f"the number of blocks must be an int >= 1, not {num_blocks!r}"
    if block_size * num_blocks > problem.budget_slots:
        return (f"{num_blocks} blocks of {block_size} take {block_size * num_blocks:,} slots: more than the device's "
                f"{problem.budget_slots:,}")
    if block_size * num_blocks < problem.max_model_len:
        return (f"{num_blocks} blocks of {block_size} ({block_size * num_blocks} slots) cannot hold one request of "
                f"max_model_len={problem.max_model_len} tokens: a long one would be cut short")
    return None


def run_pool(block_size: int, num_blocks: int, seed: int, problem: PoolProblem = PoolProblem(),
             parts: EngineParts | None = None) -> PoolReport:
    """The workload of `seed` on the simulator, served from this pool. parts: the engine's lesson parts;
    None: course.parts(lesson=4), yours (minicb's in place of each stub, lesson 04's noted)."""
    engine = LLMEngine(device="cpu", simulate=True, max_num_seqs=problem.max_num_seqs, block_size=block_size,
                       num_blocks=num_blocks, max_model_len=problem.max_model_len, trace_max_steps=None,
                       parts=course.parts(lesson=4) if parts is None else parts)
    outputs = run_workload(engine, problem.workload(seed), progress=False)
    steps = engine.trace.steps
    return PoolReport(block_size, num_blocks, len(outputs), engine.num_preemptions,
                      max((s.reserved_slots for s in steps), default=0), sum(s.reserved_slots for s in steps),
                      sum(s.reserved_slots - s.token_slots for s in steps))


def total_waste(reports: list[PoolReport]) -> float:
    """The share of all the slot-steps held over these runs that held no token."""
    held = sum(r.held_slot_steps for r in reports)
    return sum(r.empty_slot_steps for r in reports) / held if held else 0.0


def block_overhead(reports: list[PoolReport]) -> float:
    """What reading the blocks adds to the cost of reading the tokens, over these runs: each step reads every
    block its sequences hold (held slots / block size) and every token in them."""
    blocks = sum(r.held_slot_steps / r.block_size for r in reports)
    tokens = sum(r.held_slot_steps - r.empty_slot_steps for r in reports)
    return BLOCK_OVERHEAD_TOKENS * blocks / tokens if tokens else 0.0


def preemptions_per_request(reports: list[PoolReport]) -> float:
    """Preemptions over these runs, per request served."""
    return sum(r.preemptions for r in reports) / sum(r.requests for r in reports)
