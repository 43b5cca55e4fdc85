"""The server's Prometheus metrics, named as vLLM's `vllm:` ones are, in a registry of their own (not
prometheus-client's global one), so one process can build several apps, as the tests do.

Gauges and counters are read from AsyncLLM.stats at each scrape; the latency histograms observe every
finished request's own RequestMetrics, measured in the engine on its clock, not around the HTTP call.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from minicb.scheduler.request import RequestOutput
from minicb.serve.async_llm import AsyncLLM

# vLLM's buckets, trimmed: a CPU server's tokens take tens of milliseconds, a GPU's a few.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
ITL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
E2E_BUCKETS = (0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 240.0, 480.0)


class _StatsCollector(Collector):
    def __init__(self, async_llm: AsyncLLM, model_name: str):
        self.async_llm, self.model_name = async_llm, model_name

    def collect(self):
        s, labels = self.async_llm.stats, [self.model_name]
        for name, doc, value in (
                ("num_requests_running", "Requests in the running batch.", s.num_running),
                ("num_requests_waiting", "Requests queued, never started or preempted to recompute.", s.num_waiting),
                ("num_requests_swapped", "Requests whose KV blocks wait in the CPU swap pool.", s.num_swapped),
                ("kv_cache_usage_perc", "Fraction of the KV pool's blocks in use (1 = full).", s.kv_cache_usage)):
            gauge = GaugeMetricFamily(f"minicb:{name}", doc, labels=["model_name"])
            gauge.add_metric(labels, value)
            yield gauge
        for name, doc, value in (
                ("num_preemptions", "Preemptions (recompute or swap) since start.", s.num_preemptions),
                ("prompt_tokens", "Prompt tokens prefilled, once per request.", s.prompt_tokens),
                ("generation_tokens", "Tokens generated.", s.generation_tokens),
                ("prefix_cache_queries", "Prompt tokens looked up in the prefix cache (with --enable-prefix-caching).",
                 s.prefix_cache_queries),
                ("prefix_cache_hits", "Prompt tokens found in the prefix cache: hits / queries is the hit rate.",
                 s.prefix_cache_hits)):
            counter = CounterMetricFamily(f"minicb:{name}", doc, labels=["model_name"])
            counter.add_metric(labels, value)
            yield counter
        success = CounterMetricFamily("minicb:request_success", "Finished requests, by finish reason (stop, length, "
                                      "abort, rejected, error).", labels=["model_name", "finished_reason"])
        for reason in ("stop", "length", "abort", "rejected", "error"):   # every series exists from the start
            success.add_metric([self.model_name, reason], s.finished[reason])
        yield success


class ServerMetrics:
    def __init__(self, async_llm: AsyncLLM, model_name: str):
        self.registry = CollectorRegistry()
        self.registry.register(_StatsCollector(async_llm, model_name))

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(f"minicb:{name}", doc, ["model_name"], registry=self.registry,
                             buckets=buckets).labels(model_name)

        self.ttft = histogram("time_to_first_token_seconds", "Arrival to first token.", TTFT_BUCKETS)
        self.itl = histogram("inter_token_latency_seconds", "Gaps between consecutive tokens.", ITL_BUCKETS)
        self.e2e = histogram("e2e_request_latency_seconds", "Arrival to the result going back, for every "
                             "request that was accepted (aborted ones too; rejected ones never ran).", E2E_BUCKETS)
        async_llm.finished_listeners.append(self.observe)

    def observe(self, output: RequestOutput) -> None:
        m = output.metrics
        if output.outputs[0].finish_reason == "rejected":
            return
        if m.ttft is not None:
            self.ttft.observe(m.ttft)
        for gap in m.itl:
            self.itl.observe(gap)
        if m.e2e_latency is not None:
            self.e2e.observe(m.e2e_latency)

    def render(self) -> bytes:
        return generate_latest(self.registry)
