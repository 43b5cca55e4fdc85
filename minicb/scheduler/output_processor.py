"""OutputProcessor: append a sampled token, extend the text, and decide whether the request is done.
The scheduler records what it decides: the scheduler alone writes a request's state."""
from __future__ import annotations

from typing import Any

from minicb.sampling import find_stop
from minicb.scheduler.detokenize import new_text
from minicb.scheduler.request import Request, RequestStatus


class OutputProcessor:
    def __init__(self, tokenizer: Any, eos_token_ids: tuple[int, ...], max_model_len: int,
                 max_seq_tokens: int, detokenize: bool):
        self.tokenizer, self.eos_token_ids = tokenizer, eos_token_ids
        self.max_model_len = max_model_len
        # the most a sequence can hold: max_model_len, or the whole pool if smaller
        self.max_seq_tokens = max_seq_tokens
        self.detokenize = detokenize and tokenizer is not None

    def append_token(self, req: Request, token: int) -> tuple[RequestStatus, str | None] | None:
        """Append token and extend the text. Returns the finished state and an optional reason,
        or None: req goes on."""
        req.output_token_ids.append(token)
        p = req.params
        finish: tuple[RequestStatus, str | None] | None = None
        if self.detokenize and self._extend_text_and_check_stop_strings(req):
            return RequestStatus.FINISHED_STOPPED, None
        if (token in self.eos_token_ids and not p.ignore_eos) or token in p.stop_token_set:
            finish = RequestStatus.FINISHED_STOPPED, None
        elif len(req.output_token_ids) >= p.max_tokens:
            finish = RequestStatus.FINISHED_LENGTH, None
        elif req.num_tokens >= self.max_seq_tokens:
            finish = RequestStatus.FINISHED_LENGTH, self._why_cut_short()
        if finish is not None and self.detokenize:
            # Bytes of an unfinished character were held back; the full decode shows them as U+FFFD.
            req.text = self.tokenizer.decode(req.output_token_ids, skip_special_tokens=True)
        return finish

    def _extend_text_and_check_stop_strings(self, req: Request) -> bool:
        """True (the text cut before it) when a stop string appeared."""
        old_len = len(req.text)
        delta, *offsets = new_text(self.tokenizer, req.output_token_ids, *req.detok_offsets)
        req.text, req.detok_offsets = req.text + delta, tuple(offsets)
        cut = find_stop(req.text, req.params, scan_from=old_len)
        if cut is not None:
            req.text = req.text[:cut]
        return cut is not None

    def _why_cut_short(self) -> str:
        if self.max_seq_tokens == self.max_model_len:
            return f"prompt + output reached max_model_len={self.max_model_len}"
        return (f"prompt + output reached {self.max_seq_tokens} tokens, all the KV pool holds (num_blocks x "
                "block_size); raise num_blocks or kv_cache_memory_mb")
