"""EngineConfig: every knob of the engine in one place, validated, each with the reason it exists."""
from __future__ import annotations

from dataclasses import dataclass

from minicb.scheduler.policy import PREEMPTION_MODES, PreemptionCost
from minicb.simulator import StepCost


@dataclass
class EngineConfig:
    # What to serve.
    model: str | None = None            # a local HF folder; None is the shipped Bard model
    device: str = "auto"                # "cpu", "cuda", or "auto" (the GPU when torch sees one)
    dtype: str | None = None            # None: fp32 on the CPU, bf16 (or fp16) on a GPU

    # How to batch: the subject of lessons 01 and 02.
    batching: str = "continuous"        # "continuous": Orca's per-step scheduling; "static": each batch runs to its
    #                                     end; "padded": static on a dense padded batch, computing the pads
    max_num_seqs: int = 32              # sequences in one step: the batch's seats
    max_num_batched_tokens: int = 2048  # tokens in one step: caps the cost of a step full of prefills
    max_model_len: int | None = None    # prompt + output per request; None: what the model supports

    # Prefill against decode: lesson 07.
    enable_chunked_prefill: bool = False  # split long prompts across steps so running decodes keep flowing
    long_prefill_token_threshold: int = 0  # with chunking, the most prompt tokens one request gets per step; 0: all
    schedule_priority: str = "decode_first"  # or "prefill_first": who gets the step's token budget first

    # Who goes first, and who is turned away: lesson 07.
    scheduling_policy: str = "fcfs"     # or "priority": lower Request.priority first; may preempt less urgent ones
    max_waiting: int | None = None      # queue length beyond which new requests are REJECTED at once
    max_queue_delay_s: float | None = None  # a request still unscheduled after this long is REJECTED

    # Preemption when KV blocks run out: lesson 06.
    preemption_mode: str = "recompute"  # drop KV and prefill again; "swap": copy KV to CPU and back; "auto": cheaper
    swap_space_mb: float = 64.0         # the CPU swap pool for "swap"/"auto"; when full, recompute instead
    preemption_cost: PreemptionCost | None = None  # "auto"'s cost model; None: measured on this device at start

    # The KV cache: lesson 04.
    block_size: int = 16                # tokens per KV block; small blocks waste less, cost more table entries
    num_blocks: int | None = None       # size of the KV pool in blocks; None: from kv_cache_memory_mb
    kv_cache_memory_mb: float = 256.0   # the KV budget when num_blocks is None
    kv_reservation: str = "paged"       # "contiguous" reserves max_model_len per sequence up front, as before paging

    simulate: bool = False              # price each step with a cost model instead of running the network
    step_cost: StepCost | None = None   # the simulator's cost model; None: fitted defaults for Bard on a CPU
    attn_backend: str = "torch"         # "torch": one masked SDPA over the batch; "torch-loop": one call per
    #                                     sequence; "triton": minicb_kernels (GPU, or CPU with TRITON_INTERPRET=1)
    trace_kv_blocks: bool = False       # record every block's owner each step (the KVBlockMap widget); O(blocks)
    seed: int = 0                       # seeds requests whose SamplingParams.seed is None, for repeatable runs

    def __post_init__(self) -> None:
        choices = {"batching": ("static", "padded", "continuous"), "kv_reservation": ("paged", "contiguous"),
                   "attn_backend": ("torch", "torch-loop", "triton"),
                   "schedule_priority": ("decode_first", "prefill_first"), "scheduling_policy": ("fcfs", "priority"),
                   "preemption_mode": PREEMPTION_MODES}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"EngineConfig.{name}={getattr(self, name)!r} is unknown; use one of {allowed}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"EngineConfig.{name}={getattr(self, name)!r} is invalid: use an integer >= 1")
        if self.num_blocks is not None and (not isinstance(self.num_blocks, int) or self.num_blocks < 1):
            raise ValueError(f"EngineConfig.num_blocks={self.num_blocks!r} is invalid: use an integer >= 1 or None")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"EngineConfig.max_model_len={self.max_model_len!r} is invalid: "
                             "use an integer >= 2 or None")
        if not isinstance(self.long_prefill_token_threshold, int) or self.long_prefill_token_threshold < 0:
            raise ValueError(f"EngineConfig.long_prefill_token_threshold={self.long_prefill_token_threshold!r} is "
                             "invalid: use an integer >= 0 (0 = no cap)")
        if self.max_waiting is not None and (not isinstance(self.max_waiting, int) or self.max_waiting < 0):
            raise ValueError(f"EngineConfig.max_waiting={self.max_waiting!r} is invalid: use an integer >= 0 or None")
        if self.max_queue_delay_s is not None and not self.max_queue_delay_s > 0:
            raise ValueError(f"EngineConfig.max_queue_delay_s={self.max_queue_delay_s!r} is invalid: "
                             "use a number of seconds > 0 or None")
        if self.batching != "continuous" and (self.enable_chunked_prefill or self.scheduling_policy != "fcfs"
                                              or self.preemption_mode != "recompute"):
            raise ValueError(f"chunked prefill, the priority policy and swapping need batching='continuous', not "
                             f"{self.batching!r}: a static batch runs whole prompts, first come first served")
        if self.swap_space_mb < 0:
            raise ValueError(f"EngineConfig.swap_space_mb={self.swap_space_mb!r} is invalid: use a number >= 0")
        if self.kv_cache_memory_mb <= 0:
            raise ValueError(f"EngineConfig.kv_cache_memory_mb={self.kv_cache_memory_mb!r} is invalid: "
                             "use a number > 0")
