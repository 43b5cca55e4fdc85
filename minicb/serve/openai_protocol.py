"""OpenAI's completion and chat request bodies, checked field by field, and the JSON that answers them.

Plain Python, no web framework: api_server.py only moves these between HTTP and AsyncLLM. Every
refusal is an ApiError whose message names the field and the fix.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from minicb.checks import is_finite_number, is_int
from minicb.sampling import SamplingParams
from minicb.scheduler.request import RequestOutput

SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stop_token_ids", "ignore_eos")
COMMON_FIELDS = {"model", "stream", "stream_options", "user", *SAMPLING_FIELDS}   # `user` is only an id: ignored
COMPLETION_FIELDS = COMMON_FIELDS | {"prompt"}
CHAT_FIELDS = COMMON_FIELDS | {"messages", "max_completion_tokens"}
# OpenAI fields minicb does not implement, accepted only at the values that ask for nothing (null always is).
UNSUPPORTED = {"n": [1], "best_of": [1], "echo": [False], "logprobs": [False], "top_logprobs": [0], "suffix": [""],
               "presence_penalty": [0], "frequency_penalty": [0], "logit_bias": [{}], "tools": [[]],
               "tool_choice": ["none"], "response_format": [{"type": "text"}]}
DEFAULT_COMPLETION_MAX_TOKENS = 16   # OpenAI's default for /v1/completions
# OpenAI's own bound on stop strings is 4. Each one is searched for in the new text of every token, so
# their number and length would otherwise set the cost of everyone's step.
MAX_STOP_STRINGS = 4
MAX_STOP_CHARS = 128
MAX_STOP_TOKEN_IDS = 64   # enough for any model's end-of-turn ids
MAX_TEMPERATURE = 2.0     # OpenAI's bound


class ApiError(Exception):
    """An answer other than 200, in OpenAI's error shape: {"error": {message, type, param, code}}."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 retry_after: int | None = None, close_connection: bool = False):
        super().__init__(message)
        self.http_status, self.message, self.param, self.code = status, message, param, code
        self.headers = {"Retry-After": str(retry_after)} if retry_after else {}
        if close_connection:   # e.g. the rest of an oversized body is still on its way
            self.headers["Connection"] = "close"

    @property
    def body(self) -> dict:
        kind = ("service_unavailable" if self.http_status == 503 else "server_error" if self.http_status >= 500
                else "invalid_request_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass
class ParsedRequest:
    prompt: str | list[int] | list[dict]   # a chat request's messages, until the chat template is applied
    params: SamplingParams
    stream: bool
    include_usage: bool


def shown(value: object, limit: int = 60) -> str:
    """A value as JSON spells it (null, true, "text"), cut short: an error message quotes, never echoes."""
    try:
        text = json.dumps(value)
    except (RecursionError, ValueError, TypeError):
        text = f"<a {type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def json_words(message: str) -> str:
    """SamplingParams speaks Python; a JSON client sends null, true, false and "text"."""
    words = {"None": "null", "True": "true", "False": "false"}
    return re.sub(r"\b(None|True|False)\b", lambda m: words[m[1]], message.replace("'", '"'))


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ApiError(400, f"the request body is not valid JSON ({err}); send a JSON object such as "
                            '{"prompt": "ROMEO.\\n", "max_tokens": 16}') from None
    except RecursionError:
        raise ApiError(400, "the request body nests too deeply to parse; minicb reads a flat JSON object such as "
                            '{"prompt": "ROMEO.\\n", "max_tokens": 16}') from None
    except ValueError as err:   # Python's own bound: an integer of more than 4,300 digits
        raise ApiError(400, f"the request body has a number too long to read ({str(err).split(':')[0]}); send "
                            "numbers of a sensible size, such as \"max_tokens\": 16") from None
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
            known = shown(sorted(allowed), limit=999)
            raise ApiError(400, f"unknown field {shown(name)}; the fields minicb reads are {known}", name)
        if value is not None and not any(asks_for(value, nothing) for nothing in UNSUPPORTED[name]):
            how = ("minicb returns one choice per request; send n separate requests instead"
                   if name in ("n", "best_of") else f"remove it (or send {shown(UNSUPPORTED[name][0])} or null)")
            raise ApiError(400, f"{name}={shown(value)} is not supported by minicb: {how}", name)
    model = body.get("model")
    if model is not None and model != served_model:
        raise ApiError(404, f"model {shown(model)} is not served here; this server serves {shown(served_model)} "
                            "(GET /v1/models lists it), or leave `model` out", "model", "model_not_found")
    stream = False if body.get("stream") is None else body["stream"]
    if not isinstance(stream, bool):
        raise ApiError(400, f"stream={shown(stream)} is invalid: use true or false", "stream")
    return ParsedRequest(check_messages(body) if chat else check_prompt(body),
                         sampling_params(body, default_max_tokens), stream, include_usage(body, stream))


def asks_for(value: object, nothing: object) -> bool:
    """value is `nothing` in JSON's eyes: false is not 0, though Python's False == 0."""
    return value == nothing and isinstance(value, bool) == isinstance(nothing, bool)


def check_prompt(body: dict) -> str | list[int]:
    prompt = body.get("prompt")
    if prompt is None:
        raise ApiError(400, "the request has no `prompt`; send one, e.g. \"prompt\": \"ROMEO.\\n\"", "prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        raise ApiError(400, "a list of prompts is not supported: send one request per prompt (a list of "
                            "integers is one prompt of token ids)", "prompt")
    if not isinstance(prompt, (str, list)):
        raise ApiError(400, f"prompt must be a string or a list of token ids, not {type(prompt).__name__}", "prompt")
    return prompt if isinstance(prompt, str) else [integral(t) for t in prompt]


def check_messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    fix = 'send "messages": [{"role": "user", "content": "..."}]'
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, f"messages must be a non-empty list of messages; {fix}", "messages")
    return [{**m, "content": message_text(i, m, fix)} for i, m in enumerate(messages)]


def message_text(i: int, message: object, fix: str) -> str:
    """A message's content as one string: a string, a list of text parts (joined), or null from the
    assistant (a turn that called a tool, say, and said nothing)."""
    wrong = ApiError(400, f"messages[{i}] must be an object with a string role and a content that is a string or "
                          f"a list of text parts (minicb takes text only); {fix}", "messages")
    if not (isinstance(message, dict) and isinstance(message.get("role"), str)):
        raise wrong
    content = message.get("content")
    if isinstance(content, str):
        return content
    if content is None and message["role"] == "assistant":
        return ""
    if isinstance(content, list) and all(isinstance(part, dict) and part.get("type") == "text"
                                         and isinstance(part.get("text"), str) for part in content):
        return "".join(part["text"] for part in content)
    raise wrong


def sampling_params(body: dict, default_max_tokens: int) -> SamplingParams:
    """SamplingParams from the body's fields, refused with SamplingParams' own message (null = default).
    Each value is bounded here, before it can reach a step that it would fail for everyone in the batch."""
    given = {name: integral(body[name]) for name in SAMPLING_FIELDS if body.get(name) is not None}
    names = {name: name for name in given}
    if body.get("max_completion_tokens") is not None:   # chat's newer name for max_tokens, which it wins over
        given["max_tokens"], names["max_tokens"] = integral(body["max_completion_tokens"]), "max_completion_tokens"
    given.setdefault("max_tokens", default_max_tokens)
    check_stop(given.get("stop"))
    if isinstance(given.get("stop_token_ids"), list):
        given["stop_token_ids"] = [integral(t) for t in given["stop_token_ids"]]
        check_stop_token_ids(given["stop_token_ids"])
    for name in ("max_tokens", "top_k"):
        if is_int(given.get(name)) and not -2**63 <= given[name] < 2**63:
            raise ApiError(400, f"{names[name]}={shown(given[name])} is out of range: use an integer below 2**63",
                           names[name])
    temperature = given.get("temperature")
    if is_finite_number(temperature) and temperature > MAX_TEMPERATURE:
        raise ApiError(400, f"temperature={shown(temperature)} is invalid: use a number from 0 to {MAX_TEMPERATURE:g}, "
                            "as OpenAI allows", "temperature")
    try:
        return SamplingParams(**given)
    except ValueError as err:
        message = str(err).removeprefix("SamplingParams.")
        name, _, fix = message.partition(" is invalid: ")
        name = name.split("=", 1)[0]
        if name in given and fix:   # said again with the value and the fix as JSON spells them
            message = f"{names[name]}={shown(given[name])} is invalid: {json_words(fix)}"
        raise ApiError(400, message, names.get(name, name)) from None


def integral(value: object) -> object:
    """16.0 as 16: JSON Schema counts an integral number as an integer, and vLLM accepts it."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def check_stop_token_ids(ids: list) -> None:
    if len(ids) > MAX_STOP_TOKEN_IDS:
        raise ApiError(400, f"stop_token_ids has {len(ids)} ids; send at most {MAX_STOP_TOKEN_IDS}", "stop_token_ids")


def check_stop(stop: object) -> None:
    strings = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    if len(strings) > MAX_STOP_STRINGS:
        raise ApiError(400, f"stop has {len(strings)} strings; send at most {MAX_STOP_STRINGS}, as OpenAI allows",
                       "stop")
    for i, string in enumerate(strings):
        if isinstance(string, str) and len(string) > MAX_STOP_CHARS:
            raise ApiError(400, f"stop[{i}] has {len(string)} characters; send stop strings of at most "
                                f"{MAX_STOP_CHARS}", "stop")


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
