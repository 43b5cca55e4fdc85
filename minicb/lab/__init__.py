"""The course's lab tools, outside the engine: hardware presets, workloads, and the near-tie check that tells
a batching bug from a float tie."""
