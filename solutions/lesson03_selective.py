"""Lesson 03, the reference: minicb's own batch builder, FlatBatch.build in minicb/batch.py (with
AttentionMetadata.build in minicb/attention/metadata.py for cu_seqlens_q, seq_lens and slot_mapping)."""
from minicb.batch import FlatBatch

build_flat_batch = FlatBatch.build

__all__ = ["build_flat_batch"]
