"""The prompt token ids a request without any gets on the real backend: deterministic,
and consistent with its prefix hashes (equal hash chain, equal tokens), so that a real
run hits the prefix cache exactly where the simulation does and the reused KV is the KV
of the very tokens the request would have computed."""
from __future__ import annotations

import numpy as np

from batchlab.core.prefix_cache import chain
from batchlab.core.request import Request


def synthetic_prompt(request_id: int, prompt_len: int, vocab_size: int, seed: int = 0) -> np.ndarray:
    """The prompt ids a request without ids or hashes gets: the same on every run."""
    rng = np.random.default_rng([seed, request_id])
    return rng.integers(0, vocab_size, size=prompt_len, dtype=np.int64)


def request_prompt(request: Request, vocab_size: int, seed: int = 0) -> np.ndarray:
    """Synthetic ids for `request`: hash block i (hash_block_size tokens, the last one
    partial) is drawn from a generator keyed by the chained key of hashes 0..i; tokens
    past the hashed blocks, from the request's own generator."""
    hashes = request.prefix_hashes
    if not hashes:
        return synthetic_prompt(request.id, request.prompt_len, vocab_size, seed)
    hbs, n = request.hash_block_size, request.prompt_len
    parts = []
    for i, key in enumerate(chain(hashes[:-(-n // hbs)])):
        rng = np.random.default_rng([seed, key & (2**64 - 1), 1])
        parts.append(rng.integers(0, vocab_size, size=min(hbs, n - i * hbs), dtype=np.int64))
    covered = sum(len(p) for p in parts)
    if covered < n:
        parts.append(synthetic_prompt(request.id, n, vocab_size, seed)[covered:])
    return np.concatenate(parts)
