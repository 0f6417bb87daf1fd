"""`batchlab replay`: send a batchlab workload to any OpenAI-compatible server and measure
it as `vllm bench serve` does. Needs no torch.

prompts.py  token-id prompts of exact lengths, and the request bodies
client.py   one streaming request: timings from the SSE stream, or the reason it failed
outcome.py  one request's outcome; claims.py checks what the server claimed about it
sender.py   the schedule: each request at its arrival time, or a closed loop
results.py  the outcomes as batchlab tables (requests.csv, summary) and vllm-bench JSON
options.py  the endpoint options (replay, validate --endpoint)
measure.py  one measured replay (the command: experiments/commands/replay.py)"""
