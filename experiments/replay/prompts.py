"""What replay sends. A workload has lengths, not text, so each prompt is token ids:
exactly prompt_len of them, drawn from a generator seeded by (seed, request index), the
same on every run. Ids below `vocab_size` (default 32000, the batchlab presets' vocab)
are valid for every common tokenizer. Output length is exact: max_tokens with
ignore_eos (a vLLM / SGLang / batchlab extension) and min_tokens = max_tokens, which
servers that know min_tokens but not ignore_eos also honour."""
from __future__ import annotations

import numpy as np

DEFAULT_VOCAB = 32000


def prompt_ids(index: int, length: int, seed: int = 0, vocab_size: int = DEFAULT_VOCAB) -> list[int]:
    rng = np.random.default_rng([seed, index])
    return rng.integers(0, vocab_size, size=length).tolist()


def completion_body(model: str, ids: list[int], output_len: int, *, stream: bool = True) -> dict:
    return {"model": model, "prompt": ids, "max_tokens": output_len, "min_tokens": output_len,
            "ignore_eos": True, "temperature": 0.0, "stream": stream,
            **({"stream_options": {"include_usage": True}} if stream else {})}
