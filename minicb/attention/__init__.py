"""Attention backends: who computes attention over the flat batch, and how one is chosen."""
from __future__ import annotations

import functools
import warnings
from typing import Callable

import torch

from minicb.attention.flex_backend import flex_decode_attention
from minicb.attention.torch_backend import paged_attention, paged_attention_vectorized
from minicb.attention.triton_backend import triton_attention, unavailable_reason

AttentionBackend = Callable[..., torch.Tensor]   # (q, k, v, k_cache, v_cache, meta, scale) -> (T, H, hd)

BACKENDS: dict[str, AttentionBackend] = {
    "torch": paged_attention_vectorized,   # one masked SDPA over the padded batch
    "torch-loop": paged_attention,         # one SDPA per sequence: selective batching at its plainest
    "triton": triton_attention,            # one kernel launch over the ragged batch, no padding
    "flex": flex_decode_attention,         # decode reads the paged cache in place (FlexAttention, compiled)
}


def select_backend(name: str, device: torch.device, decode: Callable[..., torch.Tensor] | None = None,
                   *, seats: int = 256) -> tuple[AttentionBackend, str]:
    """The backend called `name`, and the name of the one actually used: 'triton' falls back to
    'torch', with a warning that says why and what to do, where its kernels cannot run. `decode`
    replaces the triton backend's paged decode kernel (lesson 05); `seats`: most sequences in a step."""
    if name not in BACKENDS:
        raise ValueError(f"attn_backend={name!r} is unknown; use one of {', '.join(BACKENDS)}")
    if name == "triton" and (reason := unavailable_reason(device)) is not None:
        warnings.warn(f"attn_backend='triton' falls back to 'torch': {reason}", RuntimeWarning, stacklevel=3)
        name = "torch"
    if name == "triton" and decode is not None:
        return functools.partial(triton_attention, decode=decode), name
    if name == "flex":
        return functools.partial(flex_decode_attention, rows=seats), name
    return BACKENDS[name], name
