"""Hardware presets for the simulator: the clock a simulated engine runs on, and its KV pool.

"this CPU": StepCost fitted on Bard (measured). H100/H200: an 8B Llama in bf16 priced by a roofline
(modelled): step = overhead + max(bytes read / HBM bandwidth, FLOPs / compute). Only the step time is the
8B model's; prompts, tokens and vocabulary stay Bard's.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from minicb.config import EngineConfig
from minicb.costs import CostModel, PreemptionCost, StepCost
from minicb.engine import LLMEngine
from minicb.lab.preemption_ranges import crossover_tokens
from minicb.lab.workload import WorkloadRequest
from minicb.model.config import ModelConfig, read_model_config
from minicb.model.loader import BARD_PATH
from minicb.parts import EngineParts

GB = 1e9   # datasheets count memory and bandwidth in powers of ten


@dataclass(frozen=True)
class ModelShape:
    """A Llama-style decoder's shapes, enough to count its weights, FLOPs and KV bytes."""
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int          # fewer than num_heads under grouped-query attention
    head_dim: int
    intermediate_size: int
    vocab_size: int
    bytes_per_param: int = 2   # bf16 weights
    bytes_per_kv: int = 2      # bf16 KV cache
    context_window: int = 8192   # longest context served: a victim's KV never outgrows it

    @property
    def streamed_params(self) -> int:
        """Weights a step reads and multiplies: every layer, the final norm and the LM head. Not the (untied)
        input embedding: a step gathers only its tokens' rows."""
        attention = self.hidden_size * self.head_dim * 2 * (self.num_heads + self.num_kv_heads)
        layer = attention + 3 * self.hidden_size * self.intermediate_size + 2 * self.hidden_size
        return self.num_layers * layer + self.hidden_size + self.vocab_size * self.hidden_size

    @property
    def weight_bytes(self) -> int:
        """GPU memory of the weights: the streamed ones plus the input embedding."""
        return (self.streamed_params + self.vocab_size * self.hidden_size) * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token in every layer."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_kv

    @property
    def attention_flops_per_pair(self) -> int:
        """For one (query, key) pair over all layers and heads: QK^T and PV, 2 FLOPs per multiply-add."""
        return 4 * self.num_layers * self.num_heads * self.head_dim

    @classmethod
    def of(cls, config: ModelConfig, name: str, bytes_per_param: int = 2,
           bytes_per_kv: int = 2) -> ModelShape:
        """From a model minicb loads; context_window is its max_position_embeddings."""
        return cls(name, config.num_layers, config.hidden_size, config.num_heads, config.num_kv_heads,
                   config.head_dim, config.intermediate_size, config.vocab_size, bytes_per_param,
                   bytes_per_kv, config.max_position_embeddings)

    def step_bytes(self, context_tokens: int) -> int:
        """Every streamed weight once, plus each sequence's whole KV context (context_tokens: summed over
        the step's sequences, new tokens included)."""
        return self.streamed_params * self.bytes_per_param + context_tokens * self.kv_bytes_per_token

    def step_flops(self, num_tokens: int, context_tokens: int) -> float:
        """2 FLOPs per weight per token, plus attention over context_tokens + num_tokens**2 / 2 pairs (exact
        for decodes; the triangle treats the new tokens as one prompt)."""
        pairs = context_tokens + num_tokens ** 2 / 2
        return 2 * self.streamed_params * num_tokens + self.attention_flops_per_pair * pairs

    def arithmetic_intensity(self, num_tokens: int, context_tokens: int) -> float:
        """FLOPs per byte read; below RooflineCost.ridge_point a step is memory-bound."""
        return self.step_flops(num_tokens, context_tokens) / self.step_bytes(context_tokens)


# HuggingFaceTB/SmolLM2-135M-Instruct's config.json, so no weights need fetching. Its embeddings are tied,
# but a step still reads the LM head.
SMOLLM2_135M = ModelShape("SmolLM2-135M", num_layers=30, hidden_size=576, num_heads=9, num_kv_heads=3,
                          head_dim=64, intermediate_size=1536, vocab_size=49152, context_window=8192)

# Meta's Llama-3-8B config.json.
LLAMA3_8B = ModelShape("Llama-3-8B", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                       head_dim=128, intermediate_size=14336, vocab_size=128256, context_window=8192)


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet figures: peaks, not what kernels reach (RooflineAssumptions scales them)."""
    name: str
    memory_bytes: float     # datasheet HBM capacity; the driver reports a few % more (81,559 MiB on an
    #                         H100 80GB), so the KV pool errs small
    hbm_bandwidth: float    # bytes/s
    peak_flops: float       # dense bf16 FLOP/s, without 2:4 sparsity
    host_link: float        # effective bytes/s one way to pinned host memory (what swaps cross)
    host_link_name: str


H100_SXM = GPUSpec("H100 SXM", memory_bytes=80 * GB, hbm_bandwidth=3350 * GB, peak_flops=989e12,
                   host_link=50 * GB, host_link_name="PCIe 5.0 x16")
H200 = GPUSpec("H200", memory_bytes=141 * GB, hbm_bandwidth=4800 * GB, peak_flops=989e12,
               host_link=50 * GB, host_link_name="PCIe 5.0 x16")
# Effective one-way bandwidth of pinned copies over x16 links (about 80% of the raw 16/32/64 GB/s).
HOST_LINKS = {"PCIe 3.0 x16": 12 * GB, "PCIe 4.0 x16": 25 * GB, "PCIe 5.0 x16": 50 * GB}


@dataclass(frozen=True)
class CPURoofline:
    """This CPU's roofs on torch's threads: fp32 matmul FLOP/s, and bytes/s of one pass over a tensor far
    larger than the caches (what a decode step's weight reads see)."""
    flops: float
    bandwidth: float

    @property
    def ridge_point(self) -> float:
        """FLOP per byte at which compute and reads take equally long (as RooflineCost.ridge_point)."""
        return self.flops / self.bandwidth


def measure_cpu_roofline(matmul_size: int = 768, stream_mb: int = 256, repeats: int = 3) -> CPURoofline:
    """Best of `repeats` of a square fp32 matmul and of a sum over stream_mb of fp32 (each byte read once
    from RAM). Takes under a second; it varies with load."""
    import time

    def best_of(work) -> float:
        work()   # warm-up: first-touch page faults and thread start-up are not the roof
        timings = []
        for _ in range(repeats):
            start = time.perf_counter()
            work()
            timings.append(time.perf_counter() - start)
        return min(timings)

    a = torch.randn(matmul_size, matmul_size)
    stream = torch.ones(stream_mb * 2 ** 20 // 4)
    matmul_s = best_of(lambda: a @ a)
    stream_s = best_of(lambda: stream.sum())
    return CPURoofline(flops=2 * matmul_size ** 3 / matmul_s, bandwidth=stream.numel() * 4 / stream_s)


@dataclass(frozen=True)
class RooflineAssumptions:
    """The numbers a roofline takes on trust, each with the reason for its value."""
    hbm_efficiency: float = 0.8      # share of datasheet bandwidth that weight and KV reads reach:
    #                                  streaming kernels measure 80-90% on H100
    flops_efficiency: float = 0.6    # share of dense peak a compute-bound step reaches: large bf16 GEMMs
    #                                  run at 65-75%; attention, norms and activations pull a layer lower
    step_overhead_s: float = 1e-3    # per step: scheduling, inputs, sampling, launches. Near 1 ms with CUDA
    #                                  graphs for decode (vLLM V1); eager-mode servers paid several
    swap_latency_s: float = 50e-6    # per one-way copy of a victim's KV: pinned gather, DMA setup, wait
    #                                  before its blocks are reused (lesson 06b uses 0.1 ms for both)
    block_copy_overhead_s: float = 0.0   # per piece a swap copies (a layer's K or V of a block), beyond
    #                                  its bytes. 0: one batched copy per victim, as vLLM's KV offloading
    #                                  copies since PR #38460 (the closed PR #11531 did it for swaps).
    #                                  About 1e-5 with a cudaMemcpyAsync per piece, as vLLM's first
    #                                  swap_blocks: 32 KB then moves at about 3 GB/s (PR #11531, an A100)
    memory_utilization: float = 0.9  # server's share of GPU memory (vLLM's gpu_memory_utilization default)
    activation_headroom_bytes: float = 4 * GB  # of that share, not KV: a 2k-token step's activations,
    #                                  CUDA graphs, allocator slack


@dataclass(frozen=True)
class RooflineCost:
    """A step's seconds on `gpu` for `model`, from the roofline and `assume`; a minicb.costs.CostModel."""
    model: ModelShape
    gpu: GPUSpec
    assume: RooflineAssumptions = RooflineAssumptions()
    block_size: int = 16   # tokens per KV block: a swap moves each layer's K and V of a block as one piece

    @property
    def bandwidth(self) -> float:
        return self.gpu.hbm_bandwidth * self.assume.hbm_efficiency

    @property
    def compute(self) -> float:
        return self.gpu.peak_flops * self.assume.flops_efficiency

    @property
    def ridge_point(self) -> float:
        """FLOP per byte at which compute and reads take equally long; below it a step is memory-bound."""
        return self.compute / self.bandwidth

    @property
    def per_swapped_token(self) -> float:
        """One-way seconds per token: its KV bytes over the link plus its share of per-piece overhead."""
        pieces = 2 * self.model.num_layers / self.block_size
        return self.model.kv_bytes_per_token / self.gpu.host_link + pieces * self.assume.block_copy_overhead_s

    def __call__(self, num_tokens: int, context_tokens: int) -> float:
        """context_tokens: every sequence's whole context, new tokens included, summed. At Bard's contexts
        (up to 1,024 tokens) attention is a few percent of the FLOPs at most: its estimate matters little."""
        m = self.model
        return self.assume.step_overhead_s + max(m.step_bytes(context_tokens) / self.bandwidth,
                                                 m.step_flops(num_tokens, context_tokens) / self.compute)

    def copy_s(self, tokens: int) -> float:
        return self.assume.swap_latency_s + tokens * self.per_swapped_token

    def preemption_cost(self) -> PreemptionCost:
        """Recompute: the FLOPs of t more rows in a step that runs anyway (it pays the overhead and weight
        reads already): t rows through every weight and t^2 / 2 attention pairs. An upper bound, as a
        memory-bound step runs those rows partly free. Swap: one copy each way."""
        return PreemptionCost(recompute_fixed=0.0,
                              recompute_per_token=2 * self.model.streamed_params / self.compute,
                              recompute_per_token_sq=self.model.attention_flops_per_pair / 2 / self.compute,
                              swap_fixed=2 * self.assume.swap_latency_s,
                              swap_per_token=2 * self.per_swapped_token)

    def kv_pool_blocks(self, block_size: int) -> int:
        """KV blocks in the server's share of memory, less the weights and the headroom. Not capped: a
        simulated step's work does not grow with the pool, and its stand-in cache takes 8 bytes a slot
        (6.5 MB for 51k blocks)."""
        a = self.assume
        kv_bytes = (self.gpu.memory_bytes * a.memory_utilization - self.model.weight_bytes
                    - a.activation_headroom_bytes)
        return int(kv_bytes // (self.model.kv_bytes_per_token * block_size))


@dataclass(frozen=True)
class HardwarePreset:
    """A simulated engine's hardware: its clock (a cost model) and its KV pool."""
    name: str              # the playground's dropdown label
    step_cost: CostModel   # EngineConfig(step_cost=...): (num_tokens, context_tokens) -> seconds
    num_blocks: int        # the KV pool, in blocks of block_size tokens
    block_size: int
    modelled: bool         # True: a roofline model; False: a measured fit
    notes: str             # every assumption, in words


def roofline_notes(cost: RooflineCost, block_size: int) -> str:
    """Every assumption of a roofline preset, in words built from its numbers."""
    m, g, a = cost.model, cost.gpu, cost.assume
    assumptions = "; ".join(f"{f.name}={getattr(a, f.name):g}" for f in fields(a))
    return (f"Modelled, not measured. {m.name} shapes ({m.num_layers} layers, hidden {m.hidden_size}, "
            f"{m.num_heads} query heads, {m.num_kv_heads} KV heads of {m.head_dim}, intermediate "
            f"{m.intermediate_size}, vocab {m.vocab_size}) in bf16: {m.weight_bytes / GB:.2f} GB of weights, "
            f"{m.streamed_params / 1e9:.2f}B read and multiplied every step (not the input embedding), "
            f"{m.kv_bytes_per_token // 1024} KiB of KV per token. {g.name}: {g.memory_bytes / GB:.0f} GB HBM "
            f"at {g.hbm_bandwidth / 1e12:.2f} TB/s, {g.peak_flops / 1e12:.0f} TFLOP/s dense bf16, "
            f"{g.host_link_name} at {g.host_link / GB:.0f} GB/s for swaps. "
            f"Step = {a.step_overhead_s * 1e3:g} ms + max(bytes / ({a.hbm_efficiency:g} x bandwidth), "
            f"FLOPs / ({a.flops_efficiency:g} x peak)): weights read once per step, each sequence's KV "
            f"context read once, 2 x params FLOPs per token plus attention. A swap copy costs "
            f"{a.swap_latency_s * 1e6:g} us + KV bytes / link each way, and "
            f"{a.block_copy_overhead_s * 1e6:g} us more per layer's K or V of a block. "
            f"KV pool: {a.memory_utilization:g} of memory, "
            f"less the weights and {a.activation_headroom_bytes / GB:g} GB of headroom, holds "
            f"{cost.kv_pool_blocks(block_size):,} blocks of {block_size} tokens. Assumptions: {assumptions}. "
            f"The simulator runs Bard's prompts, tokens and vocabulary; only the clock is the 8B model's.")


def cpu_preset(block_size: int = 16) -> HardwarePreset:
    """Bard on this CPU: the fitted StepCost and the engine's default KV budget."""
    cost = StepCost()
    block_bytes = read_model_config(BARD_PATH).kv_bytes_per_block(block_size, torch.float32)
    budget_mb = EngineConfig.kv_cache_memory_mb
    return HardwarePreset(
        "this CPU: Bard (measured)", cost, int(budget_mb * 2 ** 20 // block_bytes), block_size,
        modelled=False,
        notes=(f"Measured: StepCost fitted by bench/fit_step_cost.py on Bard (fp32, 2 CPU cores): "
               f"{cost.fixed * 1e3:g} ms per step + {cost.per_token * 1e3:g} ms per token computed + "
               f"{cost.per_context_token * 1e6:g} us per token of context read; a swap copies "
               f"{cost.per_swapped_token * 1e6:g} us per token each way (bench/pressure.py). KV pool: the "
               f"engine's default {budget_mb:g} MiB of fp32 KV."))


def roofline_preset(name: str, model: ModelShape, gpu: GPUSpec,
                    assume: RooflineAssumptions = RooflineAssumptions(),
                    block_size: int = 16) -> HardwarePreset:
    """`model` on `gpu`, priced by the roofline, with the KV pool that fits beside the weights."""
    cost = RooflineCost(model, gpu, assume, block_size)
    return HardwarePreset(name, cost, cost.kv_pool_blocks(block_size), block_size, modelled=True,
                          notes=roofline_notes(cost, block_size))


PRESETS: dict[str, HardwarePreset] = {p.name: p for p in (
    cpu_preset(),
    roofline_preset("H100 SXM: 8B Llama, bf16 (modelled)", LLAMA3_8B, H100_SXM),
    roofline_preset("H200: 8B Llama, bf16 (modelled)", LLAMA3_8B, H200))}


def crossover_table(cost: RooflineCost, links: dict[str, float] = HOST_LINKS,
                    peaks: tuple[float, ...] = (400e12, 989e12)) -> list[dict]:
    """The context (tokens) from which "auto" swaps rather than recomputes, for `cost` on each host link
    and dense peak."""
    rows = []
    for peak in peaks:
        for link_name, link in links.items():
            gpu = replace(cost.gpu, peak_flops=peak, host_link=link, host_link_name=link_name)
            prices = replace(cost, gpu=gpu).preemption_cost()
            rows.append({"peak_tflops": peak / 1e12, "link": link_name, "link_gb_s": link / GB,
                         "recompute_us_per_token": prices.recompute_per_token * 1e6,
                         "swap_us_per_token": prices.swap_per_token * 1e6,
                         "crossover_tokens": crossover_tokens(prices)})
    return rows


def loaded_throughput(preset: HardwarePreset, batching: str, workload: list[WorkloadRequest],
                      max_num_seqs: int, parts: EngineParts | None = None) -> float:
    """Output tokens per simulated second while requests still wait (throughput under sustained load).
    The whole workload is queued at once (arrival times unused), and the run stops when the queue empties:
    a steady stream never has the final drain. `parts`: a lesson's engine parts."""
    engine = LLMEngine(simulate=True, step_cost=preset.step_cost, num_blocks=preset.num_blocks,
                       block_size=preset.block_size, batching=batching, max_num_seqs=max_num_seqs,
                       trace_max_steps=0, parts=parts)
    requests = [engine.make_request(w.prompt, w.params) for w in workload]
    for request in requests:
        engine.queue(request)
    while engine.scheduler.num_waiting:
        engine.step()
    return sum(len(r.output_token_ids) for r in requests) / engine.clock()
