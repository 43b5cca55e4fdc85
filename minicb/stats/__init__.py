"""What happened: one record per step (trace), latency summaries (metrics), and goodput against an SLO."""
