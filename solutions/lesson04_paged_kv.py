"""Lesson 04, the reference: minicb's own allocator, PagedAllocator in minicb/block_manager.py (its
free also handles the swap pool of lesson 06)."""
from minicb.block_manager import PagedAllocator

__all__ = ["PagedAllocator"]
