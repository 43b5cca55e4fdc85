"""minicb's Triton attention kernels, installed as the import package ``minicb_kernels``.

The folder is ``kernels/minicb_kernels/`` (the course layout keeps the kernels apart from the engine), and the
import name is ``minicb_kernels`` so that it never shadows PyPI's ``kernels`` (Hugging Face's kernel hub, which
transformers may import).

Three kernels cover everything continuous batching asks of attention, each one launch per layer:
- ``store_kv``: scatter the step's new K/V into the paged cache through ``slot_mapping``;
- ``varlen_attention``: packed queries of sequences of any lengths (prefill chunks, decode rows, or a
  mix), causal over each sequence's cached prefix and its new tokens, read through block tables;
- ``paged_decode_attention``: one query per sequence, optionally split along the context (split-KV)
  when there are too few sequences to fill the GPU.

On a CPU they run under Triton's interpreter, which must be switched on before this package is
imported: ``TRITON_INTERPRET=1``. ``INTERPRETED`` records whether it was.
"""
import os

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"

from minicb_kernels.decode import paged_decode_attention  # noqa: E402
from minicb_kernels.prefill import varlen_attention  # noqa: E402
from minicb_kernels.store_kv import store_kv  # noqa: E402

__all__ = ["INTERPRETED", "store_kv", "varlen_attention", "paged_decode_attention"]
