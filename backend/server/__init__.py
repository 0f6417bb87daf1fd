"""`batchlab serve`: the torch backend behind an OpenAI-compatible HTTP API.

engine_loop.py  the engine thread: the scheduler and engine of `batchlab run`, fed by HTTP
text.py         prompt text <-> token ids (the checkpoint's tokenizer, or a byte codec)
protocol.py     request bodies (OpenAI completions and chat), limits, error bodies; every
                field implemented or refused by name
stops.py        stop strings: where a reply ends, and what a stream holds back
responses.py    response and stream-chunk bodies
metrics.py      /metrics: Prometheus, with vLLM's metric names
app.py          the FastAPI application and its routes
listen.py       the listening socket, bound before the model loads
server.py       uvicorn, and the engine thread's start and stop
memory.py       heap trims: a long-running server's memory level
(sampling per request: backend/sampling.py)
Imports backend and core, nothing above them."""
