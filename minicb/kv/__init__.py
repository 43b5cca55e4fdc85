"""KV memory: the block pool (paged_allocator), the scheduler's view of it (block_manager), and prefix
caching's names (prefix_cache) and evictions (eviction)."""
