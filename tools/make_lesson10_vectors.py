"""Write lesson 10's fixed vectors, tests/exercises/vectors/lesson10_block_hashes.json, from minicb's own
block_hashes, so that the graders hold expected names without holding the algorithm.

    python tools/make_lesson10_vectors.py     # rewrites the file; its names change only if the format does

Each case: token ids, a block size, a parent name (hex, or null) and the names minicb gives (hex), with a
line saying what the case is about; the grader quotes that line when a learner's names differ.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from minicb.prefix_cache import block_hashes

OUT = Path(__file__).resolve().parent.parent / "tests" / "exercises" / "vectors" / "lesson10_block_hashes.json"


def cases() -> list[tuple[str, list[int], int, bytes | None]]:
    rng = random.Random(10)
    some_parent = hashlib.sha256(b"an earlier prefix").digest()
    twenty = [rng.randrange(2048) for _ in range(20)]
    return [
        ("one block of two ids, no parent", [1, 2], 2, None),
        ("ids of every size: 0, 70000 and 2**32 - 1 take 4 bytes each", [70000, 2**32 - 1, 0], 3, None),
        ("a block of one id", [7], 1, None),
        ("blocks of one id each", [5, 5, 5, 9], 1, None),
        ("the same block twice in a row", [5, 6, 5, 6], 2, None),
        ("a partial last block (7 ids in blocks of 3)", [3, 1, 4, 1, 5, 9, 2], 3, None),
        ("fewer ids than a block", [3, 1, 4], 4, None),
        ("no ids at all", [], 4, None),
        ("five blocks of four", twenty, 4, None),
        ("five blocks of four after a parent", twenty, 4, some_parent),
        ("one block of 16 after a parent, and a partial one", twenty[:19], 16, some_parent),
        ("a long prompt in blocks of 16", [rng.randrange(50_000) for _ in range(200)], 16, None),
    ]


def main() -> None:
    vectors = [{"about": about, "token_ids": ids, "block_size": size, "parent": parent and parent.hex(),
                "hashes": [h.hex() for h in block_hashes(ids, size, parent)]}
               for about, ids, size, parent in cases()]
    OUT.write_text("[\n" + ",\n".join(json.dumps(case) for case in vectors) + "\n]\n")   # a case a line
    print(f"wrote {len(vectors)} cases to {OUT}")


if __name__ == "__main__":
    main()
