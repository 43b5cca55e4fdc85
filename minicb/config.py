"""EngineConfig: every knob of the engine in one place, validated, each with the reason it exists."""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, get_args, get_type_hints

from minicb.checks import is_finite_number, is_int
from minicb.costs import CostModel, PreemptionCost


CHOICES = {"batching": ("static", "padded", "continuous"), "kv_reservation": ("paged", "contiguous"),
           "attn_backend": ("torch", "torch-loop", "triton", "flex"),
           "schedule_priority": ("decode_first", "prefill_first"),
           "scheduling_policy": ("fcfs", "priority"), "preemption_mode": ("recompute", "swap", "auto")}


@dataclass
class EngineConfig:
    # What to serve, and on what. None: $MINICB_MODEL, $MINICB_DEVICE or $MINICB_DTYPE when set and not
    # empty (one switch moves every lesson), else the default. After __post_init__ they hold the choice.
    model: str | None = None            # a local HF folder or a hub id ("Qwen/Qwen3-0.6B"); default: Bard
    device: str | None = None           # "cpu", "cuda", or "auto" (default: the GPU when torch sees one)
    dtype: str | None = None            # "float32", "bfloat16", "float16", or "auto" (the default: fp32 on
    #                                     the CPU, bf16 or fp16 on a GPU)

    # Batching: lessons 01 and 02.
    batching: str = "continuous"        # "continuous": Orca's per-step scheduling; "static": each batch runs
    #                                     to its end; "padded": static on a dense batch, computing the pads
    max_num_seqs: int = 32              # sequences in one step: the batch's seats
    max_num_batched_tokens: int | None = None  # tokens in one step (caps a step of prefills); None: 2048 with
    #                                     chunked prefill, else max(2048, max_model_len) so any prompt fits
    max_model_len: int | None = None    # prompt + output per request; None: what the model supports

    # Prefill against decode: lesson 07.
    enable_chunked_prefill: bool = False  # split long prompts across steps so running decodes keep flowing
    long_prefill_token_threshold: int = 0  # with chunking, most prompt tokens per request per step (0: all)
    schedule_priority: str = "decode_first"  # or "prefill_first": who gets the step's token budget first

    # Who goes first, and who is turned away: lesson 07b.
    scheduling_policy: str = "fcfs"     # or "priority": lower Request.priority first; may preempt others
    max_waiting: int | None = None      # cap on waiting requests the next step cannot start (no seat, budget
    #                                     or KV blocks); new ones beyond it are REJECTED at once. None: no cap
    max_queue_delay_s: float | None = None  # a request unscheduled after this long is REJECTED; None: no cap

    # Preemption when KV blocks run out: lesson 06.
    preemption_mode: str = "recompute"  # drop KV, re-prefill; "swap": KV to CPU and back; "auto": the cheaper
    swap_space_mb: float = 64.0         # the CPU swap pool for "swap"/"auto"; when full, recompute instead
    preemption_cost: PreemptionCost | None = None  # "auto"'s costs; None: measured on this device at start

    # The KV cache: lesson 04.
    block_size: int = 16                # tokens per KV block: smaller wastes less, costs more table entries
    num_blocks: int | None = None       # size of the KV pool in blocks; None: from kv_cache_memory_mb
    kv_cache_memory_mb: float = 256.0   # the KV budget when num_blocks is None
    kv_reservation: str = "paged"       # "contiguous" reserves max_model_len per sequence up front
    enable_prefix_caching: bool = False  # reuse the KV blocks of a prompt prefix computed before. Off by
    #                                     default, so the earlier lessons' figures stay the same

    simulate: bool = False              # price each step with a cost model instead of running the network
    step_cost: CostModel | None = None  # the simulator's cost model: StepCost (None: fitted for Bard on this
    #                                     CPU) or a GPU preset's RooflineCost from minicb.lab.hardware
    attn_backend: str = "torch"         # "torch": a masked SDPA per batch; "torch-loop": one per sequence;
    #                                     "triton": minicb_kernels (GPU, or CPU with TRITON_INTERPRET=1);
    #                                     "flex": decode of 32 sequences or more reads the paged cache in
    #                                     place (FlexAttention, compiled once per seats and pool). Not the
    #                                     default: on this CPU it took 9% off a SmolLM2 step at 64 sequences
    #                                     but its compile costs seconds, more than a lesson's engines win
    fit_threads: bool = True            # on the CPU, run torch on the cores other programs leave idle, at
    #                                     most torch's thread count: two threads on one free core wait for
    #                                     each other and a step runs 3x slower (minicb/runner/cpu_threads.py)
    pack_weights: bool = True           # fp32 on an x86 CPU: matmuls through oneDNN on weights reordered once
    #                                     at load, 2.2x faster than MKL here at 16 sequences, for a second copy
    #                                     of the weights (minicb/model/packed_linear.py). Not with compile
    compile: bool = False               # torch.compile the forward, not attention: fewer, fused ops per step
    #                                     after a compile of tens of seconds. It cannot lower packed weights,
    #                                     so on an x86 CPU eager is faster (bench/README.md); elsewhere it
    #                                     pays in long runs, not lessons
    trace_kv_blocks: bool = False       # record each block's owner every step (KVBlockMap widget); O(blocks)
    trace_max_steps: int | None = 100_000  # newest steps the trace keeps, so a long-lived server's memory
    #                                     stays flat; 0: no trace at all; None: keep every step
    check_kv_invariants: bool = False   # check the KV pool's rules every step (lessons, tests); O(blocks)
    seed: int = 0                       # seeds requests with SamplingParams.seed None, for repeatable runs

    def __post_init__(self) -> None:
        self.model = from_environment("model", self.model)
        self.device = from_environment("device", self.device)
        self.dtype = from_environment("dtype", self.dtype)
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"EngineConfig.{name}={getattr(self, name)!r} is unknown; "
                                 f"use one of {allowed}")

        def check(name: str, valid: Callable[[Any], bool], fix: str) -> None:
            value = getattr(self, name)
            if not valid(value):
                raise ValueError(f"EngineConfig.{name}={value!r} is invalid: {fix}")

        for name in ("max_num_seqs", "block_size"):
            check(name, lambda v: is_int(v) and v >= 1, "use an integer >= 1")
        check("max_num_batched_tokens", lambda v: v is None or (is_int(v) and v >= 1),
              "use an integer >= 1 or None (None: 2048, or max_model_len if more, without chunked prefill)")
        check("num_blocks", lambda v: v is None or (is_int(v) and v >= 1), "use an integer >= 1 or None")
        check("max_model_len", lambda v: v is None or (is_int(v) and v >= 2),
              "use an integer >= 2 or None (None: what the model supports)")
        check("long_prefill_token_threshold", lambda v: is_int(v) and v >= 0,
              "use an integer >= 0 (0 = no cap)")
        check("max_waiting", lambda v: v is None or (is_int(v) and v >= 0), "use an integer >= 0 or None")
        check("trace_max_steps", lambda v: v is None or (is_int(v) and v >= 0),
              "use an integer >= 0 (0 turns the trace off) or None (keep every step)")
        check("max_queue_delay_s", lambda v: v is None or (is_finite_number(v) and v > 0),
              "use a finite number of seconds > 0 or None")
        check("swap_space_mb", lambda v: is_finite_number(v) and v >= 0, "use a finite number >= 0")
        check("kv_cache_memory_mb", lambda v: is_finite_number(v) and v > 0, "use a finite number > 0")
        for name in ("enable_chunked_prefill", "enable_prefix_caching", "simulate", "compile", "pack_weights",
                     "fit_threads", "trace_kv_blocks", "check_kv_invariants"):
            check(name, lambda v: isinstance(v, bool), "use True or False")
        check("seed", is_int, "use an integer")
        check("step_cost", lambda v: v is None or isinstance(v, CostModel),
              "use None, a minicb.costs.StepCost or a preset's cost "
              "(minicb.lab.hardware.PRESETS[name].step_cost)")
        if self.batching != "continuous" and (self.enable_chunked_prefill or self.scheduling_policy != "fcfs"
                                              or self.preemption_mode != "recompute"):
            raise ValueError(f"chunked prefill, the priority policy and swapping need batching='continuous', "
                             f"not {self.batching!r}: a static batch runs whole prompts, first come first "
                             "served")
        if self.enable_prefix_caching and (self.batching != "continuous" or self.kv_reservation != "paged"):
            raise ValueError(f"enable_prefix_caching needs batching='continuous' and kv_reservation='paged', "
                             f"not {self.batching!r} and {self.kv_reservation!r}: a cached prefix is shared "
                             "block by block, as paged continuous batching hands them out")


    @property
    def pool_knob(self) -> str:
        """The option that sized the KV pool: the one to raise when it is too small."""
        return "num_blocks" if self.num_blocks else "kv_cache_memory_mb"

    def token_budget(self, max_model_len: int) -> int:
        """max_num_batched_tokens, or its default for this max_model_len."""
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        return (DEFAULT_TOKEN_BUDGET if self.enable_chunked_prefill
                else max(DEFAULT_TOKEN_BUDGET, max_model_len))


DEFAULT_TOKEN_BUDGET = 2048   # vLLM's default max_num_batched_tokens with chunked prefill


# The one place minicb reads these variables: field -> (variable, value when neither is given).
ENVIRONMENT = {"model": ("MINICB_MODEL", None), "device": ("MINICB_DEVICE", "auto"),
               "dtype": ("MINICB_DTYPE", None)}


def from_environment(field: str, value: Any) -> Any:
    """The value given, else the field's environment variable when set and not empty, else the default."""
    variable, default = ENVIRONMENT[field]
    if value is not None:
        return value
    return os.environ.get(variable, "").strip() or default


# Not flags: the model has its own, a cost model is an object, and a simulated server would answer with
# token ids that were never computed.
NOT_FLAGS = ("model", "simulate", "step_cost", "preemption_cost")


def cli_knobs() -> dict[str, tuple[type, Any]]:
    """name -> (type, default) of the fields a command line can set."""
    hints = get_type_hints(EngineConfig)
    knobs = {}
    for f in fields(EngineConfig):
        kinds = [t for t in (get_args(hints[f.name]) or (hints[f.name],)) if t is not type(None)]
        if f.name not in NOT_FLAGS and len(kinds) == 1 and kinds[0] in (bool, int, float, str):
            knobs[f.name] = kinds[0], f.default
    return knobs


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """One flag per knob, named after the field as vLLM does (--max-num-seqs); EngineConfig checks values."""
    group = parser.add_argument_group("engine", "EngineConfig's knobs; minicb/config.py says what each does")
    for name, (kind, default) in cli_knobs().items():
        flag = "--" + name.replace("_", "-")
        if kind is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                               help=f"EngineConfig.{name}")
        else:
            group.add_argument(flag, type=kind, default=default, choices=CHOICES.get(name),
                               metavar=None if name in CHOICES else kind.__name__.upper(),
                               help=f"EngineConfig.{name} (default: "
                                    + (f"${ENVIRONMENT[name][0]}, else {ENVIRONMENT[name][1] or 'auto'})"
                                       if name in ENVIRONMENT else "%(default)s)"))


def cli_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """EngineConfig's keyword arguments from parsed flags."""
    return {name: getattr(args, name) for name in cli_knobs()}
