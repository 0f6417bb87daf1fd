"""Which server and model replay talks to: the URL given (a base such as
http://127.0.0.1:8000, with or without /v1), and the model named, or else the first one
the server lists at /v1/models."""
from __future__ import annotations

import os
from urllib.parse import urlparse

import httpx

from batchlab.experiments.errors import UserError
from batchlab.experiments.replay.options import API_KEY_ENV
from batchlab.experiments.replay.sender import Target


def api_base(endpoint: str) -> str:
    u = urlparse(endpoint)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UserError(f"--endpoint {endpoint!r}: expected a URL such as http://127.0.0.1:8000")
    base = endpoint.rstrip("/")
    for suffix in ("/completions", "/chat/completions"):
        base = base.removesuffix(suffix)
    return base if base.endswith("/v1") else base + "/v1"


def served_model(base: str, headers: dict[str, str], timeout_s: float = 10.0) -> str:
    """The first model the server lists; a one-line error if it cannot say."""
    try:
        r = httpx.get(f"{base}/models", headers=headers, timeout=timeout_s, trust_env=False)
    except httpx.HTTPError as e:
        raise UserError(f"cannot reach {base}/models to find the model ({type(e).__name__}: {e}); "
                        f"is the server up? Or pass --model") from None
    try:
        models = r.json()["data"] if r.status_code == 200 else None
        name = models[0]["id"] if models else None
    except (ValueError, KeyError, IndexError, TypeError):
        name = None
    if not name:
        raise UserError(f"{base}/models answered HTTP {r.status_code} without a model; pass --model")
    return str(name)


def make_target(endpoint: str, model: str | None, api_key: str | None, *, timeout_s: float,
                vocab_size: int, seed: int) -> Target:
    base = api_base(endpoint)
    key = api_key or os.environ.get(API_KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if not timeout_s > 0:
        raise UserError(f"--request-timeout must be > 0, got {timeout_s}")
    if vocab_size < 1:
        raise UserError(f"--vocab-size must be >= 1, got {vocab_size}")
    return Target(f"{base}/completions", model or served_model(base, headers), headers, timeout_s,
                  vocab_size, seed)
