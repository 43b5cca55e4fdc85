"""ServerSeats against a real `python -m minicb serve`: the grid it draws is the server's own trace."""
from __future__ import annotations

import json
import time

import httpx
import pytest

from minicb.serve.server_process import start_server
from minicb.stats.trace import StepRecord
from minicb.viz import ServerSeats, render_seats


@pytest.fixture(scope="module")
def server():
    with start_server("--max-num-seqs", "4", "--enable-debug-trace") as s:
        yield s


def complete(url: str, prompt: str, max_tokens: int = 6) -> dict:
    reply = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens,
                                                      "temperature": 0}, timeout=60)
    reply.raise_for_status()
    return reply.json()


def test_server_seats_draw_what_the_server_traced(server):
    seats = ServerSeats(server.url, window=500)
    seats.poll()
    before = seats.since
    for speaker in ("ROMEO.\n", "JULIET.\n", "HAMLET.\n"):
        complete(server.url, speaker)
    assert seats.poll() > 0, "the steps run for three requests arrive"
    rows = httpx.get(server.url + "/debug/trace", params={"since": before, "limit": 500}).json()["steps"]
    records = [StepRecord.from_row(row) for row in rows]
    assert seats.trace.steps[-len(records):] == records, "the widget holds exactly the server's step records"
    assert [json.loads(json.dumps(r.to_row())) for r in records] == rows, "from_row inverts to_row"
    assert seats.html == render_seats(seats.trace, len(seats.trace.steps) - 1), "it draws the engine's own view"
    served = {rid for r in records for rid in r.finished}
    assert len(served) == 3, f"three requests finished in those steps: {served}"


def test_following_keeps_the_newest_window_until_stopped(server):
    seats = ServerSeats(server.url, window=5, every_s=0.05).follow()
    try:
        complete(server.url, "ROMEO.\n", max_tokens=12)
        last = httpx.get(server.url + "/debug/trace", params={"since": 0, "limit": 10_000}).json()["steps"][-1]
        deadline = time.monotonic() + 10
        while (seats.trace is None or seats.trace.steps[-1].step < last["step"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        seats.stop()
    assert seats.trace.steps[-1].step == last["step"], "it caught up with the server's last step"
    assert len(seats.trace.steps) == 5, "only the newest `window` steps are kept"
    assert not seats._thread.is_alive(), "stop() ends the polling thread"
