"""/openapi.json: what the server takes and answers, so that a generated client or a fuzzer can use it.

The routes read their bodies themselves (to bound their size, and to name the field and the fix in every
400), so FastAPI cannot see the bodies: the models here describe them. They describe, and check nothing;
tests/test_server_attacked.py checks that the server keeps to them (and `make fuzz` with schemathesis).
"""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from minicb.serve.openai_protocol import (MAX_STOP_CHARS, MAX_STOP_STRINGS, MAX_STOP_TOKEN_IDS, MAX_TEMPERATURE,
                                          UNSUPPORTED)

Int64 = Annotated[int, Field(ge=-2**63, le=2**63 - 1)]
StopString = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = Field(None, description="the served model (GET /v1/models); may be left out")
    max_tokens: Annotated[int, Field(ge=1, le=2**63 - 1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=MAX_TEMPERATURE)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=-1, le=2**63 - 1)] | None = Field(None, description="-1 or 0: all tokens")
    seed: Int64 | None = None
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)] | None = None
    stop_token_ids: Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=MAX_STOP_TOKEN_IDS)] | None = None
    ignore_eos: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = Field(None, description="only with stream: true")
    user: str | None = Field(None, description="an id; ignored")


class CompletionRequest(Sampling):
    prompt: Annotated[str, Field(min_length=1)] | Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    role: str
    content: str | list[TextPart] | None = Field(description="null only from the assistant")


class ChatRequest(Sampling):
    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1, le=2**63 - 1)] | None = None


FinishReason = Literal["stop", "length", "abort"]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Answer(BaseModel):
    id: str
    created: int
    model: str
    usage: Usage


class TextChoice(BaseModel):
    index: int
    text: str
    logprobs: None
    finish_reason: FinishReason


class Completion(Answer):
    object: Literal["text_completion"]
    choices: list[TextChoice]


class ChatMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    logprobs: None
    finish_reason: FinishReason


class ChatCompletion(Answer):
    object: Literal["chat.completion"]
    choices: list[ChatChoice]


class Model(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[Model]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class Error(BaseModel):
    error: ErrorBody


def json_ref(name: str) -> dict:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}


def error(description: str) -> dict:
    return {"description": description, "content": json_ref("Error")}


REFUSED = {"401": error("a missing or wrong API key (--api-key)"), "421": error("a Host that is not this server's")}
POSTED = {**REFUSED, "400": error("a field is wrong: the message names it and the fix"),
          "404": error("`model` names a model this server does not serve"),
          "408": error("the request did not arrive whole within --request-read-timeout"),
          "413": error("the body is over --max-request-body-mb"), "415": error("the body is not JSON"),
          "500": error("the engine failed on this request"),
          "503": error("turned away (a full queue), or the server is shutting down; see Retry-After")}


# One server-sent event: `data:` holds a chunk's JSON, an error's, or [DONE].
EVENT = {"type": "object", "properties": {"data": {"type": "string"}}, "required": ["data"]}


def answer(name: str) -> dict:
    return {"description": "the answer, or with stream: true server-sent events ending in `data: [DONE]`",
            "content": {**json_ref(name), "text/event-stream": {"schema": EVENT}}}


def json_answer(description: str, name: str = "") -> dict:
    return {"description": description, "content": json_ref(name) if name else {"application/json": {}}}


ROUTES: dict[tuple[str, str], dict] = {
    ("post", "/v1/completions"): {"requestBody": {"required": True, "content": json_ref("CompletionRequest")},
                                  "responses": {"200": answer("Completion"), **POSTED}},
    ("post", "/v1/chat/completions"): {"requestBody": {"required": True, "content": json_ref("ChatRequest")},
                                       "responses": {"200": answer("ChatCompletion"), **POSTED}},
    ("get", "/health"): {"responses": {"200": {"description": "serving"}, "503": error("shutting down, or failed")}},
    ("get", "/metrics"): {"responses": {"200": {"description": "Prometheus text", "content": {"text/plain": {}}},
                                        **REFUSED}},
    ("get", "/v1/models"): {"responses": {"200": json_answer("the served model", "ModelList"), **REFUSED}},
    ("get", "/debug/trace"): {"responses": {"200": json_answer("step records, and the `since` to ask with next"),
                                            "400": error("a query value is wrong"), **REFUSED}},
}


def openapi_document(app: FastAPI) -> dict:
    """FastAPI's document, with the bodies and answers the routes really have (422 is never sent: a
    wrong query value gets 400)."""
    document = get_openapi(title=app.title, version="1", routes=app.routes)
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            operation.update(ROUTES[(method, path)])
    schemas = {}
    for model in (CompletionRequest, ChatRequest, Completion, ChatCompletion, ModelList, Error):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        if model in (CompletionRequest, ChatRequest):   # OpenAI's fields minicb lacks, at the value that asks nothing
            schema["properties"].update({name: {"anyOf": [*({"const": v} for v in values), {"type": "null"}]}
                                         for name, values in UNSUPPORTED.items()})
        schemas.update(schema.pop("$defs", {}), **{model.__name__: schema})
    document["components"] = {"schemas": schemas}
    return document
