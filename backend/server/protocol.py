"""Request bodies of the OpenAI completions and chat APIs, as far as a batchlab engine
can honour them, and the errors it answers in OpenAI's shape.

Every field is either implemented (temperature, top_p, top_k, seed, stop, max_tokens,
min_tokens, stream) or refused with a 400 naming it: a field that would change the
answer (logit_bias, penalties, logprobs, n > 1, tools, ...) at anything but its neutral
value, and any field this server does not know. Only fields that change nothing in the
answer (user, metadata, ...) are accepted and ignored. Types are strict: `true` is not a
number, "5" is not an integer. EOS is ignored, as in `batchlab run` (the embedded models
have no EOS token at all), so `ignore_eos` is accepted."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from batchlab.backend.sampling import SEED_RANGE, SamplingParams

MAX_STOPS, MAX_STOP_CHARS = 16, 1000


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
    model_config = ConfigDict(extra="ignore", strict=True)  # continuous_usage_stats: no answer change
    include_usage: bool = False


# Fields that change the answer, not implemented: refused unless at their neutral value.
NEUTRAL: dict[str, tuple] = {
    "n": (1,), "best_of": (None, 1), "echo": (None, False), "logprobs": (None, False),
    "top_logprobs": (None, 0), "prompt_logprobs": (None,), "logit_bias": (None, {}),
    "presence_penalty": (None, 0, 0.0), "frequency_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0), "length_penalty": (None, 1, 1.0), "min_p": (None, 0, 0.0),
    "suffix": (None, ""), "stop_token_ids": (None, []), "bad_words": (None, []),
    "allowed_token_ids": (None,), "include_stop_str_in_output": (None, False),
    "use_beam_search": (None, False), "tools": (None, []), "tool_choice": (None, "none"),
    "functions": (None, []), "function_call": (None, "none"), "response_format": (None,),
    "guided_json": (None,), "guided_regex": (None,), "guided_choice": (None,),
    "guided_grammar": (None,), "structured_outputs": (None,), "truncate_prompt_tokens": (None,),
    "priority": (None, 0),
}
# Fields that change nothing in the answer: accepted, ignored.
IGNORED = {"user", "metadata", "store", "service_tier", "request_id", "parallel_tool_calls",
           "skip_special_tokens", "spaces_between_special_tokens", "add_special_tokens",
           "add_generation_prompt", "continue_final_message", "chat_template_kwargs"}


def refuse_unknown(body: dict, known: set[str]) -> None:
    """A 400 naming the first field that is not implemented (or not neutral)."""
    for name, value in body.items():
        if name in known or name in IGNORED:
            continue
        if name in NEUTRAL:
            if any(value == v and type(value) is type(v) or value is v for v in NEUTRAL[name]):
                continue
            raise APIError(400, f"{name}={_short(value)}: batchlab serve does not implement "
                           f"{name}; send it only at its neutral value", param=name)
        raise APIError(400, f"{name}: batchlab serve does not know this field; remove it",
                       param=name)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # unknown fields: refuse_unknown
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0, le=100)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=-1)  # -1 and 0: all tokens (vLLM uses -1, SGLang 0)
    seed: int | None = Field(None, ge=SEED_RANGE[0], lt=SEED_RANGE[1])
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)

    def refuse_unsupported(self) -> None:
        for s in self.stop_strings:
            if not s:
                raise APIError(400, "stop: a stop string must not be empty", param="stop")
        if len(self.stop_strings) > MAX_STOPS:
            raise APIError(400, f"stop: {len(self.stop_strings)} stop strings; at most {MAX_STOPS}",
                           param="stop")
        if any(len(s) > MAX_STOP_CHARS for s in self.stop_strings):
            raise APIError(400, f"stop: a stop string longer than {MAX_STOP_CHARS} characters",
                           param="stop")

    @property
    def stop_strings(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def sampling(self, default_temperature: float) -> SamplingParams:
        t = default_temperature if self.temperature is None else self.temperature
        return SamplingParams(temperature=t, top_p=self.top_p, top_k=max(self.top_k, 0),
                              seed=self.seed)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Common):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1)  # OpenAI's default for completions


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # name: no answer change here
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
    refuse_unknown(body, set(model.model_fields))
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
