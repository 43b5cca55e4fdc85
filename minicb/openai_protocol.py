"""OpenAI's completion and chat request bodies, checked field by field, and the JSON that answers them.

Plain Python, no web framework: api_server.py only moves these between HTTP and AsyncLLM. Every
refusal is an ApiError whose message names the field and the fix.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from minicb.request import RequestOutput
from minicb.sampling import SamplingParams

SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stop_token_ids", "ignore_eos")
COMMON_FIELDS = {"model", "stream", "stream_options", "user", *SAMPLING_FIELDS}   # `user` is only an id: ignored
COMPLETION_FIELDS = COMMON_FIELDS | {"prompt"}
CHAT_FIELDS = COMMON_FIELDS | {"messages", "max_completion_tokens"}
# OpenAI fields minicb does not implement, accepted only at the value that asks for nothing (or null).
UNSUPPORTED = {"n": 1, "best_of": 1, "echo": False, "logprobs": False, "top_logprobs": 0, "suffix": None,
               "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": None, "tools": None, "tool_choice": None,
               "response_format": None}
DEFAULT_COMPLETION_MAX_TOKENS = 16   # OpenAI's default for /v1/completions


class ApiError(Exception):
    """An answer other than 200, in OpenAI's error shape: {"error": {message, type, param, code}}."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.retry_after = status, message, param, code, retry_after

    @property
    def body(self) -> dict:
        kind = {400: "invalid_request_error", 404: "invalid_request_error", 503: "service_unavailable"}
        return {"error": {"message": self.message, "type": kind.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}


@dataclass
class ParsedRequest:
    prompt: str | list[int] | list[dict]   # a chat request's messages, until the chat template is applied
    params: SamplingParams
    stream: bool
    include_usage: bool


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ApiError(400, f"the request body is not valid JSON ({err}); send a JSON object such as "
                            '{"prompt": "ROMEO.\\n", "max_tokens": 16}') from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, not {type(body).__name__}; "
                            'send one such as {"prompt": "ROMEO.\\n", "max_tokens": 16}')
    return body


def parse_request(body: dict, chat: bool, served_model: str, default_max_tokens: int) -> ParsedRequest:
    allowed = CHAT_FIELDS if chat else COMPLETION_FIELDS
    for name, value in body.items():
        if name in allowed:
            continue
        if name not in UNSUPPORTED:
            raise ApiError(400, f"unknown field {name!r}; the fields minicb reads are {sorted(allowed)}", name)
        if value is not None and value != UNSUPPORTED[name]:
            how = ("minicb returns one choice per request; send n separate requests instead"
                   if name in ("n", "best_of") else f"remove it (or send {UNSUPPORTED[name]!r})")
            raise ApiError(400, f"{name}={value!r} is not supported by minicb: {how}", name)
    model = body.get("model")
    if model is not None and model != served_model:
        raise ApiError(404, f"model {model!r} is not served here; this server serves {served_model!r} "
                            "(GET /v1/models lists it), or leave `model` out", "model", "model_not_found")
    stream = False if body.get("stream") is None else body["stream"]
    if not isinstance(stream, bool):
        raise ApiError(400, f"stream={stream!r} is invalid: use true or false", "stream")
    return ParsedRequest(check_messages(body) if chat else check_prompt(body),
                         sampling_params(body, default_max_tokens), stream, include_usage(body, stream))


def check_prompt(body: dict) -> str | list[int]:
    prompt = body.get("prompt")
    if prompt is None:
        raise ApiError(400, "the request has no `prompt`; send one, e.g. \"prompt\": \"ROMEO.\\n\"", "prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        raise ApiError(400, "a list of prompts is not supported: send one request per prompt (a list of "
                            "integers is one prompt of token ids)", "prompt")
    if not isinstance(prompt, (str, list)):
        raise ApiError(400, f"prompt must be a string or a list of token ids, not {type(prompt).__name__}", "prompt")
    return prompt


def check_messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    fix = 'send "messages": [{"role": "user", "content": "..."}]'
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, f"messages must be a non-empty list of messages; {fix}", "messages")
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise ApiError(400, f"messages[{i}] must be an object with a string role and a string content "
                                f"(minicb takes text only); {fix}", "messages")
    return messages


def sampling_params(body: dict, default_max_tokens: int) -> SamplingParams:
    """SamplingParams from the body's fields, refused with SamplingParams' own message (null = default)."""
    given = {name: body[name] for name in SAMPLING_FIELDS if body.get(name) is not None}
    if body.get("max_completion_tokens") is not None:   # chat's newer name for max_tokens, which it wins over
        given["max_tokens"] = body["max_completion_tokens"]
    given.setdefault("max_tokens", default_max_tokens)
    try:
        return SamplingParams(**given)
    except ValueError as err:
        message = str(err).removeprefix("SamplingParams.")
        raise ApiError(400, message, message.split("=", 1)[0]) from None


def include_usage(body: dict, stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not stream:
        raise ApiError(400, "stream_options is only for streaming: set stream to true, or remove it",
                       "stream_options")
    if not isinstance(options, dict) or set(options) - {"include_usage"} \
            or not isinstance(options.get("include_usage", False), bool):
        raise ApiError(400, 'stream_options must be {"include_usage": true} or {"include_usage": false}',
                       "stream_options")
    return options.get("include_usage", False)


# --- answers -----------------------------------------------------------------------------------------

def usage(output: RequestOutput) -> dict:
    prompt, completion = len(output.prompt_token_ids), len(output.outputs[0].token_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def choice(chat: bool, text: str, finish_reason: str | None, stream: bool, first: bool = False) -> dict:
    """One choice: a completion's text, or a chat message (whole, or a delta when streaming)."""
    if not chat:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    if stream:
        delta = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
            "finish_reason": finish_reason}


def response_body(chat: bool, request_id: str, model: str, choices: list[dict], stream: bool) -> dict:
    kind = ("chat.completion.chunk" if stream else "chat.completion") if chat else "text_completion"
    return {"id": request_id, "object": kind, "created": int(time.time()), "model": model, "choices": choices}


def sse(data: dict | str) -> str:
    """One server-sent event."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
