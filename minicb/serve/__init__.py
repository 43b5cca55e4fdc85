"""The serving front: an OpenAI-compatible HTTP server over the engine, and the client that measures it.

    async_llm        AsyncLLM: the engine behind an asyncio server, one task owning it
    api_server       `python -m minicb serve`: the HTTP endpoints (FastAPI, uvicorn)
    openai_protocol  the OpenAI request and response shapes, plain Python
    http_limits      what one client may cost: body size, read timeouts
    server_metrics   the server's Prometheus metrics
    server_process   `python -m minicb serve` in the background, for a notebook or a test
    bench_client     `python -m minicb bench serve`: load a running server and report its latencies
    client_metrics   StreamMetrics: one stream's latencies as the client sees them (lesson 09)
    stream_metrics   computes them from the stream's chunk times (lesson 09's reference)

The engine never imports this package: it serves through LLMEngine's public methods only
(tests/test_imports.py checks the direction).
"""
