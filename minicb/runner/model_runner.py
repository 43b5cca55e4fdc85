"""ModelRunner: owns the model, its tokenizer and the paged KV cache, and runs one FlatBatch."""
from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from minicb.attention import select_backend
from minicb.config import EngineConfig
from minicb.costs import PreemptionCost, simulated_preemption_cost
from minicb.model.compiled import CompiledModel
from minicb.model.config import ModelConfig
from minicb.model.loader import load_model, resolve_model_path
from minicb.model.packed_linear import can_pack, pack_linears
from minicb.runner.batch import FlatBatch, SequenceChunk
from minicb.runner.batch_builder import build_flat_batch
from minicb.runner.cpu_threads import ThreadFitter
from minicb.sampling import SamplingParams, sample

# Per batch row, in row order: the request's sampling params and its own generator.
RowSampling = list[tuple[SamplingParams, torch.Generator]]

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """'auto': cuda if torch sees a GPU, else cpu. Only 'cpu' and 'cuda[:N]' are supported."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    supported = "minicb runs on 'cpu' or 'cuda' (or 'cuda:N'); use one of those, or 'auto'"
    if isinstance(device, str) and device.split(":")[0].strip().lower() == "gpu":
        raise ValueError(f"device={device!r} is unknown to torch: for an NVIDIA GPU use "
                         f"{device.lower().replace('gpu', 'cuda')!r} (or 'auto')")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:   # torch's message lists devices minicb cannot run on
        raise ValueError(f"device={device!r} is not a valid device string: {supported}") from err
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device={str(device)!r} is not supported: {supported}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but torch sees no GPU; use device='cpu' or 'auto', "
                         "or install a CUDA build of torch")
    return device


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Default: fp32 on the CPU; bf16 on a GPU that has it, else fp16."""
    if dtype is None or dtype == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    allowed = f"use one of {', '.join(DTYPES)} (as a string or a torch.dtype) or 'auto'"
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype={dtype} is not supported; {allowed}")
        return dtype
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is unknown; {allowed}")
    return DTYPES[dtype]


def load_tokenizer(folder: Path):
    """None when the folder has no tokenizer (token-id prompts only)."""
    if not (folder / "tokenizer.json").exists() and not (folder / "tokenizer_config.json").exists():
        return None
    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(str(folder))


@runtime_checkable
class Runner(Protocol):
    """What the engine needs to run a step: ModelRunner runs the model, SimulatedRunner prices the step."""
    device: torch.device
    config: ModelConfig
    tokenizer: Any          # Hugging Face tokenizer, or None (token-id prompts only)
    model_path: Path

    def clock(self) -> float: ...
    def advance_to(self, t: float) -> None: ...
    def execute(self, batch: FlatBatch, sampling: RowSampling) -> list[int | None]:
        """Next token per row of batch.logits_indices; None where the logits are not finite."""
    def swap_out(self, pairs: list[tuple[int, int]]) -> None: ...
    def swap_in(self, pairs: list[tuple[int, int]]) -> None: ...


class ModelRunner:
    def __init__(self, model: str | Path | None = None, *, device: str | torch.device = "auto",
                 dtype: str | torch.dtype | None = None, num_blocks: int = 512, block_size: int = 16,
                 attn_backend: str = "torch", num_swap_blocks: int = 0,
                 decode_attention: Callable[..., torch.Tensor] | None = None, compile: bool = False,
                 max_num_seqs: int = 256, fit_threads: bool = True, pack_weights: bool = True):
        if block_size < 1 or num_blocks < 1:
            raise ValueError(f"num_blocks={num_blocks} and block_size={block_size} must both be >= 1")
        self.device = resolve_device(device)
        self.attention, self.attn_backend = select_backend(attn_backend, self.device, decode_attention,
                                                           seats=max_num_seqs)
        self.dtype = resolve_dtype(dtype, self.device)
        self.model_path = resolve_model_path(model)
        self.model, self.config = load_model(self.model_path, self.device, self.dtype)
        if pack_weights and not compile and can_pack(self.device, self.dtype):   # compile cannot lower them
            pack_linears(self.model)
        self.forward = CompiledModel(self.model) if compile else self.model
        self.fit_threads = ThreadFitter() if fit_threads and self.device.type == "cpu" else lambda: None
        self.tokenizer = load_tokenizer(self.model_path)
        self.block_size, self.num_blocks = block_size, num_blocks
        c = self.config
        self.kv_cache = torch.zeros(c.num_layers, 2, num_blocks, block_size, c.num_kv_heads, c.head_dim,
                                    device=self.device, dtype=self.dtype)  # (L, K|V, blocks, bs, n_kv, hd)
        self.num_swap_blocks = num_swap_blocks
        self.swap_cache = torch.zeros(c.num_layers, 2, num_swap_blocks, block_size, c.num_kv_heads,
                                      c.head_dim, dtype=self.dtype,
                                      pin_memory=self.device.type == "cuda")  # CPU swap pool

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        """Copy (device block, CPU block) pairs, K and V of all layers, to the swap pool."""
        if pairs:
            src, dst = (torch.tensor(x) for x in zip(*pairs))
            self.swap_cache[:, :, dst] = self.kv_cache[:, :, src.to(self.device)].cpu()

    def swap_in(self, pairs: list[tuple[int, int]]) -> None:
        """Copy (CPU block, device block) pairs back from the swap pool."""
        if pairs:
            src, dst = (torch.tensor(x) for x in zip(*pairs))
            self.kv_cache[:, :, dst.to(self.device)] = self.swap_cache[:, :, src].to(self.device)

    clock = staticmethod(time.perf_counter)

    def advance_to(self, t: float) -> None:
        time.sleep(max(0.0, t - time.perf_counter()))

    @torch.inference_mode()
    def logits(self, batch: FlatBatch) -> torch.Tensor:
        """fp32 logits (B', vocab) for the rows in batch.logits_indices."""
        hidden = self.forward(batch.input_ids, batch.positions, batch.attn, self.kv_cache, self.attention)
        return self.model.compute_logits(hidden[batch.logits_indices])

    def execute(self, batch: FlatBatch, sampling: RowSampling) -> list[int | None]:
        """Sample each row with its request's params and generator; None where logits are not finite."""
        self.fit_threads()
        params, generators = zip(*sampling) if sampling else ((), ())
        return sample(self.logits(batch), list(params), list(generators))


def preemption_cost_for(config: EngineConfig, runner: Runner) -> PreemptionCost | None:
    """Prices for preemption_mode "auto": the given ones, else measured (or simulated) on the runner.
    None when the mode is not "auto" and none were given."""
    if config.preemption_mode != "auto" or config.preemption_cost is not None:
        return config.preemption_cost
    return simulated_preemption_cost(config.step_cost) if config.simulate else measure_preemption_cost(runner)


GREEDY = SamplingParams(temperature=0.0)


def measure_preemption_cost(runner, longest: int = 512) -> PreemptionCost:
    """Fit PreemptionCost by least squares to timed prefills (up to `longest` tokens) and block copies
    on the runner's device (lesson 06b). Needs num_swap_blocks > 0."""
    bs = runner.block_size
    longest = min(longest, runner.num_blocks * bs, runner.config.max_model_len - 1)
    lengths = sorted({max(1, longest // 32), max(2, longest // 4), longest})
    prefill = []
    for n in lengths:
        batch = build_flat_batch([SequenceChunk([1] * n, 0, list(range(-(-n // bs))))], bs, runner.device)
        prefill.append((n, _timed(lambda: runner.execute(batch, [(GREEDY, None)]), runner.device)))
    x = torch.tensor([[1.0, n, n * n] for n, _ in prefill], dtype=torch.float64)
    y = torch.tensor([[t] for _, t in prefill], dtype=torch.float64)
    a, b, c = torch.linalg.lstsq(x, y).solution[:, 0].clamp(min=0).tolist()
    copies = []
    for num in (1, min(64, runner.num_blocks, runner.num_swap_blocks)):
        pairs = [(i, i) for i in range(num)]
        copies.append((num * bs, _timed(lambda: runner.swap_out(pairs), runner.device)))
    (t1, s1), (t2, s2) = copies
    per_token = max(0.0, (s2 - s1) / (t2 - t1)) if t2 > t1 else s1 / t1
    fixed = max(0.0, s1 - per_token * t1)
    return PreemptionCost(a, b, c, 2 * fixed, 2 * per_token)


def _timed(fn, device: torch.device, repeats: int = 3) -> float:
    fn()   # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats
