"""Lesson 04, the reference: minicb's own allocator, BlockManager.allocate / append_slots / free in
minicb/block_manager.py (which also handle the swap pool of lesson 06)."""
from minicb.block_manager import BlockManager as PagedAllocator

__all__ = ["PagedAllocator"]
