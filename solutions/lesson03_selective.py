"""Lesson 03, the reference: minicb's own batch builder, build_flat_batch in minicb/runner/batch_builder.py."""
from minicb.runner.batch_builder import build_flat_batch

__all__ = ["build_flat_batch"]
