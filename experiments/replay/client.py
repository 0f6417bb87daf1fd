"""One streaming completion, timed from its SSE stream as `vllm bench serve` times it:
TTFT from just before the request is sent to the first chunk with a choice; one
inter-token gap per further chunk; E2E to the end of the stream. Every way it can go
wrong (connection refused, an HTTP error, a stream cut mid-way, a timeout, a body that
is not the OpenAI shape) ends as a failed Outcome with a one-line reason."""
from __future__ import annotations

import asyncio
import json
import time

import httpx

from batchlab.experiments.replay.claims import check_claims
from batchlab.experiments.replay.outcome import Outcome


def _error_message(status: int, body: bytes) -> str:
    try:
        err = json.loads(body).get("error")
        msg = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError):
        msg = None
    text = msg or body.decode("utf-8", "replace").strip() or "no body"
    return f"HTTP {status}: {' '.join(str(text).split())[:300]}"


def _take(out: Outcome, data: str) -> bool:
    """One SSE data payload; True when the stream says it is done."""
    if data == "[DONE]":
        return True
    try:
        obj = json.loads(data)
    except ValueError:
        raise ValueError(f"a stream chunk is not JSON: {data[:80]!r}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"a stream chunk is not a JSON object: {data[:80]!r}")
    if obj.get("error"):
        err = obj["error"]
        raise ValueError(f"error in stream: {err.get('message', err) if isinstance(err, dict) else err}")
    out.response_id = out.response_id or str(obj.get("id", ""))
    choices = obj.get("choices")
    if choices:
        t = time.perf_counter()
        if out.first < 0:
            out.first = t
        out.token_times.append(t)
        c = choices[0]
        out.text += c.get("text") or (c.get("delta") or {}).get("content") or ""
    usage = obj.get("usage")
    if usage is not None:  # kept as sent: claims.py judges it
        if not isinstance(usage, dict):
            raise ValueError(f"usage is not a JSON object: {str(usage)[:80]!r}")
        out.usage_tokens = usage.get("completion_tokens")
        out.usage_prompt_tokens = usage.get("prompt_tokens")
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            out.cached_tokens = details.get("cached_tokens")
    return False


async def send(client: httpx.AsyncClient, url: str, body: dict, out: Outcome,
               headers: dict[str, str], timeout_s: float) -> Outcome:
    """POST `body` to `url` and stream the reply into `out` (which it returns)."""
    done = False
    out.start = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, json=body, headers=headers) as resp:
                if resp.status_code != 200:
                    out.error = _error_message(resp.status_code, await resp.aread())
                    return out
                async for line in resp.aiter_lines():
                    if line.startswith("data:"):
                        done = _take(out, line[5:].strip())
                        if done:
                            break
    except TimeoutError:
        out.error = f"timed out after {timeout_s:g} s ({len(out.token_times)} tokens received)"
    except httpx.ConnectError as e:
        out.error = f"cannot connect to {url}: {e or 'connection refused'}"
    except (httpx.RemoteProtocolError, httpx.ReadError) as e:
        out.error = (f"the server closed the stream mid-way after {len(out.token_times)} tokens "
                     f"({type(e).__name__}: {e})")
    except httpx.HTTPError as e:
        out.error = f"{type(e).__name__}: {e}"
    except ValueError as e:
        out.error = str(e)
    out.end = time.perf_counter()
    if not out.error and not done:
        out.error = f"the stream ended without [DONE] after {len(out.token_times)} tokens"
    if not out.error and not out.token_times:
        out.error = "the stream carried no tokens"
    if not out.error:
        out.invalid = check_claims(out)
    return out
