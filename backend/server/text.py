"""How text becomes token ids and ids become text.

A checkpoint directory with a tokenizer (tokenizer.json or tokenizer_config.json) uses
it, with its chat template when it has one. The embedded presets (seeded random weights)
have none: they get a byte codec, so that any text can be served exactly and the same
everywhere. A prompt given as token ids never passes through a codec."""
from __future__ import annotations

from pathlib import Path
from typing import Protocol


class TextCodec(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode_token(self, token: int) -> str: ...

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]: ...


def plain_chat_text(messages: list[dict[str, str]]) -> str:
    """The chat template when a model has none: one `role: content` line per message,
    then the assistant's turn."""
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"


class ByteCodec:
    """Text as its UTF-8 bytes (ids 0-255). A generated id prints as its ASCII character
    when printable (32-126), else as `<id>`: every token has non-empty text, so a stream
    carries one visible chunk per token."""
    name = "bytes"

    def __init__(self, vocab_size: int) -> None:
        if vocab_size < 256:
            raise ValueError(f"the byte codec needs a vocabulary of >= 256 ids, the model has {vocab_size}")

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode_token(self, token: int) -> str:
        return chr(token) if 32 <= token <= 126 else f"<{token}>"

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        return self.encode(plain_chat_text(messages))


class HFCodec:
    """A checkpoint's own tokenizer (transformers)."""

    def __init__(self, directory: str) -> None:
        from transformers import AutoTokenizer  # lazy: transformers (seconds), only for a checkpoint's tokenizer
        self.tok = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        self.name = f"tokenizer of {directory}"

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=True)["input_ids"])

    def decode_token(self, token: int) -> str:
        return self.tok.decode([token])

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        if getattr(self.tok, "chat_template", None):
            out = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
            return [int(i) for i in ids]
        return self.encode(plain_chat_text(messages))


def load_codec(model_source: str, model_name: str, vocab_size: int) -> TextCodec:
    """The checkpoint's tokenizer if it ships one, else the byte codec."""
    d = Path(model_name)
    if model_source == "checkpoint" and ((d / "tokenizer.json").is_file()
                                         or (d / "tokenizer_config.json").is_file()):
        return HFCodec(model_name)
    return ByteCodec(vocab_size)
