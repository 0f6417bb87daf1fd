"""Request bodies of the OpenAI completions and chat APIs, as far as a batchlab engine
can honour them, and the errors it answers in OpenAI's shape.

Fields this engine cannot honour (n > 1, logprobs, echo, tools, ...) are refused with a
400, never silently ignored; fields that only steer other servers' features are
ignored as vLLM ignores them. Generation always runs to max_tokens: EOS is ignored,
as in `batchlab run` (the embedded models have no EOS token at all), so `ignore_eos`
is accepted and `min_tokens` only checked against max_tokens."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class APIError(Exception):
    """An HTTP error with an OpenAI-style body."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0, le=100)
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)
    n: int = 1
    logprobs: Any = None
    # Known OpenAI fields that would change the answer and are not implemented.
    best_of: int | None = None
    echo: bool = False
    tools: Any = None
    response_format: Any = None

    def refuse_unsupported(self) -> None:
        if self.n != 1:
            raise APIError(400, f"n={self.n}: batchlab serve returns one choice per request", param="n")
        if self.best_of not in (None, 1):
            raise APIError(400, "best_of is not supported", param="best_of")
        for name in ("echo", "logprobs", "tools", "response_format"):
            if getattr(self, name) not in (None, False):
                raise APIError(400, f"{name} is not supported by batchlab serve", param=name)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Common):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1)  # OpenAI's default for completions


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise APIError(400, "only text content parts are supported", param="messages")
            parts.append(part["text"])
        return "".join(parts)


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)


def parse(model: type[BaseModel], body: Any) -> Any:
    """A validated request, or a 400 naming the first bad field."""
    if not isinstance(body, dict):
        raise APIError(400, f"the request body must be a JSON object, got {type(body).__name__}")
    try:
        req = model.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise APIError(400, f"{where}: {err['msg']}", param=where) from None
    req.refuse_unsupported()
    return req


def single_prompt(prompt: str | list) -> str | list[int]:
    """The one prompt of a completions request: text or token ids (a list of one
    element is that element); several prompts in one request are refused."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise APIError(400, f"{len(prompt)} prompts in one request: send one per request",
                           param="prompt")
        prompt = prompt[0]
    return prompt


@dataclass(frozen=True)
class Limits:
    """What one request may ask for, so that one client cannot exhaust the server."""
    max_model_len: int  # prompt + output tokens
    vocab_size: int
    max_body_bytes: int = 4 << 20


def check_lengths(prompt_ids: list[int], max_tokens: int | None, min_tokens: int,
                  limits: Limits) -> int:
    """Validate token ids and lengths; returns max_tokens (None: the rest of the context)."""
    n, cap, vocab = len(prompt_ids), limits.max_model_len, limits.vocab_size
    if n == 0:
        raise APIError(400, "the prompt is empty", param="prompt")
    bad = next((t for t in prompt_ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise APIError(400, f"token id {bad} is out of vocabulary (expected 0 <= id < {vocab})",
                       param="prompt")
    if n >= cap:
        raise APIError(400, f"the prompt has {n} tokens; this model's maximum context length is "
                       f"{cap} tokens, prompt plus at least one output token", param="prompt")
    if max_tokens is None:
        max_tokens = cap - n
    if n + max_tokens > cap:
        raise APIError(400, f"this model's maximum context length is {cap} tokens; you requested "
                       f"{n + max_tokens} ({n} in the prompt, {max_tokens} in the completion)",
                       param="max_tokens")
    if min_tokens > max_tokens:
        raise APIError(400, f"min_tokens={min_tokens} exceeds max_tokens={max_tokens}", param="min_tokens")
    return max_tokens
