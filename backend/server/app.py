"""The HTTP front end: FastAPI routes over an EngineLoop.

/v1/completions and /v1/chat/completions (SSE streams of one chunk per token, or one
JSON body), /v1/models, /health, /metrics. Bodies are read with a size bound and parsed
here (not by FastAPI), so that every bad request gets an OpenAI-style error body and
the engine never sees it. A client that goes away aborts its request at the next step
boundary, which frees its KV blocks; one that goes away before its body arrived, or lets
it stall BODY_STALL_S, costs one log line (and a 408 for the stall), never a traceback."""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from batchlab.backend.server.engine_loop import EngineLoop, TokenEvent
from batchlab.backend.server.metrics import CONTENT_TYPE_LATEST, ServerMetrics
from batchlab.backend.server.protocol import (APIError, ChatRequest, CompletionRequest, Limits, check_lengths,
                                     parse, single_prompt)
from batchlab.backend.server.responses import DONE, Reply, sse
from batchlab.backend.server.stops import StopMatcher
from batchlab.backend.server.text import TextCodec

log = logging.getLogger(__name__)
_DISCONNECT_POLL_S = 0.25  # how often a non-streaming request checks its client is still there
_FLUSH_WAIT_S = 0.05  # the longest an engine step waits for the previous one's tokens to go out
BODY_STALL_S = 5.0  # a body that sends nothing for this long is dropped (the head's, http_protocol.py)


class ClientGone(Exception):
    """The client closed its connection before its request body arrived: nobody to answer."""


def flusher(aloop: asyncio.AbstractEventLoop):
    """EngineLoop.flush for this event loop: returns once the loop has run what the
    step's tokens woke (the stream writers), or after _FLUSH_WAIT_S. The barrier is a
    callback queued behind those writers' wake-ups, so it runs after them."""
    def flush() -> None:
        done = threading.Event()
        try:
            aloop.call_soon_threadsafe(aloop.call_soon, done.set)
        except RuntimeError:  # the event loop has closed
            return
        done.wait(_FLUSH_WAIT_S)
    return flush


class _RequireKey:
    """ASGI middleware: every /v1 route demands `Authorization: Bearer KEY`; /health and
    /metrics stay open (as vLLM's)."""

    def __init__(self, app, key: str) -> None:
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1"):
            got = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                err = APIError(401, "invalid or missing API key (Authorization: Bearer KEY)",
                               "authentication_error", code="invalid_api_key")
                await JSONResponse(err.body(), err.status)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _StampArrival:
    """ASGI middleware, outermost: a request arrives when its HTTP request reaches the
    app, before routing and body parsing, on the engine loop's clock."""

    def __init__(self, app, clock) -> None:
        self.app, self.clock = app, clock

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})["arrival"] = self.clock()
        await self.app(scope, receive, send)


def _arrival(request: Request, loop: EngineLoop) -> float:
    stamped = getattr(request.state, "arrival", None)
    return loop.clock() if stamped is None else stamped


async def read_json(request: Request, limit: int):
    size = request.headers.get("content-length", "")
    if size.isdigit() and int(size) > limit:
        raise APIError(413, f"request body of {size} bytes exceeds the limit of {limit}")
    buf = bytearray()
    chunks = request.stream()
    while True:
        try:
            buf += await asyncio.wait_for(anext(chunks), BODY_STALL_S)
        except StopAsyncIteration:
            break
        except ClientDisconnect:  # a half-open request: one log line (the handler's), no traceback
            raise ClientGone(f"{_peer(request)} closed the connection after {len(buf)} bytes of its "
                             f"request body") from None
        except TimeoutError:
            log.warning("%s: request body stalled for %.0f s after %d bytes; answered 408",
                        _peer(request), BODY_STALL_S, len(buf))
            raise APIError(408, f"the request body stalled: no byte for {BODY_STALL_S:.0f} s after "
                           f"{len(buf)} bytes", code="request_timeout") from None
        if len(buf) > limit:
            raise APIError(413, f"request body exceeds the limit of {limit} bytes")
    try:
        body = json.loads(buf, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise APIError(400, f"malformed JSON body: {e}") from None
    check_text(body)
    return body


def _peer(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "a client"


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def check_text(body) -> None:
    """A 400 naming the field that holds a string UTF-8 cannot encode (a lone surrogate,
    which JSON's \\uD800 escapes can carry): no text the engine sees can fail later.
    Iterative: a body nested as deep as the JSON parser allows is walked too."""
    todo = [(body, "body", 0)]
    while todo:
        value, where, depth = todo.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise APIError(400, f"{where}: text is not valid Unicode ({e.reason} at character "
                               f"{e.start})", param=where) from None
        elif isinstance(value, dict):
            for k, v in value.items():
                todo.append((k, where, depth + 1))
                todo.append((v, k if depth == 0 else f"{where}.{k}", depth + 1))
        elif isinstance(value, list):
            todo.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))


def create_app(loop: EngineLoop, codec: TextCodec, model_name: str, limits: Limits,
               metrics: ServerMetrics, api_key: str | None = None) -> FastAPI:
    app = FastAPI(title="batchlab serve", docs_url=None, redoc_url=None, openapi_url=None)
    if api_key:
        app.add_middleware(_RequireKey, key=api_key)
    app.add_middleware(_StampArrival, clock=loop.clock)  # added last: runs first
    started = int(time.time())

    @app.exception_handler(APIError)
    async def _api_error(_request: Request, e: APIError) -> JSONResponse:
        return JSONResponse(e.body(), e.status)

    @app.exception_handler(ClientGone)
    async def _client_gone(_request: Request, e: ClientGone) -> Response:
        log.warning("%s", e)
        return Response(status_code=499)  # nobody reads it

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, e: Exception) -> JSONResponse:
        log.exception("request failed")
        err = APIError(500, f"internal error: {type(e).__name__}: {e}", "server_error")
        return JSONResponse(err.body(), 500)

    @app.get("/health")
    async def health() -> Response:
        if loop.error or not loop.running:
            return JSONResponse(APIError(503, loop.error or "engine not running", "server_error").body(), 503)
        return Response(status_code=200)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": started,
                                            "owned_by": "batchlab", "root": model_name,
                                            "max_model_len": limits.max_model_len}]}

    def check_model(name: str) -> None:
        if name != model_name:
            raise APIError(404, f"the model {name!r} does not exist; this server serves {model_name!r}",
                           param="model", code="model_not_found")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        arrival = _arrival(request, loop)
        req = parse(CompletionRequest, await read_json(request, limits.max_body_bytes))
        check_model(req.model)
        prompt = single_prompt(req.prompt)
        ids = codec.encode(prompt) if isinstance(prompt, str) else list(prompt)
        return await generate(request, req, ids, req.max_tokens, False, arrival)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        arrival = _arrival(request, loop)
        req = parse(ChatRequest, await read_json(request, limits.max_body_bytes))
        check_model(req.model)
        ids = codec.chat_prompt([{"role": m.role, "content": m.text()} for m in req.messages])
        return await generate(request, req, ids, req.max_completion_tokens or req.max_tokens,
                              True, arrival)

    async def generate(request: Request, req, ids: list[int], max_tokens: int | None, chat: bool,
                       arrival: float) -> Response:
        params = req.sampling(loop.temperature)
        max_tokens = check_lengths(ids, max_tokens, req.min_tokens, limits)
        if loop.error or not loop.running:
            raise APIError(503, loop.error or "the engine is not running", "server_error")
        r = loop.new_request(ids, max_tokens, arrival)
        reason = loop.reject_reason(r)
        if reason:
            raise APIError(400, reason, param="max_tokens")
        events: asyncio.Queue[TokenEvent] = asyncio.Queue()
        aloop = asyncio.get_running_loop()
        if loop.flush is None:
            loop.flush = flusher(aloop)

        def emit(ev: TokenEvent) -> None:  # called on the engine thread
            try:
                aloop.call_soon_threadsafe(events.put_nowait, ev)
            except RuntimeError:  # the event loop has closed: nobody is listening
                pass

        stops = req.stop_strings
        matcher = StopMatcher(stops, codec.decode_token, req.min_tokens) if stops else None
        loop.submit(r, emit, params, matcher)
        reply = Reply(r.id, model_name, chat, len(ids))
        if req.stream:
            return StreamingResponse(_stream(r.id, reply, events, req.include_usage),
                                     media_type="text/event-stream")
        return await _collect(request, r.id, reply, events)

    async def _stream(rid: int, reply: Reply, events: asyncio.Queue, usage: bool):
        done = False
        try:
            while True:
                ev = await events.get()
                if ev.error:  # mid-stream: an error event, then the end of the stream
                    yield sse(APIError(ev.status, ev.error, "server_error").body())
                    break
                text = codec.decode_token(ev.token) if ev.text is None else ev.text
                reply.texts.append(text)
                reply.finish_reason = ev.finish_reason
                yield reply.chunk(text, ev.index == 0, ev.finished)
                if ev.finished:
                    done = True
                    break
            if done and usage:
                yield reply.usage_chunk()
            yield DONE
        finally:
            if not done:  # the client left (the response was cancelled) or it failed
                loop.abort(rid)

    async def _collect(request: Request, rid: int, reply: Reply, events: asyncio.Queue) -> Response:
        try:
            while True:
                try:
                    ev = await asyncio.wait_for(events.get(), _DISCONNECT_POLL_S)
                except TimeoutError:
                    if await request.is_disconnected():
                        loop.abort(rid)
                        return Response(status_code=499)  # nobody reads it
                    continue
                if ev.error:
                    raise APIError(ev.status, ev.error, "server_error" if ev.status >= 500
                                   else "invalid_request_error")
                reply.texts.append(codec.decode_token(ev.token) if ev.text is None else ev.text)
                reply.finish_reason = ev.finish_reason
                if ev.finished:
                    return JSONResponse(reply.full())
        except asyncio.CancelledError:
            loop.abort(rid)
            raise

    return app
