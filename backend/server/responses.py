"""Response bodies and stream chunks in the OpenAI shapes (completions and chat)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field


@dataclass
class Reply:
    """What one request produced so far, and how to say it."""
    request_id: int
    model: str
    chat: bool
    prompt_tokens: int
    created: int = field(default_factory=lambda: int(time.time()))
    texts: list[str] = field(default_factory=list)  # one per token ('' while held back)
    finish_reason: str = "length"

    @property
    def id(self) -> str:
        return f"{'chatcmpl' if self.chat else 'cmpl'}-{self.request_id}"

    @property
    def object(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    def usage(self) -> dict:
        n = len(self.texts)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": n,
                "total_tokens": self.prompt_tokens + n}

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def full(self) -> dict:
        text = "".join(self.texts)
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": self.finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": self.finish_reason}
        return {**self._head(self.object), "choices": [choice], "usage": self.usage()}

    def chunk(self, text: str, first: bool, last: bool) -> str:
        """The SSE event of one token. A chat stream's first chunk carries the role with
        the first token (never a chunk of its own: each chunk is one token)."""
        reason = self.finish_reason if last else None
        if self.chat:
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            body = {**self._head("chat.completion.chunk"), "choices": [choice]}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
            body = {**self._head("text_completion"), "choices": [choice]}
        return sse(body)

    def usage_chunk(self) -> str:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return sse({**self._head(obj), "choices": [], "usage": self.usage()})


def sse(body: dict) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


DONE = "data: [DONE]\n\n"
