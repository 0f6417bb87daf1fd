"""`batchlab serve`: the torch backend behind an OpenAI-compatible HTTP API.

engine_loop.py  the engine thread: the scheduler and engine of `batchlab run`, fed by HTTP
text.py         prompt text <-> token ids (the checkpoint's tokenizer, or a byte codec)
protocol.py     request bodies (OpenAI completions and chat), limits, error bodies
responses.py    response and stream-chunk bodies
metrics.py      /metrics: Prometheus, with vLLM's metric names
app.py          the FastAPI application and its routes
Imports backend and core, nothing above them."""
