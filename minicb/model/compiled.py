"""EngineConfig.compile: the forward pass through torch.compile, with attention kept out of the graph.

Eager PyTorch launches every op of a step on its own, and on a CPU serving a small model the launching,
not the arithmetic, is much of a decode step. torch.compile traces the forward once and generates fused
kernels for the norms, RoPE, SwiGLU and residual adds. Only the token count is a dynamic dimension, so a
step with a new count reuses the graph instead of compiling another (one more graph serves single-token
steps). The cache's shape stays static: with it dynamic too, torch 2.13 hands the op views of the cache
that lost their layer's storage offset, and every layer writes layer 0's keys.

Attention stays out of the graph as one opaque op, as vLLM keeps it: it writes the paged KV cache in
place, and it builds its per-step layout from the metadata's values. A graph would have to copy the
whole cache to express the first, and would break at the second. The op takes only tensors; it finds
the step's metadata and backend where CompiledModel left them for the duration of the forward.
"""
from __future__ import annotations

import torch

from minicb.attention import AttentionBackend
from minicb.attention.metadata import AttentionMetadata
from minicb.model.llama import CausalLM

_LIBRARY = torch.library.Library("minicb", "DEF")
# (a!) and (b!): the op writes the caches, so the compiler neither reorders it nor drops the writes.
_LIBRARY.define("paged_attention(Tensor q, Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, "
                "float scale) -> Tensor")
_running_steps: list[tuple[AttentionMetadata, AttentionBackend]] = []   # the forward in progress, innermost last


def _paged_attention(q, k, v, k_cache, v_cache, scale):
    meta, backend = _running_steps[-1]
    # The compiled code lays out what follows for the strides the fake below promises: contiguous.
    return backend(q, k, v, k_cache, v_cache, meta, scale).contiguous()


_LIBRARY.impl("paged_attention", _paged_attention, "CompositeExplicitAutograd")
torch.library.register_fake("minicb::paged_attention", lambda q, *_: q.new_empty(q.shape), lib=_LIBRARY)


def opaque_attention(q, k, v, k_cache, v_cache, meta, scale) -> torch.Tensor:
    """The backend the traced model calls: one op whose inside the compiler never sees."""
    return torch.ops.minicb.paged_attention(q, k, v, k_cache, v_cache, scale)


class CompiledModel:
    """Called like CausalLM's forward; the first call of each kind (a multi-token step, a one-token step)
    compiles."""

    def __init__(self, model: CausalLM):
        self.forward = torch.compile(model.forward, dynamic=False)

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                 kv_cache: torch.Tensor, backend: AttentionBackend) -> torch.Tensor:
        torch._dynamo.maybe_mark_dynamic(input_ids, 0)   # (T,)
        torch._dynamo.maybe_mark_dynamic(positions, 0)   # (T,)
        _running_steps.append((meta, backend))
        try:   # meta reaches attention through _running_steps, so the graph is not specialised on its values
            return self.forward(input_ids, positions, None, kv_cache, opaque_attention)
        finally:
            _running_steps.pop()
