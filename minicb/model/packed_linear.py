"""EngineConfig.pack_weights: on an x86 CPU, each Linear's fp32 weight also kept in oneDNN's own layout.

PyTorch sends an fp32 matmul on the CPU to MKL. On the course's AMD EPYC, a SmolLM2 decode step's 121
matmuls took 70 ms at 16 sequences through MKL and 32 ms through oneDNN, with each weight reordered once,
at load, into the blocks oneDNN's kernels read (bench/README.md). vLLM's CPU backend also prepares each
weight for oneDNN once, at load (docs/FACTS.md).

The dense weight stays, so a lesson can still read, count and copy it: packing costs a second copy of the
weights. The packed copy is made at load; the engine never changes a weight after that.
"""
from __future__ import annotations

import platform

import torch
import torch.nn.functional as F
from torch import nn


class PackedLinear(nn.Linear):
    """An nn.Linear whose forward reads `packed`; a copy of it (deepcopy, pickle) has none and computes densely."""

    packed: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # oneDNN's call costs about 10 us more than MKL's, and ~0.5 ms to set up for each new row count. So it
        # takes calls from ~1M multiply-adds (Bard's for one sequence stay on MKL), and a prompt's (over 64 rows)
        # only on weights big enough to repay the set-up (SmolLM2's, not Bard's)
        rows, size = x.numel() // x.shape[-1], self.weight.numel()
        worth_it = rows * size >= 2**20 and (rows <= 64 or size >= 2**19)
        if self.packed is None or not worth_it or x.dtype != self.packed.dtype or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def __getstate__(self) -> dict:
        return {k: v for k, v in super().__getstate__().items() if k != "packed"}   # oneDNN's tensor has no storage


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    """fp32 on an x86 CPU: measured there only. bf16 matmuls already go through oneDNN."""
    return (device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()
            and platform.machine().lower() in ("x86_64", "amd64"))


def pack_linears(model: nn.Module) -> None:
    """Turn every nn.Linear of the model into a PackedLinear in place, sharing its (tied) parameters."""
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = PackedLinear
            module.packed = torch.ops.mkldnn._reorder_linear_weight(module.weight.detach())
