"""Lesson 03, the reference: minicb's own batch builder, build_flat_batch in minicb/batch.py."""
from minicb.batch import build_flat_batch

__all__ = ["build_flat_batch"]
