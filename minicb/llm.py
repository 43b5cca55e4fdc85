"""LLM, the offline entry point as in vLLM: `LLM().generate(prompts, params)`, or `stream` for live text."""
from __future__ import annotations

from typing import Iterator

from tqdm.auto import tqdm

from minicb.config import EngineConfig
from minicb.engine import LLMEngine
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams
from minicb.scheduler.request import RequestOutput


class LLM:
    def __init__(self, model: str | None = None, parts: EngineParts | None = None, **engine_config):
        self.engine = LLMEngine(EngineConfig(model=model, **engine_config), parts)

    def _submit(self, prompts, sampling_params, priority: list[int] | None = None) -> list[str]:
        """Validate every request, then queue them all: a list with one bad request queues none."""
        if isinstance(prompts, (str, dict)) or (isinstance(prompts, list) and prompts
                                                and isinstance(prompts[0], int)):
            prompts = [prompts]
        if not isinstance(prompts, list):
            raise ValueError(f"prompts must be a string, a dict, or a list of them, "
                             f"not {type(prompts).__name__}; token ids go in a list "
                             "(a tensor or array: .tolist())")
        if not prompts:
            raise ValueError("generate() got an empty list of prompts; pass at least one")
        if not isinstance(sampling_params, list):   # one SamplingParams (or None) for every prompt
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(sampling_params)} SamplingParams; "
                             "give one, or one per prompt")
        priority = priority if priority is not None else [0] * len(prompts)
        if len(priority) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(priority)} priorities; "
                             "give one per prompt")
        engine = self.engine
        requests = [engine.make_request(prompt, params, priority=rank)
                    for prompt, params, rank in zip(prompts, sampling_params, priority)]
        return [engine.queue(req) for req in requests]

    def _abort_unfinished(self, ids: list[str]) -> None:
        """Abort the requests of a caller that stopped listening, so the next call skips their steps."""
        for request_id in ids:
            if request_id in self.engine.requests:
                self.engine.abort(request_id)

    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool = True, priority: list[int] | None = None) -> list[RequestOutput]:
        ids = self._submit(prompts, sampling_params, priority)
        wanted = set(ids)
        results: dict[str, RequestOutput] = {}
        try:
            with tqdm(total=len(ids), desc="generate", disable=not use_tqdm, unit="req") as bar:
                while len(results) < len(ids):
                    for output in self.engine.step():
                        if output.finished and output.request_id in wanted:
                            results[output.request_id] = output
                            bar.update()
        finally:
            self._abort_unfinished([i for i in ids if i not in results])
        return [results[i] for i in ids]

    def stream(self, prompts, sampling_params=None) -> Iterator[tuple[int, str, RequestOutput]]:
        """Yield (prompt index, new text, output) as text comes; one request's pieces add up to its text.
        Closing the iterator early (break, an exception) aborts the requests it has not finished."""
        ids = self._submit(prompts, sampling_params)
        index = {rid: i for i, rid in enumerate(ids)}
        shown = dict.fromkeys(ids, 0)
        pending = set(ids)
        try:
            while pending:
                for output in self.engine.step():
                    if output.request_id not in pending:
                        continue
                    text = output.outputs[0].text
                    if output.finished:
                        pending.discard(output.request_id)
                    if len(text) > shown[output.request_id] or output.finished:
                        yield index[output.request_id], text[shown[output.request_id]:], output
                        shown[output.request_id] = len(text)
        finally:
            self._abort_unfinished(list(pending))
