"""Incremental detokenisation: decode a short window each step, not the whole output."""
from __future__ import annotations


def new_text(tokenizer, token_ids: list[int], prefix_offset: int, read_offset: int) -> tuple[str, int, int]:
    """-> (text to append, new prefix_offset, new read_offset). Nothing is appended while the newest
    token ends inside a multi-byte character."""
    before = tokenizer.decode(token_ids[prefix_offset:read_offset], skip_special_tokens=True)
    after = tokenizer.decode(token_ids[prefix_offset:], skip_special_tokens=True)
    if len(after) > len(before) and not after.endswith("\ufffd"):
        return after[len(before):], read_offset, len(token_ids)
    return "", prefix_offset, read_offset
