"""Lesson 05, the reference: minicb's paged decode kernel, kernels/minicb_kernels/decode.py (imported
as minicb_kernels), which adds split-KV for long contexts at small batch."""
from minicb_kernels import paged_decode_attention

__all__ = ["paged_decode_attention"]
