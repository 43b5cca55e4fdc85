"""Lesson 09, a reference answer: minicb's own, which the benchmark client uses by default."""
from __future__ import annotations

from minicb.serve.stream_metrics import stream_metrics

__all__ = ["stream_metrics"]
