"""From sampled tokens to what the user sees: append the token, extend the text (incremental
detokenisation), and decide whether the request is done (EOS, stop tokens, stop strings, lengths).
The scheduler calls it from update_from_output, the one place a request's progress changes."""
from __future__ import annotations

from typing import Any

from minicb.detokenize import new_text
from minicb.request import Request, RequestStatus
from minicb.sampling import find_stop


class OutputProcessor:
    def __init__(self, tokenizer: Any, eos_token_ids: tuple[int, ...], max_model_len: int, max_seq_tokens: int,
                 detokenize: bool):
        self.tokenizer, self.eos_token_ids = tokenizer, eos_token_ids
        self.max_model_len = max_model_len
        self.max_seq_tokens = max_seq_tokens   # the most a sequence can hold: max_model_len, or the whole pool
        self.detokenize = detokenize and tokenizer is not None

    def append_token(self, req: Request, token: int, t: float) -> None:
        """Record a new token sampled at time t, extend the text, and decide whether req is done."""
        req.output_token_ids.append(token)
        if req.metrics.first_token_time is None:
            req.metrics.first_token_time = t
        req.metrics.token_times.append(t)
        p = req.params
        if self.detokenize and self._extend_text_and_check_stop_strings(req):
            req.status = RequestStatus.FINISHED_STOPPED
            return
        if (token in self.eos_token_ids and not p.ignore_eos) or token in p.stop_token_ids:
            req.status = RequestStatus.FINISHED_STOPPED
        elif len(req.output_token_ids) >= p.max_tokens:
            req.status = RequestStatus.FINISHED_LENGTH
        elif req.num_tokens >= self.max_seq_tokens:
            req.status, req.reason = RequestStatus.FINISHED_LENGTH, self._why_cut_short()
        if req.status.finished and self.detokenize:
            # Bytes of an unfinished character were held back; the full decode shows them as U+FFFD.
            req.text = self.tokenizer.decode(req.output_token_ids, skip_special_tokens=True)

    def _extend_text_and_check_stop_strings(self, req: Request) -> bool:
        """Append the new text; True (with the text cut before it) when a stop string appeared."""
        old_len = len(req.text)
        delta, *offsets = new_text(self.tokenizer, req.output_token_ids, *req.detok_offsets)
        req.text, req.detok_offsets = req.text + delta, tuple(offsets)
        cut = find_stop(req.text, req.params, scan_from=old_len)
        if cut is not None:
            req.text = req.text[:cut]
        return cut is not None

    def _why_cut_short(self) -> str:
        """Why a request stopped at max_seq_tokens: the model's context, or a pool smaller than it."""
        if self.max_seq_tokens == self.max_model_len:
            return f"prompt + output reached max_model_len={self.max_model_len}"
        return (f"prompt + output reached {self.max_seq_tokens} tokens, all the KV pool holds (num_blocks x "
                "block_size); raise num_blocks or kv_cache_memory_mb")
