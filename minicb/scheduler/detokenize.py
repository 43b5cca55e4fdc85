"""Incremental detokenisation: turn each new token into new text without re-decoding the whole output.

Decoding a request's full output every step costs O(length) per step, which adds up to a visible
share of a CPU decode step at 64 sequences. Instead, decode a short window: the tokens since
`prefix_offset`, with and without the newest ones. The new text is the difference. A byte-level
token can end inside a multi-byte character (decoded as U+FFFD); then nothing is emitted until
the character completes.
"""
from __future__ import annotations


def new_text(tokenizer, token_ids: list[int], prefix_offset: int, read_offset: int) -> tuple[str, int, int]:
    """-> (text to append, new prefix_offset, new read_offset)."""
    before = tokenizer.decode(token_ids[prefix_offset:read_offset], skip_special_tokens=True)
    after = tokenizer.decode(token_ids[prefix_offset:], skip_special_tokens=True)
    if len(after) > len(before) and not after.endswith("\ufffd"):
        return after[len(before):], read_offset, len(token_ids)
    return "", prefix_offset, read_offset
