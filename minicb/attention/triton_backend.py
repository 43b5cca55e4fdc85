"""The Triton backend: minicb's flat batch handed to the kernels in kernels/ (import minicb_kernels).

One store_kv launch writes the step's K/V; then one attention launch covers the batch: the paged
decode kernel when every sequence brings one token, the varlen kernel otherwise (it takes prefill
chunks and decode rows together, so a mixed step is still one launch).
"""
from __future__ import annotations

import importlib.util
import os
from typing import Callable

import torch

from minicb.attention.metadata import AttentionMetadata


def unavailable_reason(device: torch.device) -> str | None:
    """Why the Triton kernels cannot run on `device` in this process, or None when they can."""
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed (pip install triton, or pip install -e '.[kernels]')"
    if importlib.util.find_spec("minicb_kernels") is None:
        return "the minicb_kernels package is missing; reinstall minicb with pip install -e ."
    import minicb_kernels

    if device.type == "cuda":
        return None
    if device.type != "cpu":
        return f"the kernels run on CUDA GPUs or on the CPU interpreter, not on {device.type}"
    if not minicb_kernels.INTERPRETED:
        if os.environ.get("TRITON_INTERPRET") == "1":
            return ("TRITON_INTERPRET=1 was set after minicb_kernels was imported; the kernels were already "
                    "compiled for a GPU. Restart Python (in Jupyter: the kernel) with it set from the start")
        return ("there is no GPU and Triton's CPU interpreter is off; set TRITON_INTERPRET=1 before Python "
                "starts (in Jupyter: %env TRITON_INTERPRET=1 in the first cell) to run the kernels, slowly, "
                "on the CPU")
    return None


def triton_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                     v_cache: torch.Tensor, meta: AttentionMetadata, scale: float,
                     decode: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
    """q (T, H, hd), k/v (T, n_kv, hd) for the new tokens -> attention output (T, H, hd). `decode`
    replaces the paged decode kernel (lesson 05 plugs in a learner's)."""
    from minicb_kernels import paged_decode_attention, store_kv, varlen_attention

    store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
    if meta.max_query_len == 1:
        return (decode or paged_decode_attention)(q, k_cache, v_cache, meta.seq_lens, meta.block_tables,
                                                  meta.max_seq_len, scale)
    return varlen_attention(q, k_cache, v_cache, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables,
                            meta.max_query_len, scale)
