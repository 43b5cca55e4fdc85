"""Write tests/exercises/vectors/lesson09_stream_metrics.json: lesson 09's worked streams, each with
minicb's own answer (minicb.serve.stream_metrics.stream_metrics), which the grader compares the learner's with.

    python tools/lesson09_vectors.py     # after a change to the streams below or to minicb's stream_metrics

The streams are written by hand, one per situation a client meets, and named in words for the failure
message; the answers are never typed in.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from minicb.serve.stream_metrics import stream_metrics

OUT = Path(__file__).resolve().parent.parent / "tests" / "exercises" / "vectors" / "lesson09_stream_metrics.json"

# (what the stream is, in words; send time; chunks as (arrival time, tokens carried))
STREAMS: list[tuple[str, float, list[tuple[float, int]]]] = [
    ("one token per chunk, at uneven gaps", 0.0, [(0.2, 1), (0.25, 1), (0.4, 1), (0.41, 1)]),
    ("a role-only chunk first, an empty chunk between tokens, a usage-only chunk last", 10.0,
     [(10.05, 0), (10.3, 1), (10.35, 1), (10.4, 0), (10.45, 2), (10.5, 1), (10.52, 0)]),
    ("a chunk of 3 tokens after a single token", 0.0, [(0.2, 1), (0.5, 3), (0.6, 1)]),
    ("the first chunk carries 3 tokens", 0.0, [(0.2, 3), (0.3, 1)]),
    ("every chunk carries several tokens", 5.0, [(5.4, 2), (5.5, 4), (5.9, 2)]),
    ("a single token, then a usage-only chunk", 0.0, [(0.2, 1), (0.3, 0)]),
    ("a long queue before the first token", 1.0, [(4.0, 1), (4.02, 1), (4.04, 1)]),
    ("keep-alive chunks during a pause between tokens", 2.0, [(2.1, 1), (2.6, 0), (3.1, 0), (3.6, 1), (3.65, 2)]),
    ("two chunks at the same instant", 0.0, [(0.1, 1), (0.1, 1), (0.3, 1)]),
    ("no chunk at all (a rejected request)", 3.0, []),
    ("only chunks without a token (a failed request)", 0.0, [(0.1, 0), (0.2, 0)]),
    ("a chunk stamped before the send", 1.0, [(0.5, 1), (1.5, 1)]),
    ("a token chunk stamped before the previous chunk", 0.0, [(0.2, 1), (0.4, 1), (0.3, 1)]),
    ("an empty chunk stamped before the previous chunk", 0.0, [(0.2, 1), (0.4, 0), (0.3, 1)]),
]


def answer(send_time: float, chunks: list[tuple[float, int]]) -> dict:
    try:
        return {"want": dataclasses.asdict(stream_metrics(send_time, chunks))}
    except ValueError:
        return {"want_error": "ValueError"}


def main() -> None:
    cases = [{"what": what, "send_time": send, "chunks": chunks, **answer(send, chunks)}
             for what, send, chunks in STREAMS]
    written_by = json.dumps("python tools/lesson09_vectors.py (minicb.serve.stream_metrics.stream_metrics's answers)")
    lines = ",\n  ".join(json.dumps(case) for case in cases)   # a case a line, for a readable diff
    OUT.write_text(f'{{"written_by": {written_by},\n "cases": [\n  {lines}\n ]}}\n')
    print(f"{OUT}: {len(cases)} streams")


if __name__ == "__main__":
    main()
